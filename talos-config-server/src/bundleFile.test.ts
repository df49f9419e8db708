/** The CA bundle state file: atomic rewrite, round trip, clear errors. */
import { strict as assert } from "node:assert";
import { mkdtempSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { createCaCertificate, addCa, emptyBundleState, recordIssuance, PkiError } from "@fleetd/platform/pki";
import { newSoftwareSigner } from "@fleetd/testkit/softwareSigner";
import { ConfigError } from "@fleetd/platform/fleet";
import { loadBundleStateFile, saveBundleStateFile } from "./bundleFile.js";

test("save then load gives the same state; the file is replaced whole and private; no temporary file is left", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-bundle-"));
  const path = join(dir, "ca-bundle.json");
  const at = new Date("2026-01-01T00:00:00Z");
  const ca = await createCaCertificate({ signer: newSoftwareSigner(), commonName: "fleetd test CA", notBefore: at, lifetimeDays: 365 });
  const first = addCa(emptyBundleState(), ca.pem, at);
  saveBundleStateFile(path, first);
  assert.deepEqual(loadBundleStateFile(path), first);
  const next = recordIssuance(first, { issuerFingerprint: ca.fingerprint, at: new Date("2026-02-01T00:00:00Z"), notAfter: new Date("2026-03-01T00:00:00Z") });
  saveBundleStateFile(path, next);
  assert.deepEqual(loadBundleStateFile(path), next);
  assert.deepEqual(readdirSync(dir), ["ca-bundle.json"]);
  assert.equal(statSync(path).mode & 0o777, 0o600);
});

test("a missing or broken state file is a clear error", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-bundle-"));
  assert.throws(() => loadBundleStateFile(join(dir, "none.json")), (e: unknown) => e instanceof ConfigError && /server\.ca\.bundleStateFile: cannot read .*none\.json: ENOENT \(create the CA/.test(e.message));
  writeFileSync(join(dir, "bad.json"), JSON.stringify({ version: 1, cas: [{ certificate: "x" }] }));
  assert.throws(() => loadBundleStateFile(join(dir, "bad.json")), (e: unknown) => e instanceof PkiError && e.code === "bundle-state-invalid" && /bad\.json: cas\.0\./.test(e.message));
});
