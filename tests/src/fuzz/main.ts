/**
 * `pnpm fuzz [--runs N] [--only TARGET]` — every fuzz target with N random and mutated inputs each
 * (default 100000). The test suite runs the same targets with fewer inputs.
 */
import { parseArgs } from "node:util";
import { fuzzEventlog, fuzzUefi } from "./eventlog.js";
import { fuzzTpm, type FuzzResult } from "./tpm.js";
import { fuzzX509 } from "./x509.js";

const { values } = parseArgs({ options: { runs: { type: "string", default: "100000" }, only: { type: "string" } } });
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs <= 0) throw new Error("--runs must be a positive integer");

const targets: Record<string, (runs: number) => FuzzResult> = {
  "tpm-structures": fuzzTpm,
  eventlog: (runs) => fuzzEventlog(runs),
  "uefi-structures": (runs) => fuzzUefi(runs),
  x509: (runs) => fuzzX509(runs),
};

for (const [name, fn] of Object.entries(targets)) {
  if (values.only && values.only !== name) continue;
  const r = fn(runs);
  console.log(`${r.target}: ${r.runs} inputs, no crash or hang, ${(r.ms / 1000).toFixed(1)} s (${Math.round(r.runs / (r.ms / 1000))}/s)`);
}
