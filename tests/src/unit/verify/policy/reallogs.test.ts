/**
 * Verdicts on real logs: every Secure-Boot-on log of shared/conformance/eventlogs, evaluated with the three
 * shipped profiles. Logs with real PCR values (`*.pcrs.json`) are evaluated against them as quote values;
 * the others against their own replay (log-only: a warning says it proves nothing). The lab's site
 * authorities are throw-away test CAs, so no real log can pass `talos` or `hookos`; none passes `ubuntu`
 * either, each for a reason named below. `checks` is the exact set of failed checks.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { interpretLog, parseEventLog, replayLog } from "@fleetd/verify/eventlog";
import { makeLabKeys, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";
import { corpusLogs } from "@fleetd/testkit/eventlogCorpus";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, profileAuthorityRefs } from "@fleetd/verify/policy";

interface Expect {
  verdict: "pass" | "fail";
  checks: string[];
  /** A reason's detail must match this. */
  because: RegExp;
}
type Row = { source: "quote" | "log"; talos: Expect; ubuntu: Expect; hookos: Expect };

const LAB = ["pk", "kek", "db", "authority", "authority-required"];
const fail = (checks: string[], because: RegExp): Expect => ({ verdict: "fail", checks, because });
const lab = (because: RegExp, extra: string[] = []): Expect => fail([...extra, ...LAB], because);
const GCE_V2 = /"UEFI DB Key v20250203".*does not allow/; // Google's own db key verifies COS/GKE images
const GCE_V10 = /"UEFI DB Key v10".*does not allow/;
const MS2011 = /"Microsoft Corporation UEFI CA 2011".*does not allow/;
/** GCE logs carry SHA-384 digests, but upstream recorded (and so we quote) only the SHA-1/SHA-256 values: the banks disagree. */
const Q384 = ["bank-not-quoted"];

const TABLE: Record<string, Row> = {
  "go-tpm-tools/confidential-gke-debug-251000_eventlog.bin": { source: "quote", talos: lab(GCE_V2, Q384), hookos: lab(GCE_V2, Q384), ubuntu: fail(["bank-not-quoted", "dbx", "authority", "authority-required", "sbat"], GCE_V2) },
  "go-tpm-tools/cos-101-amd-sev.bin": { source: "quote", talos: lab(GCE_V10, Q384), hookos: lab(GCE_V10, Q384), ubuntu: fail(["bank-not-quoted", "dbx", "authority", "authority-required", "sbat"], /SBAT level 2021030218 is older/) },
  "go-tpm-tools/cos-85-amd-sev.bin": { source: "quote", talos: lab(GCE_V10, Q384), hookos: lab(GCE_V10, Q384), ubuntu: fail(["bank-not-quoted", "dbx", "authority", "authority-required", "sbat"], /dbx has 4 entries/) },
  "go-tpm-tools/cos-93-amd-sev.bin": { source: "quote", talos: lab(GCE_V10, Q384), hookos: lab(GCE_V10, Q384), ubuntu: fail(["bank-not-quoted", "dbx", "authority", "authority-required", "sbat"], GCE_V10) },
  "go-tpm-tools/debian-10.bin": { source: "quote", talos: lab(/only sha1/, ["bank", "bank-required"]), hookos: lab(MS2011, ["bank", "bank-required"]), ubuntu: fail(["bank", "bank-required", "authority", "sbat"], /"Debian Secure Boot CA".*does not allow/) },
  "go-tpm-tools/eventlogwithsp800155.bin": { source: "quote", talos: lab(GCE_V2, Q384), hookos: lab(GCE_V2, Q384), ubuntu: fail(["bank-not-quoted", "dbx", "authority", "authority-required", "sbat"], GCE_V2) },
  // The example: a Red Hat shim chain fails `ubuntu` naming the authority.
  "go-tpm-tools/rhel8-uefi.bin": { source: "quote", talos: lab(MS2011, Q384), hookos: lab(/"Red Hat Secure Boot CA 5"/, Q384), ubuntu: fail(["bank-not-quoted", "authority", "sbat"], /"Red Hat Secure Boot CA 5".*\(Shim\), which profile ubuntu does not allow/) },
  "go-attestation/option_rom_eventlog.bin": { source: "quote", talos: lab(/only sha1/, ["bank", "bank-required"]), hookos: lab(MS2011, ["bank", "bank-required"]), ubuntu: fail(["bank", "bank-required", "authority", "sbat"], /"Microsoft Windows Production PCA 2011".*does not allow/) },
  "go-attestation/sb_cert_eventlog.bin": { source: "log", talos: lab(/Canonical/, ["pcr-unexplained"]), hookos: lab(MS2011, ["pcr-unexplained"]), ubuntu: fail(["pcr-unexplained", "sbat"], /shim did not measure its SbatLevel/) },
  // The Windows log fails every profile: SHA-1 only, and Windows Boot Manager's authority.
  "go-attestation/windows_gcp_shielded_vm.bin": {
    source: "quote",
    talos: lab(/"Microsoft Root Certificate Authority 2010"/, ["bank", "bank-required", "pcr-unexplained"]),
    hookos: lab(/only sha1/, ["bank", "bank-required", "pcr-unexplained"]),
    ubuntu: fail(["bank", "bank-required", "pcr-unexplained", "authority", "authority-required", "sbat"], /"Microsoft Root Certificate Authority 2010".*does not allow/),
  },
  "keylime/binary_bios_measurements-secureboot.bin": { source: "log", talos: lab(MS2011), hookos: lab(MS2011), ubuntu: fail(["authority"], /"Red Hat Secure Boot CA 5" .*\(vendor_db\)/) },
  "keylime/mb_log.bin": { source: "log", talos: lab(MS2011), hookos: lab(MS2011), ubuntu: fail(["dbx", "authority", "sbat"], /"CentOS Secure Boot CA 2"/) },
  "tpm2-tools/event-moklisttrusted.bin": { source: "log", talos: lab(MS2011), hookos: lab(MS2011), ubuntu: fail(["dbx", "authority", "sbat"], /"Red Hat Secure Boot CA 5"/) },
  // Ubuntu's own chain (MS UEFI CA 2011 → Canonical), but a shim too old to measure SBAT.
  "tpm2-tools/event-postcode.bin": { source: "log", talos: lab(/"Canonical Ltd. Master Certificate Authority"/), hookos: lab(MS2011), ubuntu: fail(["sbat"], /shim did not measure its SbatLevel/) },
  // One-event fixture: SecureBoot=1 and nothing else.
  "tpm2-tools/event-uefivar.bin": {
    source: "log",
    // It declares SHA-384 and SHA-512 but its one event carries SHA-1 and SHA-256 digests only: PCR 7 replays in
    // two of the four banks, so it is not vouched for and the Secure Boot state is not read at all.
    talos: fail(["pcr-unexplained", "pcr-replay", "secure-boot"], /PCR 7 does not replay in sha384: events 1 carry no sha384 digest/),
    hookos: fail(["pcr-unexplained", "pcr-replay", "secure-boot"], /PCR 7 does not replay in sha512: events 1 carry no sha512 digest/),
    ubuntu: fail(["pcr-unexplained", "pcr-replay", "secure-boot"], /PCR 0: the log extends nothing/),
  },
};

test("verdicts on every Secure-Boot-on conformance log match the table", async (t) => {
  const keys = await makeLabKeys();
  const site = writeSiteAuthorities(mkdtempSync(join(tmpdir(), "fleetd-site-")), keys);
  const profiles = (["talos", "ubuntu", "hookos"] as const).map((n) => loadProfile(n));
  const seen: string[] = [];
  for (const l of corpusLogs()) {
    const log = parseEventLog(l.bytes);
    if (!interpretLog(log, new Set(replayLog(log).extended.keys())).secureBoot?.enabled) continue;
    seen.push(l.rel);
    const row = TABLE[l.rel];
    assert.ok(row, `${l.rel} is Secure-Boot-on but missing from the table`);
    const pcrs = l.pcrs?.origin === "real" ? l.pcrs.values : undefined;
    assert.equal(pcrs ? "quote" : "log", row.source, l.rel);
    for (const p of profiles) {
      const name = p.name as "talos" | "ubuntu" | "hookos";
      const v = evaluateProfile(p, { log, ...(pcrs ? { pcrs } : {}) }, resolveAuthorities(profileAuthorityRefs(p), site));
      const want: Expect = row[name];
      const where = `${l.rel} / ${name}`;
      assert.equal(v.verdict, want.verdict, where);
      assert.deepEqual([...new Set(v.reasons.map((r) => r.check))].sort(), [...want.checks].sort(), `${where}: ${JSON.stringify(v.reasons)}`);
      assert.ok(v.reasons.some((r) => want.because.test(r.detail)), `${where}: no reason matches ${want.because}: ${JSON.stringify(v.reasons)}`);
      for (const r of v.reasons.filter((r) => r.check === "authority")) assert.equal(r.pcr, 7, where);
    }
  }
  assert.deepEqual(seen.sort(), Object.keys(TABLE).sort());
  t.diagnostic(`${seen.length} Secure-Boot-on logs × 3 profiles`);
});
