/** Starting netbox-script against the test fleet, and waiting for its decisions. */
import { mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pino } from "pino";
import { startHandler, toHandlerConfig, type DecisionEvent, type Handler } from "@fleetd/netbox-script";
import { listDevices, patchDevice, type DeviceRecord } from "@fleetd/platform/netbox";
import type { TinkerbellEffects } from "@fleetd/platform/tinkerbell";
import { exampleNodesText, type Fleet } from "./fixture.js";

/** The example plus a TPM 1.2 machine (its EK approved), for the handler's rules. */
export function handlerNodesText(): string {
  return (
    exampleNodesText() +
    `
  legacy-1:
    serial: LEGACY-0001
    model: nuc13
    class: ubuntu
    role: worker
    switch: { device: tor-a1, port: ethernet1/1/4 }
    address: { cidr: 10.20.0.41/24, gateway: 10.20.0.1 }
    installDisk: /dev/sda
    bmc: { type: none }
    tpm: "1.2"
    ek: [{ alg: rsa, sha256: "${"12".repeat(32)}" }]
`
  );
}

export class Decisions {
  readonly events: DecisionEvent[] = [];
  private waiters: (() => void)[] = [];
  push(e: DecisionEvent): void {
    this.events.push(e);
    for (const w of this.waiters.splice(0)) w();
  }
  /** Resolves with the first decision at index >= from matching `pred`. */
  async wait(from: number, pred: (e: DecisionEvent) => boolean, what: string, timeoutMs = 60_000): Promise<DecisionEvent> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.events.slice(from).find(pred);
      if (hit) return hit;
      const left = end - Date.now();
      if (left <= 0) throw new Error(`no decision: ${what} (decisions so far: ${JSON.stringify(this.events.map((e) => [e.deviceId, e.decision.outcome, e.job.source]))})`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }
}

export interface HandlerRig {
  stateDir: string;
  nodesFile: string;
  decisions: Decisions;
  /** `netboxUrl`: where the handler reaches NetBox (default: NetBox itself; a race test puts a proxy there). */
  /** `tinkerbell`: the platform side to use (default: none, intents are only recorded). */
  start(opts?: { startWorker?: boolean; controlPlanes?: boolean; netboxUrl?: string; tinkerbell?: TinkerbellEffects }): Promise<Handler>;
}

export function handlerRig(f: Fleet): HandlerRig {
  const stateDir = mkdtempSync(join(f.dir, "state-"));
  const nodesFile = join(f.dir, "handler-nodes.yaml");
  writeFileSync(nodesFile, handlerNodesText());
  const decisions = new Decisions();
  return {
    stateDir, nodesFile, decisions,
    start: (opts = {}) =>
      startHandler(
        toHandlerConfig(
          f.config(f.handler.token, {
            ...(opts.netboxUrl ? { netbox: { url: opts.netboxUrl, token: f.handler.token, timeoutMs: 30_000 } } : {}),
            handler: { listen: { host: "127.0.0.1", port: f.handlerPort }, stateDir, nodesFile, reconcileIntervalSeconds: 3600 },
            features: { controlPlanes: opts.controlPlanes ?? false },
          }),
        ),
        { logger: pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" }), onDecision: (e) => decisions.push(e), startWorker: opts.startWorker ?? true, ...(opts.tinkerbell ? { tinkerbell: opts.tinkerbell } : {}) },
      ),
  };
}

export async function device(f: Fleet, name: string): Promise<DeviceRecord> {
  const d = (await listDevices(f.admin, { name: [name] }))[0];
  if (!d) throw new Error(`no device ${name}`);
  return d;
}

/** Sets desired_action as `token`'s user would in the UI (a PATCH through the REST API). */
export async function requestAction(f: Fleet, token: string, name: string, action: string | null): Promise<DeviceRecord> {
  const d = await device(f, name);
  return patchDevice(f.client(token), d.id, { custom_fields: { desired_action: action } }, null, `test: ${action}`);
}
