/**
 * Issue 10, the policy half: every bank the quote carries and the profile accepts must be explained by the log.
 * One matching bank is not enough — the values of another bank would be the machine's choice, which is the room
 * the re-cut attack needs. Each rule below has a case that passed before the rule existed.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, test } from "node:test";
import type { PcrValues } from "@fleetd/verify/attest";
import { EV, parseEventLog } from "@fleetd/verify/eventlog";
import type { EventLogWriter } from "@fleetd/testkit/eventlogWriter";
import { bootScenario, type LabKeys, makeLabKeys, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, type Evaluation, parseProfile, profileAuthorityRefs } from "@fleetd/verify/policy";

let keys: LabKeys;
let site: string;
before(async () => {
  keys = await makeLabKeys();
  site = writeSiteAuthorities(mkdtempSync(join(tmpdir(), "fleetd-site-")), keys);
});

const S256 = TPM_ALG.SHA256;
const S384 = TPM_ALG.SHA384;
function judge(w: EventLogWriter, pcrs: PcrValues, log = w.bytes()): Evaluation {
  const p = loadProfile("hookos");
  return evaluateProfile(p, { log: parseEventLog(log), pcrs }, resolveAuthorities(profileAuthorityRefs(p), site));
}
const checks = (v: Evaluation) => [...new Set(v.reasons.map((r) => r.check))].sort();
/** The values of `banks`, PCRs 0–15, as a TPM that measured `w` holds them (PCRs nothing extended stay 0). */
function quoted(w: EventLogWriter, banks: number[], pcrs = Array.from({ length: 16 }, (_, i) => i)): PcrValues {
  const all = w.expectedPcrs();
  return new Map(
    banks.map((a) => {
      const m = all.get(a as 11) ?? new Map<number, Uint8Array>();
      const size = a === S384 ? 48 : a === TPM_ALG.SHA512 ? 64 : a === TPM_ALG.SHA1 ? 20 : 32;
      return [a, new Map(pcrs.map((p) => [p, m.get(p) ?? new Uint8Array(size)]))];
    }),
  );
}
/** Values no log explains: what a machine picks when nothing compares them (here: a marker byte). */
function arbitrary(size: number, pcrs: number[]): Map<number, Uint8Array> {
  return new Map(pcrs.map((p) => [p, new Uint8Array(size).fill(0xa0 + p)]));
}

test("control: a SHA-256 + SHA-384 boot, both banks quoted and logged, passes and uses both banks", () => {
  const w = bootScenario("hookos", keys, { banks: [S256, S384] });
  const v = judge(w, quoted(w, [S256, S384]));
  assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
  assert.deepEqual(v.banksUsed, ["sha256", "sha384"]);
});

test("a quoted accepted bank the log does not carry fails (bank-not-in-log), instead of being skipped as no-bank", () => {
  // The log is SHA-256 only; the quote also carries SHA-384 PCRs 0–15 whose values nothing explains.
  const w = bootScenario("hookos", keys, { banks: [S256] });
  const pcrs = quoted(w, [S256]);
  pcrs.set(S384, arbitrary(48, Array.from({ length: 16 }, (_, i) => i)));
  const v = judge(w, pcrs);
  assert.equal(v.verdict, "fail");
  assert.deepEqual(checks(v), ["bank-not-in-log"]);
  assert.match(v.reasons[0]?.detail ?? "", /the quote has sha384 PCR values but the event log carries no sha384 digests \(log banks: sha256\)/);
  assert.equal(v.pcrs.find((p) => p.pcr === 0)?.banks["sha384"], "no-bank");
});

test("an accepted bank the log carries but the quote lacks fails (bank-not-quoted): the banks must agree", () => {
  const w = bootScenario("hookos", keys, { banks: [S256, S384] });
  const v = judge(w, quoted(w, [S256]));
  assert.deepEqual(checks(v), ["bank-not-quoted"]);
  assert.match(v.reasons[0]?.detail ?? "", /the event log carries sha384 digests but the quote has no sha384 PCR values \(quoted banks: sha256\)/);
  // SHA-1 is not accepted by hookos: a log carrying it need not be quoted in it (the honest client quotes SHA-256).
  const sha1 = bootScenario("hookos", keys, { banks: [TPM_ALG.SHA1, S256] });
  assert.equal(judge(sha1, quoted(sha1, [S256])).verdict, "pass");
});

test("an enforced PCR must replay in every quoted accepted bank: matching in SHA-256 is not enough", () => {
  // The TPM extended both banks; the log leaves out the SHA-384 digest of the HookOS image event (PCR 4), so
  // PCR 4's SHA-384 value is not explained by the log. Before, the SHA-256 match alone made PCR 4 pass.
  const w = bootScenario("hookos", keys, { banks: [S256, S384] });
  const pcrs = quoted(w, [S256, S384]);
  const app = w.events.find((e) => e.pcr === 4 && e.type === EV.EFI_BOOT_SERVICES_APPLICATION);
  assert.ok(app);
  app.digests.delete(S384);
  const v = judge(w, pcrs);
  assert.equal(v.verdict, "fail");
  assert.deepEqual(checks(v), ["pcr-replay"]);
  const r = v.reasons[0];
  assert.equal(r?.pcr, 4);
  assert.match(r?.detail ?? "", new RegExp(`PCR 4 does not replay in sha384: events ${w.events.indexOf(app) + 1} carry no sha384 digest`));
  assert.equal(v.pcrs.find((p) => p.pcr === 4)?.trusted, false);
  assert.ok(!v.measuredBoot.interpretedPcrs.includes(4), "PCR 4's events are not interpreted");
});

test("an enforced PCR must be quoted in every quoted accepted bank: SHA-384 PCRs 8–15 only leave 0–7 unproven there", () => {
  const w = bootScenario("hookos", keys, { banks: [S256, S384] });
  const pcrs = quoted(w, [S256]);
  pcrs.set(S384, quoted(w, [S384], [8, 9, 10, 11, 12, 13, 14, 15]).get(S384) as Map<number, Uint8Array>);
  const v = judge(w, pcrs);
  // PCR 7 is not vouched for either, so the Secure Boot state is not read.
  assert.deepEqual(checks(v), ["pcr-missing", "secure-boot"]);
  assert.deepEqual(v.reasons.filter((r) => r.check === "pcr-missing").map((r) => r.pcr), [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.match(v.reasons[0]?.detail ?? "", /PCR 0 is quoted in sha256 but not in sha384/);
});

test("a mismatch in any quoted bank still fails, accepted or not (SHA-1 quoted beside SHA-256)", () => {
  const w = bootScenario("hookos", keys, { banks: [TPM_ALG.SHA1, S256] });
  const pcrs = quoted(w, [TPM_ALG.SHA1, S256]);
  pcrs.get(TPM_ALG.SHA1)?.set(4, new Uint8Array(20).fill(1));
  const v = judge(w, pcrs);
  assert.deepEqual(checks(v), ["pcr-replay"]);
  assert.match(v.reasons[0]?.detail ?? "", /PCR 4 \(sha1\): the log replays to/);
});

test("the machine cannot choose its banks: SHA-384 alone (a bank its firmware left unextended, filled from the OS) fails bank-required", () => {
  // A good boot, in SHA-384 only: what an OS can put into a SHA-384 bank that firmware never extended, with a log to
  // match. Every quoted bank replays and the banks agree, but the SHA-256 bank holding the real boot is left out.
  const w = bootScenario("hookos", keys, { banks: [S384] });
  const v = judge(w, quoted(w, [S384]));
  assert.deepEqual(checks(v), ["bank-required"]);
  assert.match(v.reasons[0]?.detail ?? "", /the evidence has no sha256 PCR values \(it has sha384\); profile hookos requires sha256/);
  // The same boot with SHA-256 quoted beside it passes: SHA-384 is accepted, just not instead of SHA-256.
  const both = bootScenario("hookos", keys, { banks: [S256, S384] });
  assert.equal(judge(both, quoted(both, [S256, S384])).verdict, "pass");
  const p = loadProfile("hookos");
  assert.throws(() => parseProfile(JSON.stringify({ ...p, banks: { allowed: ["sha384"], required: ["sha256"] } }), "x"), /sha256 is required but not allowed/);
});
