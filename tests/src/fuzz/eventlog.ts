/**
 * Fuzz targets: the event log parser (and everything downstream of it: replay, interpretation, Secure Boot
 * state, policy evaluation, JSON report) and the EFI_SIGNATURE_LIST / UEFI_VARIABLE_DATA / device path
 * decoders, on random bytes and on mutations of the real conformance logs and of writer-built logs.
 * Every input must either parse, or fail with a ParseError whose offset lies inside the input; nothing
 * downstream of a successful parse may throw; no input may take longer than HANG_MS.
 *
 *   node tests/dist/fuzz/eventlog.js --runs 100000 [--seed N]      (the full run)
 * The normal test suite runs the same targets with fewer inputs (eventlog.test.ts).
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import fc from "fast-check";
import { ParseError } from "@fleetd/verify/codec";
import { interpretLog, parseEventLog, eventLogReport, replayLog, parseDevicePath, parseSignatureLists, parseVariableData } from "@fleetd/verify/eventlog";
import { EventLogWriter, signatureDatabase } from "@fleetd/testkit/eventlogWriter";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, profileAuthorityRefs } from "@fleetd/verify/policy";
import { conformance } from "@fleetd/testkit/conformance";
import { corpusLogs } from "@fleetd/testkit/eventlogCorpus";

import type { FuzzResult } from "./tpm.js";

const HANG_MS = 2000;

function within(bytes: Uint8Array, e: unknown): void {
  if (e instanceof ParseError && e.offset >= 0 && e.offset <= bytes.length) return;
  throw e;
}

function timed(what: string, fn: () => void): void {
  const t0 = performance.now();
  fn();
  const ms = performance.now() - t0;
  if (ms > HANG_MS) throw new Error(`${what} took ${ms.toFixed(0)} ms (limit ${HANG_MS})`);
}

/** Apply byte flips, 32-bit field overwrites with extreme values, a cut, an insertion. */
const mutation = fc.record({
  flips: fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
  words: fc.array(fc.tuple(fc.nat(), fc.constantFrom(0, 1, 0x7f, 0xff, 0xffff, 0x7fffffff, 0xffffffff, 0x80000000, 0x10000)), { maxLength: 3 }),
  cut: fc.option(fc.nat(), { nil: undefined }),
  insert: fc.option(fc.tuple(fc.nat(), fc.uint8Array({ maxLength: 16 })), { nil: undefined }),
});
type Mutation = typeof mutation extends fc.Arbitrary<infer T> ? T : never;

function mutate(seed: Uint8Array, m: Mutation): Uint8Array {
  let b = new Uint8Array(seed);
  if (b.length === 0) return b;
  for (const [at, v] of m.flips) b[at % b.length] = v;
  const dv = new DataView(b.buffer);
  for (const [at, v] of m.words) if (b.length >= 4) dv.setUint32((at % (b.length - 3)) & ~3, v >>> 0, true);
  if (m.insert) {
    const at = m.insert[0] % (b.length + 1);
    b = new Uint8Array(Buffer.concat([b.subarray(0, at), m.insert[1], b.subarray(at)]));
  }
  if (m.cut !== undefined) b = b.subarray(0, m.cut % (b.length + 1));
  return b;
}

function logSeeds(): Uint8Array[] {
  const seeds = corpusLogs().map((l) => l.bytes);
  const w = new EventLogWriter("crypto-agile").startupLocality(3).separator(7).efiAction(5, "Exit Boot Services Invocation");
  seeds.push(w.bytes(), new EventLogWriter("sha1").separator(0).bytes());
  return seeds;
}

export function fuzzEventlog(runs: number, seed?: number): FuzzResult {
  const seeds = logSeeds();
  const profile = loadProfile("ubuntu");
  const auth = resolveAuthorities(profileAuthorityRefs(profile));
  const start = performance.now();
  const input = fc.oneof(
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 512 }) },
    { weight: 4, arbitrary: fc.tuple(fc.nat(seeds.length - 1), mutation).map(([i, m]) => mutate(seeds[i]!, m)) },
  );
  fc.assert(
    fc.property(input, (bytes) => {
      timed(`log of ${bytes.length} bytes`, () => {
        let log;
        try {
          log = parseEventLog(bytes);
        } catch (e) {
          within(bytes, e);
          return;
        }
        const replay = replayLog(log);
        const mb = interpretLog(log, new Set(replay.extended.keys()));
        JSON.stringify(eventLogReport(log, replay, mb), (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
        evaluateProfile(profile, { log, replay }, auth);
      });
    }),
    { numRuns: runs, ...(seed !== undefined ? { seed } : {}) },
  );
  return { target: "eventlog", runs, ms: performance.now() - start };
}

function uefiSeeds(): Uint8Array[] {
  // Real PK/KEK/db/dbx contents and device paths, from the conformance logs' PCR 7 / PCR 4 events.
  const out: Uint8Array[] = [signatureDatabase("77fa9abd-0359-4d32-bd60-28f4e78f784b", [new Uint8Array(64).fill(0x30)], [new Uint8Array(32)])];
  for (const rel of ["go-tpm-tools/rhel8-uefi.bin", "go-attestation/option_rom_eventlog.bin", "keylime/binary_bios_measurements-secureboot.bin"]) {
    const log = parseEventLog(new Uint8Array(readFileSync(conformance(`eventlogs/${rel}`))));
    for (const e of log.events) {
      if (e.pcr === 7 && e.type === 0x80000001) out.push(e.data);
      if (e.type === 0x80000003 || e.type === 0x80000004) out.push(e.data.subarray(32));
    }
  }
  return out;
}

export function fuzzUefi(runs: number, seed?: number): FuzzResult {
  const seeds = uefiSeeds();
  const start = performance.now();
  const input = fc.oneof(
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 256 }) },
    { weight: 4, arbitrary: fc.tuple(fc.nat(seeds.length - 1), mutation).map(([i, m]) => mutate(seeds[i]!, m)) },
  );
  fc.assert(
    fc.property(input, (bytes) => {
      timed(`UEFI blob of ${bytes.length} bytes`, () => {
        for (const f of [parseSignatureLists, parseVariableData, parseDevicePath] as ((b: Uint8Array) => unknown)[]) {
          try {
            f(bytes);
          } catch (e) {
            within(bytes, e);
          }
        }
        try {
          parseSignatureLists(parseVariableData(bytes).data);
        } catch (e) {
          if (!(e instanceof ParseError)) throw e;
        }
      });
    }),
    { numRuns: runs, ...(seed !== undefined ? { seed } : {}) },
  );
  return { target: "uefi-structures", runs, ms: performance.now() - start };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { runs: { type: "string", default: "100000" }, seed: { type: "string" } } });
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs <= 0) throw new Error("--runs must be a positive integer");
  const seed = values.seed !== undefined ? Number(values.seed) : undefined;
  for (const fn of [fuzzEventlog, fuzzUefi]) {
    const r = fn(runs, seed);
    console.log(`${r.target}: ${r.runs} inputs, no crash or hang, ${(r.ms / 1000).toFixed(1)} s (${Math.round(r.runs / (r.ms / 1000))}/s)`);
  }
}
