/**
 * Firmware-quirk tolerances (tolerances.ts): for each, the real log it names is refused by the strict rule without
 * it, passes that rule with it (and the verdict says which tolerance accepted what), and the attack the strict rule
 * is there for is still refused with it. Real logs are read in place from shared/conformance.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, test } from "node:test";
import { digest } from "@fleetd/verify/crypto";
import type { PcrValues } from "@fleetd/verify/attest";
import { EFI_ACTION, EV, eventTypeName, parseEventLog, type EventLog } from "@fleetd/verify/eventlog";
import { bootScenario, type LabKeys, makeLabKeys, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";
import { conformance } from "@fleetd/testkit/conformance";
import { corpusLogs } from "@fleetd/testkit/eventlogCorpus";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import {
  evaluateProfile, type Evaluation, parseProfile, type Profile, profileAuthorityRefs, TOLERANCE_NAMES, TOLERANCES,
  type ToleranceName,
} from "@fleetd/verify/policy";

let keys: LabKeys;
let site: string;
before(async () => {
  keys = await makeLabKeys();
  site = writeSiteAuthorities(mkdtempSync(join(tmpdir(), "fleetd-site-")), keys);
});

/** The shipped hookos profile with exactly `tolerances` (and other changes). */
function hookos(tolerances: ToleranceName[], over: Record<string, unknown> = {}): Profile {
  return parseProfile(JSON.stringify({ ...loadProfile("hookos"), tolerances, ...over }), `hookos+${tolerances.join("+") || "strict"}`);
}
const judge = (p: Profile, log: EventLog, pcrs?: PcrValues): Evaluation =>
  evaluateProfile(p, { log, ...(pcrs ? { pcrs } : {}) }, resolveAuthorities(profileAuthorityRefs(p), site));
const checks = (v: Evaluation) => [...new Set(v.reasons.map((r) => r.check))].sort();
const realLog = (rel: string) => parseEventLog(new Uint8Array(readFileSync(conformance(rel))));

test("every tolerance names a real conformance log and events of the PCR and type it is about; the shipped profiles list them", () => {
  for (const name of TOLERANCE_NAMES) {
    const t = TOLERANCES[name];
    const log = realLog(t.source.log);
    for (const i of t.source.events) {
      const ev = log.events[i];
      assert.ok(ev, `${name}: event ${i} of ${t.source.log}`);
      assert.ok(t.source.what.startsWith(`event ${i} (PCR ${ev.pcr}, ${eventTypeName(ev.type)}`), `${name}: ${t.source.what}`);
      if (t.effect.kind === "event-type") assert.deepEqual([ev.pcr, (t.effect.types as readonly number[]).includes(ev.type)], [t.effect.pcr, true], name);
    }
  }
  for (const p of ["hookos", "talos", "ubuntu"]) assert.deepEqual([...loadProfile(p).tolerances].sort(), [...TOLERANCE_NAMES].sort(), p);
  assert.throws(() => hookos(["pcr0-post-code", "pcr0-post-code"]), /listed twice/);
  assert.throws(() => parseProfile(JSON.stringify({ ...loadProfile("hookos"), tolerances: ["anything-goes"] }), "x"), /tolerances/);
});

test("pcr0-post-code: event-postcode.bin is refused for EV_POST_CODE in PCR 0 without it, not with it; EV_POST_CODE in PCR 4 stays refused", () => {
  const log = realLog(TOLERANCES["pcr0-post-code"].source.log);
  const strict = judge(hookos([]), log);
  assert.ok(strict.reasons.some((r) => r.check === "event-type" && r.pcr === 0 && r.event === 2), JSON.stringify(strict.reasons));
  const tolerant = judge(hookos(["pcr0-post-code"]), log);
  assert.ok(!tolerant.reasons.some((r) => r.check === "event-type"), JSON.stringify(tolerant.reasons));
  assert.deepEqual(checks(tolerant), checks(strict).filter((c) => c !== "event-type"), "only the quirk's reason goes");
  assert.ok(tolerant.warnings.some((w) => w.check === "tolerated" && w.event === 2 && /accepted by tolerance pcr0-post-code/.test(w.detail)));

  // The good HookOS boot with an EV_POST_CODE in PCR 0 passes only with the tolerance; one in PCR 4 never does.
  const pcr0 = bootScenario("hookos", keys);
  pcr0.events.splice(1, 0, ...bootScenario("hookos", keys).add(0, EV.POST_CODE, new Uint8Array(16)).events.slice(-1));
  assert.deepEqual(checks(judge(hookos([]), parseEventLog(pcr0.bytes()), pcr0.expectedPcrs())), ["event-type"]);
  assert.equal(judge(hookos(["pcr0-post-code"]), parseEventLog(pcr0.bytes()), pcr0.expectedPcrs()).verdict, "pass");
  const pcr4 = bootScenario("hookos", keys).add(4, EV.POST_CODE, new Uint8Array(16));
  const v = judge(hookos(["pcr0-post-code"]), parseEventLog(pcr4.bytes()), pcr4.expectedPcrs());
  assert.deepEqual(checks(v), ["event-type"]);
  assert.equal(v.reasons[0]?.pcr, 4);
});

test("unlogged-exit-boot-services: ebs_event_missing's real PCR 5 replays only with it; any other unlogged extend of PCR 5 stays refused", () => {
  const l = corpusLogs().find((x) => x.rel === "go-attestation/ebs_event_missing_eventlog.bin");
  assert.ok(l?.pcrs?.origin === "real");
  const log = parseEventLog(l.bytes);
  const sha1 = new Map([[TPM_ALG.SHA1 as number, l.pcrs.values.get(TPM_ALG.SHA1) as Map<number, Uint8Array>]]);
  // A SHA-1-only log: a profile that accepts SHA-1, so that only PCR 5's replay is in question.
  const on5 = (v: Evaluation) => v.reasons.filter((r) => r.pcr === 5);
  const strict = judge(hookos([], { banks: { allowed: ["sha1"] } }), log, sha1);
  assert.deepEqual(on5(strict).map((r) => r.check), ["pcr-replay"]);
  assert.match(on5(strict)[0]?.detail ?? "", /matches only with the unlogged "Exit Boot Services Invocation", "Exit Boot Services Returned with Success" appended, which this profile does not tolerate/);
  const tolerant = judge(hookos(["unlogged-exit-boot-services"], { banks: { allowed: ["sha1"] } }), log, sha1);
  assert.deepEqual(on5(tolerant), []);
  assert.equal(tolerant.pcrs.find((p) => p.pcr === 5)?.trusted, true);
  assert.ok(tolerant.warnings.some((w) => w.check === "tolerated" && w.pcr === 5 && /ebs_event_missing_eventlog\.bin/.test(w.detail)));

  // The good HookOS boot whose firmware did not log the two actions: refused strictly, admitted with the tolerance…
  const unlogged = bootScenario("hookos", keys);
  for (const e of unlogged.events.filter((x) => x.pcr === 5 && x.type === EV.EFI_ACTION)) e.logged = false;
  const quoted = unlogged.expectedPcrs();
  assert.deepEqual(checks(judge(hookos([]), parseEventLog(unlogged.bytes()), quoted)), ["pcr-replay"]);
  assert.equal(judge(hookos(["unlogged-exit-boot-services"]), parseEventLog(unlogged.bytes()), quoted).verdict, "pass");
  // …but not when anything else was extended unlogged into PCR 5, nor the Failure variant nobody logged for us.
  const hidden = new Map([...quoted].map(([a, m]) => [a, new Map(m).set(5, digest(a, m.get(5) as Uint8Array, digest(a, new Uint8Array(Buffer.from("hidden")))))]));
  assert.deepEqual(checks(judge(hookos(["unlogged-exit-boot-services"]), parseEventLog(unlogged.bytes()), hidden)), ["pcr-replay"]);
  const failure = bootScenario("hookos", keys);
  for (const e of failure.events.filter((x) => x.pcr === 5 && x.type === EV.EFI_ACTION)) e.logged = false;
  const fq = failure.expectedPcrs();
  const h = (a: number, s: string) => digest(a, new Uint8Array(Buffer.from(s, "latin1")));
  const logOnly = parseEventLog(failure.bytes());
  const viaFailure = new Map(
    [...fq].map(([a, m]) => {
      const start = new Uint8Array(m.get(5)?.length ?? 32);
      const sep = digest(a, start, h(a, "\0\0\0\0"));
      return [a, new Map(m).set(5, digest(a, digest(a, sep, h(a, EFI_ACTION.EXIT_BOOT_SERVICES_INVOCATION)), h(a, EFI_ACTION.EXIT_BOOT_SERVICES_FAILURE)))];
    }),
  );
  assert.deepEqual(checks(judge(hookos(["unlogged-exit-boot-services"]), logOnly, viaFailure)), ["pcr-replay"]);
});

test("boot-guard-scrtm-separator-digest: glinux-alex.bin is refused for it without the tolerance; a disguised separator in PCR 7 stays refused", () => {
  const log = realLog(TOLERANCES["boot-guard-scrtm-separator-digest"].source.log);
  const strict = judge(hookos([]), log);
  assert.ok(strict.reasons.some((r) => r.check === "separator-disguised" && r.pcr === 0 && r.event === 4), JSON.stringify(strict.reasons));
  const tolerant = judge(hookos(["boot-guard-scrtm-separator-digest"]), log);
  assert.ok(!tolerant.reasons.some((r) => r.check === "separator-disguised"));
  assert.deepEqual(checks(tolerant), checks(strict).filter((c) => c !== "separator-disguised"));
  assert.ok(tolerant.warnings.some((w) => w.check === "separator-lookalike" && w.event === 4 && /accepted by tolerance boot-guard-scrtm-separator-digest/.test(w.detail)));

  // The PCR 7 separator disguised as an EV_EFI_ACTION, and a PCR 0 event of another type with a separator's digest.
  const disguised = bootScenario("hookos", keys, { disguiseSeparator: true });
  assert.ok(checks(judge(hookos([...TOLERANCE_NAMES]), parseEventLog(disguised.bytes()), disguised.expectedPcrs())).includes("separator-disguised"));
  const version = bootScenario("hookos", keys);
  version.events.splice(1, 0, ...bootScenario("hookos", keys).add(0, EV.S_CRTM_VERSION, new Uint8Array(4), { hashOf: new Uint8Array(4) }).events.slice(-1));
  const v = judge(hookos([...TOLERANCE_NAMES]), parseEventLog(version.bytes()), version.expectedPcrs());
  assert.deepEqual(checks(v), ["separator-disguised"]);
  assert.equal(v.reasons[0]?.pcr, 0);
});
