/** The shipped profiles load and validate; the schema refuses what it must; built-in authorities are what the logs carry. */
import { strict as assert } from "node:assert";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { certificateFromLog } from "@fleetd/testkit/bootScenarios";
import { makeTestCa } from "@fleetd/testkit/certs";
import { certSummary } from "@fleetd/verify/eventlog";
import { AuthorityConfigError, BUILTIN_AUTHORITIES, parseProfile, ProfileError, profileAuthorityRefs } from "@fleetd/verify/policy";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";

test("hookos, talos and ubuntu load from policy/ and keep the HookOS signer apart from the lab key", () => {
  const hookos = loadProfile("hookos");
  const talos = loadProfile("talos");
  const ubuntu = loadProfile("ubuntu");
  assert.deepEqual(hookos.authorities.postSeparator.allowed, ["site:hookos-signer"]);
  assert.deepEqual(hookos.authorities.postSeparator.requireAny, ["site:hookos-signer"]);
  assert.deepEqual(talos.authorities.postSeparator.allowed, ["site:lab-db"]);
  assert.ok(talos.pcrs.informational.includes(11), "Talos' run-time PCR 11 is informational");
  assert.ok(ubuntu.authorities.postSeparator.allowed.includes("builtin:canonical-master-ca"));
  assert.equal(ubuntu.shim?.sbatLevel.minDate, "2022111500");
  for (const p of [hookos, talos, ubuntu]) {
    assert.ok(!p.banks.allowed.includes("sha1"), `${p.name} must not accept SHA-1-only evidence`);
    assert.ok(p.secureBoot.required);
  }
});

test("hookos-tpm12 is hookos for TPM 1.2 evidence: SHA-1 only, the same authorities; a TPM 1.2 profile must be SHA-1 only", () => {
  const hookos = loadProfile("hookos");
  const legacy = loadProfile("hookos-tpm12");
  assert.equal(legacy.tpm, "1.2");
  assert.equal(hookos.tpm, "2.0");
  assert.deepEqual(legacy.banks, { allowed: ["sha1"], required: ["sha1"] });
  assert.deepEqual({ ...legacy, name: "", description: "", tpm: "", banks: {} }, { ...hookos, name: "", description: "", tpm: "", banks: {} });
  const text = JSON.stringify({ ...legacy, banks: { allowed: ["sha1", "sha256"], required: ["sha1"] } });
  assert.throws(() => parseProfile(text, "x"), /a TPM 1.2 profile allows and requires sha1 only/);
});

test("the schema refuses unknown keys (there is no field to pin an image digest), bad references and unenforced PCR 7", () => {
  const base = loadProfile("talos");
  const text = (p: unknown) => JSON.stringify(p);
  assert.throws(() => parseProfile(text({ ...base, images: { sha256: ["00"] } }), "x"), (e: unknown) => e instanceof ProfileError && e.code === "invalid" && /images/.test(e.message));
  assert.throws(
    () => parseProfile(text({ ...base, authorities: { ...base.authorities, postSeparator: { allowed: ["lab-db"] } } }), "x"),
    (e: unknown) => e instanceof ProfileError && /site:<name> or builtin:<name>/.test(e.message),
  );
  assert.throws(() => parseProfile(text({ ...base, pcrs: { enforced: [0, 4], informational: [] } }), "x"), /PCR 7 must be enforced/);
  assert.throws(() => parseProfile(text({ ...base, pcrs: { enforced: [4, 7], informational: [4] } }), "x"), /both enforced and informational/);
  assert.throws(() => parseProfile("name: a\nname: b\n", "dup.yaml"), (e: unknown) => e instanceof ProfileError && e.code === "syntax");
  assert.throws(() => loadProfile("no-such-profile"), (e: unknown) => e instanceof ProfileError && e.code === "not-found");
});

test("built-in authorities: fingerprints and names re-derived from the conformance logs they cite", () => {
  const sources: Record<string, [string, string]> = {
    "microsoft-uefi-ca-2011": ["eventlogs/go-tpm-tools/rhel8-uefi.bin", "Microsoft Corporation UEFI CA 2011"],
    "microsoft-uefi-ca-2023": ["eventlogs/keylime/binary_bios_measurements-secureboot.bin", "Microsoft UEFI CA 2023"],
    "canonical-master-ca": ["eventlogs/go-attestation/sb_cert_eventlog.bin", "Canonical Ltd. Master Certificate Authority"],
    "microsoft-windows-pca-2011": ["eventlogs/go-tpm-tools/rhel8-uefi.bin", "Microsoft Windows Production PCA 2011"],
  };
  for (const [name, [rel, cn]] of Object.entries(sources)) {
    const c = certSummary(certificateFromLog(rel, cn))!;
    const b = BUILTIN_AUTHORITIES[name]![0]!;
    assert.equal(c.sha256, b.sha256, name);
    assert.equal(c.commonName, b.commonName, name);
    assert.match(c.issuer, new RegExp(`CN=${b.issuerCommonName}`), name);
  }
});

test("site authorities: PEM bundles and DER files by name; a missing set is unconfigured, a bad file an error", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-site-"));
  const a = await makeTestCa("Site A");
  const b = await makeTestCa("Site B");
  writeFileSync(join(dir, "lab-db.pem"), a.pem + b.pem);
  writeFileSync(join(dir, "hookos-signer.der"), a.der);
  const refs = profileAuthorityRefs(loadProfile("hookos"));
  const auth = resolveAuthorities(refs, dir);
  assert.deepEqual(auth.get("site:lab-db")!.certs.map((c) => c.commonName), ["Site A", "Site B"]);
  assert.equal(auth.get("site:hookos-signer")!.certs[0]!.sha256, certSummary(a.der)!.sha256);
  assert.equal(auth.get("site:lab-pk")!.source, undefined);
  assert.equal(auth.get("builtin:microsoft-uefi-ca-2011")!.certs.length, 1);
  writeFileSync(join(dir, "lab-kek.pem"), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  assert.throws(() => resolveAuthorities(refs, dir), (e: unknown) => e instanceof AuthorityConfigError && e.code === "bad-certificate");
  assert.throws(() => resolveAuthorities(["builtin:nope"]), /unknown built-in authority/);
});
