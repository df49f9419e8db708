/**
 * The real event logs of shared/conformance/eventlogs, with the PCR values recorded next to them:
 * `<name>.pcrs.json` (real values from the machine / a signed quote) or computed_replay_values.json
 * (independently computed, regression only). Read in place, never copied.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { PcrValues } from "@fleetd/verify/attest";
import { parsePcrFile } from "@fleetd/verify/eventlog";
import { conformance } from "./conformance.js";

export interface CorpusLog {
  /** Path relative to eventlogs/, e.g. "go-tpm-tools/rhel8-uefi.bin". */
  rel: string;
  bytes: Uint8Array;
  /** PCR values and where they come from. */
  pcrs?: { values: PcrValues; origin: "real" | "computed" };
}

const DIRS = ["go-tpm-tools", "go-attestation", "tpm2-tss", "keylime", "tpm2-tools"];

export function corpusLogs(): CorpusLog[] {
  const root = conformance("eventlogs");
  const computed = JSON.parse(readFileSync(join(root, "computed_replay_values.json"), "utf8")) as {
    logs: Record<string, { computed_pcrs: Record<string, Record<string, string>> }>;
  };
  const out: CorpusLog[] = [];
  for (const dir of DIRS) {
    for (const f of readdirSync(join(root, dir)).filter((x) => x.endsWith(".bin")).sort()) {
      const rel = `${dir}/${f}`;
      const bytes = new Uint8Array(readFileSync(join(root, rel)));
      const pj = join(root, rel.replace(/\.bin$/, ".pcrs.json"));
      let pcrs: CorpusLog["pcrs"];
      if (existsSync(pj)) pcrs = { values: parsePcrFile(readFileSync(pj, "utf8"), pj), origin: "real" };
      else if (computed.logs[rel]) pcrs = { values: parsePcrFile(JSON.stringify({ pcrs: computed.logs[rel]!.computed_pcrs }), rel), origin: "computed" };
      out.push({ rel, bytes, ...(pcrs ? { pcrs } : {}) });
    }
  }
  return out;
}
