/** Where the running lab keeps its state: `$FLEETD_LAB_DIR`, default `$FLEETD_CACHE/lab` (~/.cache/fleetd/lab). */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { fleetdCache } from "../harness/podman.js";

export const STATE_FILE = "state.json";
export const PID_FILE = "daemon.pid";
export const LOG_FILE = "daemon.log";

export const LabState = z.object({
  pid: z.number().int(),
  readyInSeconds: z.number(),
  startedAt: z.string(),
  dir: z.string(),
  consoles: z.string(),
  endpoints: z.object({
    netbox: z.object({ url: z.string(), token: z.string(), user: z.string() }),
    machines: z.record(z.string(), z.object({ kind: z.string(), mac: z.string(), serial: z.string() }).passthrough()),
  }).passthrough(),
});
export type LabState = z.infer<typeof LabState>;

export function labDir(): string {
  return process.env["FLEETD_LAB_DIR"] || join(fleetdCache(), "lab");
}

/** The running lab's state, or undefined when none is up (no state file yet, or a garbled one). */
export function readLabState(dir = labDir()): LabState | undefined {
  try {
    return LabState.parse(JSON.parse(readFileSync(join(dir, STATE_FILE), "utf8")));
  } catch {
    return undefined;
  }
}
