/**
 * Policy decisions on logs built with the writer, against the PCR values the writer computed (the swtpm
 * end-to-end test in tests/ checks those values against a real TPM and repeats these verdicts there).
 */
import { strict as assert } from "node:assert";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, test } from "node:test";
import { EV, parseEventLog } from "@fleetd/verify/eventlog";
import { bootScenario, type LabKeys, makeLabKeys, REFUSALS, refusalOptions, type ScenarioProfile, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";
import { TPM_ALG } from "@fleetd/verify/tcg";
import type { EventLogWriter } from "@fleetd/testkit/eventlogWriter";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, type Evaluation, parseProfile, type Profile, profileAuthorityRefs } from "@fleetd/verify/policy";

let keys: LabKeys;
let site: string;
before(async () => {
  keys = await makeLabKeys();
  site = writeSiteAuthorities(mkdtempSync(join(tmpdir(), "fleetd-site-")), keys);
});

function judge(profile: ScenarioProfile | Profile, w: EventLogWriter, pcrs = w.expectedPcrs()): Evaluation {
  const p = typeof profile === "string" ? loadProfile(profile) : profile;
  return evaluateProfile(p, { log: parseEventLog(w.bytes()), pcrs }, resolveAuthorities(profileAuthorityRefs(p), site));
}
const checks = (v: Evaluation) => [...new Set(v.reasons.map((r) => r.check))].sort();

test("the good boot of each class passes its own profile, and only its own", () => {
  for (const p of ["hookos", "talos", "ubuntu"] as const) {
    const v = judge(p, bootScenario(p, keys));
    assert.equal(v.verdict, "pass", `${p}: ${JSON.stringify(v.reasons)}`);
    assert.equal(v.pcrSource, "quote");
    assert.deepEqual(v.banksUsed, ["sha256"]);
    for (const q of ["hookos", "talos", "ubuntu"] as const) {
      if (q !== p) assert.equal(judge(q, bootScenario(p, keys)).verdict, "fail", `${p} boot under ${q}`);
    }
  }
});

test("every refusal names its check, PCR and event", () => {
  for (const r of REFUSALS) {
    const v = judge(r.profile, bootScenario(r.profile, keys, refusalOptions(r, keys)));
    assert.equal(v.verdict, "fail", r.name);
    const reason = v.reasons.find((x) => x.check === r.check);
    assert.ok(reason, `${r.name}: ${JSON.stringify(v.reasons)}`);
    if (r.check !== "bank" && r.check !== "secure-boot") assert.equal(typeof reason.pcr, "number", r.name);
    if (["event-digest", "authority", "separator-disguised", "uefi-debug-mode"].includes(r.check)) assert.equal(typeof reason.event, "number", r.name);
  }
});

test("HookOS boot verified by the lab's Talos key is refused by hookos: the authority and the missing signer", () => {
  const v = judge("hookos", bootScenario("hookos", keys, { imageAuthority: keys.labDb.der }));
  assert.deepEqual(checks(v), ["authority", "authority-required"]);
  assert.match(v.reasons[0]!.detail, /"fleetd lab Secure Boot signing".*which profile hookos does not allow/);
});

test("a tampered event fails digest-vs-data and is not interpreted", () => {
  const v = judge("talos", bootScenario("talos", keys, { tamperAuthority: true }));
  const r = v.reasons.find((x) => x.check === "event-digest")!;
  assert.match(r.detail, /event \d+ \(PCR 7, EV_EFI_VARIABLE_AUTHORITY\): digest does not match data/);
  assert.equal(v.measuredBoot.secureBoot!.postSeparatorAuthorities.length, 0, "the rogue certificate must not be read");
});

test("a log that does not replay: the mismatching PCR is named in each quoted bank, its events are not interpreted", () => {
  const v = judge("talos", bootScenario("talos", keys, { unloggedExtend: true }));
  assert.deepEqual(checks(v), ["pcr-replay"]);
  assert.deepEqual(v.reasons.map((r) => r.pcr), [4, 4]);
  assert.ok(!v.measuredBoot.interpretedPcrs.includes(4));
  assert.deepEqual(v.pcrs.find((p) => p.pcr === 4)!.banks, { sha1: "mismatch", sha256: "mismatch" });
});

test("SHA-1 evidence passes only a profile that lists sha1 explicitly", () => {
  const w = bootScenario("talos", keys, { format: "sha1" });
  assert.deepEqual(checks(judge("talos", w)), ["bank", "bank-required"]);
  const talos = loadProfile("talos");
  const withSha1 = parseProfile(JSON.stringify({ ...talos, banks: { allowed: ["sha256", "sha1"] } }), "talos+sha1");
  assert.equal(judge(withSha1, w).verdict, "pass");
  // sha1 + sha256 evidence where only the sha1 values are quoted is SHA-1-only evidence too (and the log's
  // SHA-256 bank is not quoted).
  const both = bootScenario("talos", keys);
  const sha1Only = new Map([...both.expectedPcrs()].filter(([a]) => a === TPM_ALG.SHA1));
  assert.deepEqual(checks(judge("talos", both, sha1Only)), ["bank", "bank-not-quoted", "bank-required"]);
});

test("hookos-tpm12 judges TPM 1.2 evidence only: a SHA-1 HookOS boot from a TPM 1.2 passes; the same evidence said to come from a TPM 2.0 fails, and hookos refuses TPM 1.2 evidence", () => {
  const p = loadProfile("hookos-tpm12");
  const w = bootScenario("hookos", keys, { format: "sha1" });
  const as = (tpm: "2.0" | "1.2", profile: Profile) => evaluateProfile(profile, { log: parseEventLog(w.bytes()), pcrs: w.expectedPcrs(), tpm }, resolveAuthorities(profileAuthorityRefs(profile), site));
  const ok = as("1.2", p);
  assert.equal(ok.verdict, "pass", JSON.stringify(ok.reasons));
  assert.deepEqual(checks(as("2.0", p)), ["profile-tpm"]);
  assert.deepEqual(checks(as("1.2", loadProfile("hookos"))), ["bank", "bank-required", "profile-tpm"]);
  // the boot state still counts: a HookOS verified by the lab's Talos key fails the TPM 1.2 profile too
  const wrong = bootScenario("hookos", keys, { format: "sha1", imageAuthority: keys.labDb.der });
  const v = evaluateProfile(p, { log: parseEventLog(wrong.bytes()), pcrs: wrong.expectedPcrs(), tpm: "1.2" }, resolveAuthorities(profileAuthorityRefs(p), site));
  assert.equal(v.verdict, "fail");
  assert.ok(!checks(v).includes("profile-tpm"));
});

test("unexplained and missing PCRs: an enforced PCR with no events, an enforced PCR not quoted", () => {
  const w = bootScenario("talos", keys);
  const pcrs = w.expectedPcrs();
  const p = loadProfile("talos");
  const withPcr8 = parseProfile(JSON.stringify({ ...p, pcrs: { enforced: [...p.pcrs.enforced, 10], informational: [8, 9] } }), "x");
  for (const m of pcrs.values()) m.set(10, new Uint8Array(m.get(0)!.length));
  assert.deepEqual(checks(judge(withPcr8, w, pcrs)), ["pcr-unexplained"]);
  const fewer = new Map([...w.expectedPcrs()].map(([a, m]) => [a, new Map([...m].filter(([i]) => i !== 5))]));
  const v = judge("talos", w, fewer);
  assert.deepEqual(checks(v), ["pcr-missing"]);
  assert.equal(v.reasons[0]!.pcr, 5);
});

test("informational PCRs never fail the verdict, even when they do not replay", () => {
  const w = bootScenario("talos", keys);
  const pcrs = w.expectedPcrs();
  for (const m of pcrs.values()) m.set(11, new Uint8Array(m.get(11)!.length).fill(7)); // Talos extended PCR 11 later
  const v = judge("talos", w, pcrs);
  assert.equal(v.verdict, "pass");
  assert.ok(v.warnings.some((x) => x.check === "pcr-replay" && x.pcr === 11));
});

test("DMA protection disabled is a warning unless the profile forbids it", () => {
  const w = bootScenario("hookos", keys, { dmaProtectionDisabled: true });
  const v = judge("hookos", w);
  assert.equal(v.verdict, "pass");
  assert.ok(v.warnings.some((x) => x.check === "dma-protection-disabled"));
  const h = loadProfile("hookos");
  const strict = parseProfile(JSON.stringify({ ...h, secureBoot: { ...h.secureBoot, allowDmaProtectionDisabled: false } }), "x");
  assert.deepEqual(checks(judge(strict, w)), ["dma-protection"]);
});

test("SBAT level below the ubuntu minimum, and no SbatLevel at all, are refused", () => {
  const w = bootScenario("ubuntu", keys);
  const sbat = w.events.find((e) => e.type === EV.EFI_VARIABLE_AUTHORITY && Buffer.from(e.data).includes(Buffer.from("S\0b\0a\0t\0")))!;
  w.events.splice(w.events.indexOf(sbat), 1);
  const v = judge("ubuntu", w);
  assert.deepEqual(checks(v), ["sbat"]);
  assert.match(v.reasons[0]!.detail, /did not measure its SbatLevel/);
});

test("without quote PCRs the verdict says the log was replayed against itself", () => {
  const p = loadProfile("hookos");
  const w = bootScenario("hookos", keys);
  const v = evaluateProfile(p, { log: parseEventLog(w.bytes()) }, resolveAuthorities(profileAuthorityRefs(p), site));
  assert.equal(v.pcrSource, "log");
  assert.ok(v.warnings.some((x) => x.check === "evidence"));
});

test("site sets not configured: hookos fails closed naming the missing signer", () => {
  const p = loadProfile("hookos");
  const v = evaluateProfile(p, { log: parseEventLog(bootScenario("hookos", keys).bytes()), pcrs: bootScenario("hookos", keys).expectedPcrs() }, resolveAuthorities(profileAuthorityRefs(p)));
  assert.equal(v.verdict, "fail");
  assert.ok(v.reasons.some((r) => r.check === "authority-required" && /not configured: site:hookos-signer/.test(r.detail)));
});

