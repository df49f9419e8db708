/** CA bundle rollover logic and its state file, with software CA keys (no token needed). */
import { strict as assert } from "node:assert";
import { generateKeyPairSync } from "node:crypto";
import { test } from "node:test";
import { newSoftwareSigner } from "@fleetd/testkit/softwareSigner";
import {
  addCa, bundleAt, bundlePem, currentCa, emptyBundleState, pruneBundleState, recordIssuance, removalDate,
  parseBundleState, serializeBundleState, type BundleState, createCaCertificate, type CaCertificate, PkiError,
  issueLdevidCertificate, type CertificateSigner, certificatesFromPem, verifyIssued,
} from "@fleetd/platform/pki";

const day = 86_400_000;
const T0 = new Date("2026-01-01T00:00:00Z");
const at = (days: number) => new Date(T0.getTime() + days * day);
const isCode = (code: string) => (e: unknown) => e instanceof PkiError && e.code === code;

async function ca(name: string, startDay = -1): Promise<{ cert: CaCertificate; signer: CertificateSigner }> {
  const signer = newSoftwareSigner();
  return { cert: await createCaCertificate({ signer, commonName: name, notBefore: at(startDay), lifetimeDays: 400 }), signer };
}

const fps = (entries: { record: { fingerprint: string } }[]) => entries.map((e) => e.record.fingerprint);

test("rollover: the old CA stays until its last issuance + 30 days, then leaves", async () => {
  const a = await ca("CA A");
  const b = await ca("CA B");
  let s: BundleState = addCa(emptyBundleState(), a.cert.pem, T0);
  assert.equal(currentCa(s, at(1)).fingerprint, a.cert.fingerprint);
  assert.throws(() => currentCa(s, at(-0.5)), isCode("no-current-ca"));

  // A issues on day 10, valid 30 days from day 10
  const leaf = await issueLdevidCertificate({ certificate: a.cert.pem, signer: a.signer }, {
    node: "n1", generation: 1, publicKey: new Uint8Array(generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ type: "spki", format: "der" })), notBefore: at(10), lifetimeDays: 30,
  });
  s = recordIssuance(s, { issuerFingerprint: leaf.issuerFingerprint, at: at(10), notAfter: leaf.notAfter });

  // B is added on day 11 to activate on day 12: published first, issuing from day 12
  s = addCa(s, b.cert.pem, at(12));
  assert.deepEqual(bundleAt(s, at(11)).map((e) => e.status), ["current", "pending"]);
  assert.deepEqual(fps(bundleAt(s, at(11))), [a.cert.fingerprint, b.cert.fingerprint]);
  assert.equal(currentCa(s, at(11)).fingerprint, a.cert.fingerprint);
  assert.equal(currentCa(s, at(12)).fingerprint, b.cert.fingerprint);

  // A may not issue once B is current
  assert.throws(() => recordIssuance(s, { issuerFingerprint: a.cert.fingerprint, at: at(13), notAfter: at(43) }), isCode("ca-not-current"));
  const aRecord = s.cas[0];
  assert.ok(aRecord);
  assert.equal(removalDate(s, aRecord)?.toISOString(), at(40).toISOString()); // day 10 + 30

  // until day 40 the bundle still holds A, and the A-issued leaf verifies against it
  const before = bundleAt(s, at(39.9));
  assert.deepEqual(fps(before), [b.cert.fingerprint, a.cert.fingerprint]);
  assert.deepEqual(before.map((e) => e.status), ["current", "retired"]);
  assert.equal(verifyIssued(leaf.der, before.map((e) => e.record.certificatePem), at(39.9)).verdict, "pass");
  assert.equal(certificatesFromPem(bundlePem(s, at(39.9))).length, 2);

  // at day 40 A is gone (and the leaf has expired with it)
  assert.deepEqual(fps(bundleAt(s, at(40))), [b.cert.fingerprint]);
  assert.equal(certificatesFromPem(bundlePem(s, at(40))).length, 1);
  const after = verifyIssued(leaf.der, bundleAt(s, at(40)).map((e) => e.record.certificatePem), at(40));
  assert.ok(after.reasons.some((r) => r.check === "pki.chain"));
  assert.equal(pruneBundleState(s, at(40)).cas.length, 1);
  assert.equal(pruneBundleState(s, at(39)).cas.length, 2);
});

test("removal date: a CA that never issued leaves when retired; the latest notAfter is never cut short", async () => {
  const a = await ca("CA A");
  const b = await ca("CA B");
  const c = await ca("CA C");
  let s = addCa(emptyBundleState(), a.cert.pem, T0);
  s = addCa(s, b.cert.pem, at(5));
  assert.deepEqual(fps(bundleAt(s, at(5))), [b.cert.fingerprint]);
  // B issues on day 6 and records a notAfter beyond day 6 + 30 (defensive rule)
  s = recordIssuance(s, { issuerFingerprint: b.cert.fingerprint, at: at(6), notAfter: at(37) });
  s = recordIssuance(s, { issuerFingerprint: b.cert.fingerprint, at: at(4 + 1.5), notAfter: at(20) }); // older: no effect
  s = addCa(s, c.cert.pem, at(8));
  const bRecord = s.cas[1];
  assert.ok(bRecord);
  assert.equal(bRecord.lastIssuance?.toISOString(), at(6).toISOString());
  assert.equal(removalDate(s, bRecord)?.toISOString(), at(37).toISOString());
  assert.deepEqual(fps(bundleAt(s, at(36))), [c.cert.fingerprint, b.cert.fingerprint]);
  assert.deepEqual(fps(bundleAt(s, at(37))), [c.cert.fingerprint]);
});

test("addCa refuses duplicates, out-of-order activation, non-CAs and inactive certificates", async () => {
  const a = await ca("CA A");
  const b = await ca("CA B");
  let s = addCa(emptyBundleState(), a.cert.pem, T0);
  assert.throws(() => addCa(s, a.cert.der, at(1)), isCode("ca-duplicate"));
  assert.throws(() => addCa(s, b.cert.pem, T0), isCode("activation-order"));
  assert.throws(() => addCa(s, b.cert.pem, at(500)), isCode("activation-order"));
  const leaf = await issueLdevidCertificate({ certificate: a.cert.pem, signer: a.signer }, {
    node: "n1", generation: 1, publicKey: new Uint8Array(generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ type: "spki", format: "der" })), notBefore: at(1), lifetimeDays: 1,
  });
  assert.throws(() => addCa(s, leaf.pem, at(2)), isCode("not-a-ca"));
  s = addCa(s, b.cert.pem, at(2));
  assert.equal(s.cas.length, 2);
});

test("the state file round-trips and is checked on load", async () => {
  const a = await ca("CA A");
  const b = await ca("CA B");
  let s = addCa(emptyBundleState(), a.cert.pem, T0);
  s = recordIssuance(s, { issuerFingerprint: a.cert.fingerprint, at: at(1), notAfter: at(31) });
  s = addCa(s, b.cert.pem, at(2));
  const text = serializeBundleState(s);
  const back = parseBundleState(text);
  assert.equal(serializeBundleState(back), text);
  assert.deepEqual(fps(bundleAt(back, at(3))), fps(bundleAt(s, at(3))));

  const file = JSON.parse(text) as { version: number; cas: Record<string, unknown>[] };
  const mutate = (f: (x: typeof file) => void): string => {
    const copy = JSON.parse(text) as typeof file;
    f(copy);
    return JSON.stringify(copy);
  };
  const refuses = (t: string, pattern: RegExp) =>
    assert.throws(() => parseBundleState(t, "ca-bundle.json"), (e) => isCode("bundle-state-invalid")(e) && pattern.test((e as Error).message), pattern.source);
  refuses("{", /not JSON/);
  refuses(mutate((x) => (x.version = 2)), /version/);
  refuses(mutate((x) => ((x.cas[0] as Record<string, unknown>)["fingerprint"] = "00".repeat(32))), /does not match its certificate/);
  refuses(mutate((x) => ((x.cas[1] as Record<string, unknown>)["activatesAt"] = T0.toISOString())), /not after CA 1/);
  refuses(mutate((x) => ((x.cas[0] as Record<string, unknown>)["extra"] = 1)), /cas\.0/);
  refuses(mutate((x) => ((x.cas[0] as Record<string, unknown>)["lastIssuance"] = "yesterday")), /cas\.0\.lastIssuance/);
  refuses(mutate((x) => (x.cas[1] = x.cas[0] as Record<string, unknown>)), /listed twice|not after/);
  refuses(mutate((x) => ((x.cas[0] as Record<string, unknown>)["certificate"] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")), /CA 1/);
  assert.equal(file.cas.length, 2);
});
