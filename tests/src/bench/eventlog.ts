/**
 * Event log benchmarks, each with a floor measured in the same run on the same input:
 *  - parse + replay of every conformance log (MB/s), floor: node:crypto SHA-256 over the same bytes;
 *  - the same plus interpretation (Secure Boot state, certificates, findings);
 *  - full evidence verification per second on one core — quote (TPMS_ATTEST decode, magic/type/nonce,
 *    pcrDigest, RSASSA-SHA256 signature with the AK) + log replay against the quoted PCRs + the `ubuntu`
 *    profile — on the real GCE COS-85 attestation (quotes/go-tpm-tools_gce-cos-85-nonce9009.json);
 *    floor: the bare RSA-2048 signature verification it contains.
 *
 *   node tests/dist/bench/eventlog.js            (alone; FLEETD_BENCH_MS sets the budget per row, default 1000)
 */
import { strict as assert } from "node:assert";
import { createHash, createVerify, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { decodeExact } from "@fleetd/verify/codec";
import { interpretLog, parseEventLog, replayLog } from "@fleetd/verify/eventlog";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, profileAuthorityRefs } from "@fleetd/verify/policy";
import { conformance } from "@fleetd/testkit/conformance";
import { corpusLogs } from "@fleetd/testkit/eventlogCorpus";
import { type PcrValues, verifyQuote } from "@fleetd/verify/attest";
import { keyObjectFromTpmPublic, TPMT_PUBLIC, TPMT_SIGNATURE, type TPMT_PUBLIC as TpmtPublic } from "@fleetd/verify/tpm";

export interface EventlogBenchRow {
  name: string;
  value: number;
  unit: string;
  floor: number;
  floorName: string;
  floorUnit: string;
  /** value / floor. */
  ratio: number;
}

const BUDGET = Number(process.env["FLEETD_BENCH_MS"] ?? 1000);

function perSecond(fn: () => void): number {
  for (let i = 0; i < 3; i++) fn();
  let n = 0;
  const start = performance.now();
  let now = start;
  while (now - start < BUDGET) {
    fn();
    n++;
    now = performance.now();
  }
  return n / ((now - start) / 1000);
}

const fromHex = (h: string) => new Uint8Array(Buffer.from(h, "hex"));

interface Cos85 {
  ak_pub_tpmt_public_hex: string;
  expected_nonce_hex: string;
  event_log_base64: string;
  quotes: { quote_tpms_attest_hex: string; raw_sig_tpmt_signature_hex: string; pcrs: { hash: string; pcrs: Record<string, string> } }[];
}

/** The quote check of the attestation server (attest/verifyQuote). Returns the quoted PCR values. */
function checkQuote(akPublic: TpmtPublic, attestBytes: Uint8Array, sigBytes: Uint8Array, nonce: Uint8Array, pcrs: PcrValues): PcrValues {
  const v = verifyQuote({ akPublic, quote: attestBytes, signature: sigBytes, pcrs, expectedExtraData: nonce });
  if (v.verdict !== "pass") throw new Error(`bench quote refused: ${JSON.stringify(v.reasons)}`);
  return pcrs;
}

export function benchEventlog(): EventlogBenchRow[] {
  const logs = corpusLogs().map((l) => l.bytes);
  const bytes = logs.reduce((a, b) => a + b.length, 0);
  const mb = bytes / 1e6;
  const sha256 = perSecond(() => {
    for (const b of logs) createHash("sha256").update(b).digest();
  });
  const parseReplay = perSecond(() => {
    for (const b of logs) replayLog(parseEventLog(b));
  });
  const full = perSecond(() => {
    for (const b of logs) {
      const log = parseEventLog(b);
      interpretLog(log, new Set(replayLog(log).extended.keys()));
    }
  });

  const cos = JSON.parse(readFileSync(conformance("quotes/go-tpm-tools_gce-cos-85-nonce9009.json"), "utf8")) as Cos85;
  const akPublic = decodeExact(TPMT_PUBLIC, fromHex(cos.ak_pub_tpmt_public_hex));
  const ak = keyObjectFromTpmPublic(akPublic);
  const q = cos.quotes.find((x) => x.pcrs.hash === "sha256")!;
  const attestBytes = fromHex(q.quote_tpms_attest_hex);
  const sigBytes = fromHex(q.raw_sig_tpmt_signature_hex);
  const rawSig = decodeExact(TPMT_SIGNATURE, sigBytes).signature;
  const nonce = fromHex(cos.expected_nonce_hex);
  const logBytes = new Uint8Array(Buffer.from(cos.event_log_base64, "base64"));
  const profile = loadProfile("ubuntu");
  const auth = resolveAuthorities(profileAuthorityRefs(profile));
  const quoted: PcrValues = new Map([[0x000b, new Map(Object.entries(q.pcrs.pcrs).map(([k, v]) => [Number(k), fromHex(v)] as const))]]);
  const verifyEvidence = () => {
    const pcrs = checkQuote(akPublic, attestBytes, sigBytes, nonce, quoted);
    return evaluateProfile(profile, { log: parseEventLog(logBytes), pcrs }, auth);
  };
  const once = verifyEvidence();
  assert.deepEqual(once.pcrs.filter((p) => p.role === "enforced" && !p.trusted), [], "the COS-85 log must replay to its quote");
  assert.ok(once.pcrs.every((p) => p.banks["sha256"] !== "mismatch"));
  const evidence = perSecond(verifyEvidence);
  const rsa = perSecond(() => {
    if (rawSig.kind !== "rsassa") throw new Error("unreachable");
    createVerify("sha256").update(attestBytes).verify(ak, rawSig.sig);
  });

  return [
    { name: "event log parse + replay (all banks)", value: parseReplay * mb, unit: "MB/s", floor: sha256 * mb, floorName: "node:crypto SHA-256 over the same bytes", floorUnit: "MB/s", ratio: parseReplay / sha256 },
    { name: "event log parse + replay + interpret", value: full * mb, unit: "MB/s", floor: sha256 * mb, floorName: "node:crypto SHA-256 over the same bytes", floorUnit: "MB/s", ratio: full / sha256 },
    { name: "evidence verification (quote + replay + policy), 1 core", value: evidence, unit: "evidence/s", floor: rsa, floorName: "RSA-2048 signature verification alone", floorUnit: "verifications/s", ratio: evidence / rsa },
  ];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log("Event log and evidence verification (per core)");
  for (const r of benchEventlog()) {
    const f = (v: number) => v.toFixed(v < 100 ? 2 : 0);
    console.log(`  ${r.name.padEnd(58)} ${f(r.value).padStart(10)} ${r.unit.padEnd(11)} floor (${r.floorName}): ${f(r.floor)} ${r.floorUnit}   ratio ${r.ratio.toFixed(3)}`);
  }
}
