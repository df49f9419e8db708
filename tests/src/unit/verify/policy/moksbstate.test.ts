/**
 * MokSBState = 1 — shim's signature validation disabled (`mokutil --disable-validation`) — is its own finding,
 * "shim-validation-disabled" (PCR 7, naming the event), and every shipped profile refuses it: it is an error in
 * PCR 7, which the schema makes every profile enforce. Before, the event fell through to the authority parser and
 * was refused only as an unrelated "authority-data" error. Shim measures the variable only when it is set: into
 * PCR 7 as an EV_EFI_VARIABLE_AUTHORITY (UEFI_VARIABLE_DATA "MokSBState", SHIM_LOCK GUID) and into PCR 14
 * (rhboot/shim README.tpm).
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, test } from "node:test";
import { EV, parseEventLog, type EventLog } from "@fleetd/verify/eventlog";
import { EventLogWriter } from "@fleetd/testkit/eventlogWriter";
import { bootScenario, type LabKeys, makeLabKeys, type ScenarioProfile, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";
import { conformance } from "@fleetd/testkit/conformance";
import { resolveAuthorities, defaultPolicyDir, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, type Evaluation, type Profile, profileAuthorityRefs } from "@fleetd/verify/policy";

let keys: LabKeys;
let site: string;
before(async () => {
  keys = await makeLabKeys();
  site = writeSiteAuthorities(mkdtempSync(join(tmpdir(), "fleetd-site-")), keys);
});

/** Every profile the policy package ships (data: whatever files policy/ holds). */
const shipped = (): Profile[] =>
  readdirSync(defaultPolicyDir())
    .filter((f) => /\.(ya?ml|json)$/.test(f) && f !== "package.json")
    .map((f) => loadProfile(f.replace(/\.(ya?ml|json)$/, "")));
const judge = (p: Profile, log: EventLog, pcrs?: Parameters<typeof evaluateProfile>[1]["pcrs"]): Evaluation =>
  evaluateProfile(p, { log, ...(pcrs ? { pcrs } : {}) }, resolveAuthorities(profileAuthorityRefs(p), site));
const checks = (v: Evaluation) => [...new Set(v.reasons.map((r) => r.check))].sort();

/** A real shim boot (tpm2-tools' event-moklisttrusted.bin: Fedora/RHEL shim 15.x, SB on) with MokSBState measured where shim does it: after MokList/MokListX (event 27), before SbatLevel. */
const REAL = "eventlogs/tpm2-tools/event-moklisttrusted.bin";
function realWithMokSbState(value: Uint8Array): EventLog {
  const real = parseEventLog(new Uint8Array(readFileSync(conformance(REAL))));
  const mokListX = real.events.find((e) => e.pcr === 14 && Buffer.from(e.data).toString("latin1") === "MokListX\0");
  assert.equal(mokListX?.index, 27, "the real log's MokListX event");
  const { writer, rest } = EventLogWriter.fromLog(real, 28);
  writer.mokSbState(value);
  return parseEventLog(rest().bytes());
}

test("a real shim log with MokSBState = 1 is refused by every shipped profile, naming shim-validation-disabled and its event", () => {
  const original = parseEventLog(new Uint8Array(readFileSync(conformance(REAL))));
  const disabled = realWithMokSbState(Uint8Array.of(1));
  const profiles = shipped();
  assert.deepEqual(profiles.map((p) => p.name).sort(), ["hookos", "hookos-tpm12", "talos", "ubuntu"]);
  for (const p of profiles) {
    const before = judge(p, original);
    assert.ok(!before.reasons.some((r) => r.check.startsWith("shim-")), `${p.name}: the real log has no MokSBState`);
    const v = judge(p, disabled);
    assert.equal(v.verdict, "fail", p.name);
    const r = v.reasons.find((x) => x.check === "shim-validation-disabled");
    assert.ok(r, `${p.name}: ${JSON.stringify(v.reasons)}`);
    assert.deepEqual([r.pcr, r.event], [7, 28]);
    assert.match(r.detail, /event 28 \(PCR 7, EV_EFI_VARIABLE_AUTHORITY\): MokSBState = 1: shim's signature validation is disabled/);
    // Its own finding, not an authority the parser could not read; the other reasons are the real log's own.
    assert.ok(!v.reasons.some((x) => x.check === "authority-data"), JSON.stringify(v.reasons));
    assert.deepEqual(checks(v), [...checks(before), "shim-validation-disabled"].sort(), p.name);
    assert.equal(v.measuredBoot.secureBoot?.mokSbState?.value, "01");
  }
  // MokSBState = 0 (validation on) adds nothing; any other value is malformed and refused as well.
  for (const p of profiles) assert.deepEqual(checks(judge(p, realWithMokSbState(Uint8Array.of(0)))), checks(judge(p, original)), p.name);
  assert.ok(judge(profiles[0] as Profile, realWithMokSbState(Uint8Array.of(2))).reasons.some((r) => r.check === "shim-moksbstate" && r.event === 28));
});

test("each class's good boot with MokSBState = 1 added is refused for that alone, by its own profile (quote-verified values)", () => {
  for (const name of ["hookos", "talos", "ubuntu"] as const satisfies readonly ScenarioProfile[]) {
    const w = bootScenario(name, keys);
    // shim measures MokSBState right after the separator's first authority, before it loads the next stage.
    const at = w.events.findIndex((e) => e.pcr === 7 && e.type === EV.EFI_VARIABLE_AUTHORITY);
    const moks = new EventLogWriter(w.format, w.banks).mokSbState(Uint8Array.of(1)).events;
    w.events.splice(at + 1, 0, ...moks);
    assert.equal(moks[0]?.data.length, 16 + 8 + 8 + 2 * "MokSBState".length + 1, "UEFI_VARIABLE_DATA of one byte");
    const v = judge(loadProfile(name), parseEventLog(w.bytes()), w.expectedPcrs());
    assert.deepEqual(checks(v), ["shim-validation-disabled"], `${name}: ${JSON.stringify(v.reasons)}`);
    assert.equal(v.reasons[0]?.pcr, 7);
    assert.equal(v.reasons[0]?.event, at + 2, "names the MokSBState event (index after the Spec ID header)");
  }
});
