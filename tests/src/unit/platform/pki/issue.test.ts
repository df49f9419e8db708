/**
 * Certificate profiles and refusals with a software CA key (the PKCS#11 path is in tests/src/pki/*.it.test.ts,
 * where the same functions run against SoftHSM2 and OpenSSL checks the result).
 */
import { tpmPublicFromKey } from "@fleetd/testkit/tpmPublic";
import { strict as assert } from "node:assert";
import { generateKeyPairSync, X509Certificate } from "node:crypto";
import { test } from "node:test";
import { encode, decodeExact } from "@fleetd/verify/codec";
import { objectAttributes } from "@fleetd/verify/tcg";
import { TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { newSoftwareSigner } from "@fleetd/testkit/softwareSigner";
import {
  signCertificate, createCaCertificate, type CaCertificate, PkiError,
  OID_EKU_CLIENT_AUTH, OID_EKU_TCG_AIK_CERTIFICATE, issueLakCertificate, issueLdevidCertificate, type IssuingCa,
  type LeafRequest, parseIssuedCertificate, keyIdentifier, renewalDue, renewalTime,
  type CertificateSigner, verifyIssued,
} from "@fleetd/platform/pki";
import { basicConstraintsExtension, commonNameName, type Extension, keyUsageExtension } from "@fleetd/verify/x509";

const T0 = new Date("2026-11-01T00:00:00Z");
const hour = 3_600_000;
const day = 24 * hour;

const isCode = (code: string) => (e: unknown) => e instanceof PkiError && e.code === code;

async function softwareCa(kind: "ec-p256" | "ec-p384" | "rsa-2048" = "ec-p256", name = "fleetd unit CA"): Promise<{ ca: CaCertificate; signer: CertificateSigner; issuing: IssuingCa }> {
  const signer = newSoftwareSigner(kind);
  const ca = await createCaCertificate({ signer, commonName: name, notBefore: new Date(T0.getTime() - day), lifetimeDays: 365 });
  return { ca, signer, issuing: { certificate: ca.pem, signer } };
}

function spki(kind: "ec" | "rsa" | "ec-p384" | "rsa-3072" = "ec"): Uint8Array {
  const k =
    kind === "rsa" ? generateKeyPairSync("rsa", { modulusLength: 2048 })
    : kind === "rsa-3072" ? generateKeyPairSync("rsa", { modulusLength: 3072 })
    : generateKeyPairSync("ec", { namedCurve: kind === "ec-p384" ? "P-384" : "P-256" });
  return new Uint8Array(k.publicKey.export({ type: "spki", format: "der" }));
}

function request(overrides: Partial<LeafRequest> = {}): LeafRequest {
  return { node: "worker-7", generation: 3, publicKey: spki(), notBefore: new Date(T0.getTime() - 5 * 60_000), lifetimeDays: 30, ...overrides };
}

test("LDevID profile: subject, validity, extensions, chain", async () => {
  const { ca, issuing } = await softwareCa();
  const leaf = await issueLdevidCertificate(issuing, request());
  const c = parseIssuedCertificate(leaf.der);
  assert.equal(c.version, 3);
  assert.equal(c.subjectCn, "worker-7.g3");
  assert.equal(c.issuerCn, "fleetd unit CA");
  assert.equal(c.notBefore.toISOString(), "2026-10-31T23:55:00.000Z");
  assert.equal(c.notAfter.getTime() - c.notBefore.getTime(), 30 * day);
  assert.equal(c.serial.length, 16);
  assert.ok((c.serial[0] ?? 0) >= 0x40 && (c.serial[0] ?? 0) < 0x80);
  assert.deepEqual(c.keyUsage, ["digitalSignature"]);
  assert.deepEqual(c.extendedKeyUsage, [OID_EKU_CLIENT_AUTH]);
  assert.deepEqual(c.basicConstraints, { ca: false });
  const critical = c.extensions.filter((e) => e.critical).map((e) => e.oid).sort();
  assert.deepEqual(critical, ["2.5.29.15", "2.5.29.19"]);
  assert.ok(!c.extensions.some((e) => e.oid === "2.5.29.17"), "no SAN");
  assert.deepEqual(c.subjectKeyIdentifier, keyIdentifier(c.spki));
  assert.deepEqual(c.authorityKeyIdentifier, parseIssuedCertificate(ca.der).subjectKeyIdentifier);
  const x = new X509Certificate(leaf.der);
  assert.ok(x.verify(new X509Certificate(ca.der).publicKey));
  assert.equal(leaf.issuerFingerprint, ca.fingerprint);
  const v = verifyIssued(leaf.pem, [ca.pem], T0, { profile: "ldevid" });
  assert.deepEqual(v.reasons, []);
  assert.equal(v.verdict, "pass");
});

test("LAK profile: its own CN and the TCG AIK-certificate EKU; not accepted as an LDevID", async () => {
  const { ca, issuing } = await softwareCa("rsa-2048");
  const lak = await issueLakCertificate(issuing, request({ publicKey: spki("rsa") }));
  const c = parseIssuedCertificate(lak.der);
  assert.equal(c.subjectCn, "worker-7.g3.lak");
  assert.deepEqual(c.extendedKeyUsage, [OID_EKU_TCG_AIK_CERTIFICATE]);
  assert.equal(c.signatureAlgorithm, "1.2.840.113549.1.1.11");
  assert.equal(verifyIssued(lak.der, [ca.der], T0, { profile: "lak" }).verdict, "pass");
  const asLdevid = verifyIssued(lak.der, [ca.der], T0, { profile: "ldevid" });
  assert.deepEqual(asLdevid.reasons.map((r) => r.check).sort(), ["pki.profile.eku", "pki.profile.subject"]);
});

test("a TPMT_PUBLIC gives the same certified key as its SPKI", async () => {
  const { issuing } = await softwareCa();
  const k = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const pub = tpmPublicFromKey(k.publicKey, objectAttributes("fixedTPM", "fixedParent", "sensitiveDataOrigin", "userWithAuth", "sign"));
  const decoded = decodeExact(TPMT_PUBLIC, encode(TPMT_PUBLIC, pub));
  const fromTpm = await issueLdevidCertificate(issuing, request({ publicKey: decoded }));
  const fromSpki = await issueLdevidCertificate(issuing, request({ publicKey: new Uint8Array(k.publicKey.export({ type: "spki", format: "der" })) }));
  assert.deepEqual(parseIssuedCertificate(fromTpm.der).spki, parseIssuedCertificate(fromSpki.der).spki);
});

test("refusals: lifetime, validity, keys, names, serials, CA", async () => {
  const { ca, issuing } = await softwareCa();
  await assert.rejects(issueLdevidCertificate(issuing, request({ lifetimeDays: 31 })), isCode("lifetime-too-long"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ lifetimeDays: 30.001 })), isCode("lifetime-too-long"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ lifetimeDays: 0 })), isCode("invalid-lifetime"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ lifetimeDays: Number.NaN })), isCode("invalid-lifetime"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ notBefore: new Date("garbage") })), isCode("invalid-validity"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ notBefore: new Date(T0.getTime() - 2 * day) })), isCode("invalid-validity"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ notBefore: new Date(ca.notAfter.getTime() - day) })), isCode("outlives-ca"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ publicKey: spki("ec-p384") })), isCode("unsupported-key"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ publicKey: spki("rsa-3072") })), isCode("unsupported-key"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ publicKey: new Uint8Array([0x30, 0x03, 0x02, 0x01, 0x00]) })), isCode("invalid-key"));
  await assert.rejects(issueLdevidCertificate(issuing, request({ publicKey: issuing.signer.publicKey.spki })), isCode("invalid-key"));
  for (const node of ["", "Worker", "a_b", "-a", "a-", "a..b", "x".repeat(70)]) {
    await assert.rejects(issueLdevidCertificate(issuing, request({ node })), isCode("invalid-node-name"), node);
  }
  for (const generation of [0, -1, 1.5, Number.MAX_SAFE_INTEGER + 1]) {
    await assert.rejects(issueLdevidCertificate(issuing, request({ generation })), isCode("invalid-generation"), String(generation));
  }
  for (const serial of [new Uint8Array(0), new Uint8Array(21).fill(1), Uint8Array.of(0x80, 1), Uint8Array.of(0, 1), Uint8Array.of(0)]) {
    await assert.rejects(issueLdevidCertificate(issuing, request({ serial })), isCode("invalid-serial"));
  }
  const ok = await issueLdevidCertificate(issuing, request({ serial: Uint8Array.of(0x00, 0x80, 0x01) }));
  assert.equal(ok.serialHex, "008001");
  const other = await softwareCa();
  await assert.rejects(issueLdevidCertificate({ certificate: ca.pem, signer: other.signer }, request()), isCode("ca-key-mismatch"));
  const leaf = await issueLdevidCertificate(issuing, request());
  await assert.rejects(issueLdevidCertificate({ certificate: leaf.pem, signer: issuing.signer }, request()), isCode("not-a-ca"));
  await assert.rejects(issueLdevidCertificate({ certificate: "not a pem", signer: issuing.signer }, request()), isCode("certificate-invalid"));
});

test("every CA key kind signs verifiable certificates", async () => {
  for (const kind of ["ec-p256", "ec-p384", "rsa-2048"] as const) {
    const { ca, issuing } = await softwareCa(kind);
    const leaf = await issueLdevidCertificate(issuing, request({ publicKey: spki("rsa") }));
    assert.equal(verifyIssued(leaf.der, [ca.der], T0).verdict, "pass", kind);
    assert.ok(new X509Certificate(ca.der).verify(new X509Certificate(ca.der).publicKey), `${kind} CA self-signature`);
  }
});

test("renewal is due at two thirds of the lifetime", async () => {
  const { issuing } = await softwareCa();
  const leaf = await issueLdevidCertificate(issuing, request({ notBefore: T0, lifetimeDays: 30 }));
  assert.equal(renewalTime(leaf.der).toISOString(), new Date(T0.getTime() + 20 * day).toISOString());
  assert.equal(renewalDue(leaf.der, new Date(T0.getTime() + 20 * day - 1000)), false);
  assert.equal(renewalDue(leaf.der, new Date(T0.getTime() + 20 * day)), true);
  assert.equal(renewalDue(leaf.pem, new Date(T0.getTime() + 40 * day)), true);
  const short = await issueLdevidCertificate(issuing, request({ notBefore: T0, lifetimeDays: 3 }));
  assert.equal(renewalTime(short.der).toISOString(), new Date(T0.getTime() + 2 * day).toISOString());
});

test("verifyIssued names each failure", async () => {
  const { ca, issuing, signer } = await softwareCa();
  const leaf = await issueLdevidCertificate(issuing, request());
  const checks = (v: { reasons: { check: string }[] }) => v.reasons.map((r) => r.check).sort();

  assert.deepEqual(checks(verifyIssued(leaf.der, [ca.der], new Date(T0.getTime() + 31 * day))), ["pki.leaf.validity"]);
  assert.deepEqual(checks(verifyIssued(leaf.der, [ca.der], new Date(T0.getTime() - hour))), ["pki.leaf.validity"]);
  const stranger = await softwareCa("ec-p256", "another CA");
  const v = verifyIssued(leaf.der, [stranger.ca.der], T0);
  assert.deepEqual(checks(v), ["pki.chain"]);
  assert.match(v.reasons[0]?.detail ?? "", /issued by "fleetd unit CA", which is not in the bundle/);
  // same name, different key: the name matches but the signature does not verify
  const twin = await softwareCa("ec-p256", "fleetd unit CA");
  assert.match(verifyIssued(leaf.der, [twin.ca.der], T0).reasons[0]?.detail ?? "", /signature does not verify|not in the bundle/);
  assert.equal(verifyIssued(leaf.der, [twin.ca.der, ca.der], T0).verdict, "pass");
  assert.deepEqual(checks(verifyIssued(new Uint8Array([1, 2, 3]), [ca.der], T0)), ["pki.leaf.parse"]);
  assert.deepEqual(checks(verifyIssued(leaf.der, [], T0)), ["pki.chain"]);

  // hand-built leaves the CA would never issue: a CA:TRUE leaf, an unknown critical extension, > 30 days, no KU
  const caInfo = parseIssuedCertificate(ca.der);
  const build = (extensions: Extension[], days = 30) =>
    signCertificate({ serial: Uint8Array.of(0x11), issuer: caInfo.subject, subject: commonNameName("bad.g1"), notBefore: T0, notAfter: new Date(T0.getTime() + days * day), spki: spki(), extensions }, signer);
  const ku = keyUsageExtension(["digitalSignature"]);
  const weird: Extension = { oid: "1.3.6.1.4.1.99999.1", critical: true, value: new Uint8Array([5, 0]) };
  assert.deepEqual(checks(verifyIssued(await build([basicConstraintsExtension(true), ku]), [ca.der], T0)), ["pki.leaf.basicConstraints"]);
  assert.deepEqual(checks(verifyIssued(await build([ku, weird]), [ca.der], T0)), ["pki.leaf.criticalExtension"]);
  assert.deepEqual(checks(verifyIssued(await build([ku], 31), [ca.der], T0)), ["pki.leaf.lifetime"]);
  assert.deepEqual(checks(verifyIssued(await build([]), [ca.der], T0)), ["pki.leaf.keyUsage"]);
});
