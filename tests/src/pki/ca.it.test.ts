/**
 * The CA on a real SoftHSM2 token through real pkcs11js: a self-signed CA made by signing through PKCS#11,
 * LDevIDs for fresh P-256 and RSA-2048 keys checked attribute by attribute against what SPIRE's tpm_devid
 * requires (shared/research/spire.md §3.4, §7), with OpenSSL as an independent judge.
 */
import { strict as assert } from "node:assert";
import { createHash, generateKeyPairSync, randomBytes, sign, verify, X509Certificate, type KeyObject } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import {
  createCaCertificate, parseIssuedCertificate, issueLakCertificate, issueLdevidCertificate, OID_EKU_CLIENT_AUTH,
  OID_EKU_TCG_AIK_CERTIFICATE, openPkcs11Signer, PkiError, verifyIssued, type IssuingCa,
} from "@fleetd/platform/pki";
import { createSoftHsmCa, startSoftHsm, type SoftHsm, type SoftHsmCa } from "../harness/softhsm.js";
import { extensionBlock, openssl, x509Text } from "../harness/openssl.js";

const TOKEN = "fleetd-ca";
let hsm: SoftHsm;
let p256: SoftHsmCa;
let signatures = 0;
const now = new Date();
const minute = 60_000;
const day = 86_400_000;

before(async () => {
  hsm = await startSoftHsm([
    {
      label: TOKEN,
      pin: "4711-ca-pin",
      soPin: "so-pin-0815",
      keys: [
        { label: "ca-p256", id: "01", type: "ec-p256" },
        { label: "ca-rsa", id: "02", type: "rsa-2048", alwaysAuthenticate: true },
        { label: "ca-p384", id: "03", type: "ec-p384" },
      ],
    },
  ]);
  p256 = await createSoftHsmCa(hsm, {
    token: TOKEN,
    key: "ca-p256",
    commonName: "fleetd test CA",
    notBefore: new Date(now.getTime() - day),
    lifetimeDays: 365,
    signerOptions: { observe: { signStart: () => signatures++, signEnd: () => undefined } },
  });
});

after(async () => {
  await p256?.signer.close();
  hsm?.close();
});

function write(name: string, pem: string): string {
  const path = join(hsm.dir, name);
  writeFileSync(path, pem);
  return path;
}

function fresh(kind: "ec" | "rsa"): { publicKey: KeyObject; privateKey: KeyObject; spki: Uint8Array } {
  const k = kind === "rsa" ? generateKeyPairSync("rsa", { modulusLength: 2048 }) : generateKeyPairSync("ec", { namedCurve: "P-256" });
  return { ...k, spki: new Uint8Array(k.publicKey.export({ type: "spki", format: "der" })) };
}

const issuing = (): IssuingCa => ({ certificate: p256.ca.pem, signer: p256.signer });

test("the CA certificate is self-signed through PKCS#11 with the token's key", () => {
  const caPath = write("ca.pem", p256.ca.pem);
  const text = x509Text(caPath);
  assert.match(text, /Issuer: CN = fleetd test CA/);
  assert.match(text, /Subject: CN = fleetd test CA/);
  assert.match(text, /Signature Algorithm: ecdsa-with-SHA256/);
  assert.deepEqual(extensionBlock(text, "X509v3 Basic Constraints"), { critical: true, value: "CA:TRUE, pathlen:0" });
  assert.deepEqual(extensionBlock(text, "X509v3 Key Usage"), { critical: true, value: "Certificate Sign, CRL Sign" });
  assert.ok(extensionBlock(text, "X509v3 Subject Key Identifier"));
  const v = openssl(["verify", "-x509_strict", "-CAfile", caPath, caPath]);
  assert.equal(v.status, 0, v.stderr + v.stdout);
  // the certified key is the token's key: signer.publicKey was read from the token's public-key object
  const x = new X509Certificate(p256.ca.der);
  assert.ok(x.publicKey.export({ type: "spki", format: "der" }).equals(Buffer.from(p256.signer.publicKey.spki)));
  assert.ok(x.verify(x.publicKey));
  assert.equal(p256.signer.mechanism, "CKM_ECDSA");
});

for (const kind of ["ec", "rsa"] as const) {
  test(`LDevID for a fresh ${kind === "ec" ? "P-256" : "RSA-2048"} key satisfies SPIRE tpm_devid's rules`, async () => {
    const key = fresh(kind);
    const notBefore = new Date(now.getTime() - 5 * minute); // backdated for clock skew
    const leaf = await issueLdevidCertificate(issuing(), { node: "worker-1", generation: 4, publicKey: key.spki, notBefore, lifetimeDays: 30 });
    const info = parseIssuedCertificate(leaf.der);
    const x = new X509Certificate(leaf.der);

    // §3.4/§7: the leaf public key is the DevID key (SPIRE checks proof of possession against it)
    assert.deepEqual(info.spki, key.spki);
    const nonce = randomBytes(32);
    const pop = sign("sha256", nonce, key.privateKey); // TPM2_Sign with RSASSA/ECDSA-SHA256 stands in here
    assert.ok(verify("sha256", nonce, x.publicKey, pop), "nonce signature verifies under the certificate's key with SHA-256");
    // subject CN = <node>.g<generation>, non-empty (selector subject:cn); issuer CN = the CA (selector issuer:cn)
    assert.equal(info.subjectCn, "worker-1.g4");
    assert.equal(info.issuerCn, "fleetd test CA");
    // validity: ≤ 30 days, covers now, notBefore backdated
    assert.ok(info.notAfter.getTime() - info.notBefore.getTime() <= 30 * day);
    assert.ok(info.notBefore <= now && now <= info.notAfter);
    // SHA-256 signature (Go rejects SHA-1), positive serial (Go ≥ 1.23 rejects negative)
    assert.equal(info.signatureAlgorithm, "1.2.840.10045.4.3.2");
    assert.ok((info.serial[0] ?? 0xff) < 0x80 && info.serial.length === 16);
    // no unknown critical extension: only KeyUsage and BasicConstraints are critical; no SAN
    assert.deepEqual(info.extensions.filter((e) => e.critical).map((e) => e.oid).sort(), ["2.5.29.15", "2.5.29.19"]);
    assert.ok(!info.extensions.some((e) => e.oid === "2.5.29.17"));
    assert.deepEqual(info.keyUsage, ["digitalSignature"]);
    assert.deepEqual(info.extendedKeyUsage, [OID_EKU_CLIENT_AUTH]);
    assert.equal(info.basicConstraints?.ca, false);

    // OpenSSL agrees: parse, strict chain verification, and the text view of each attribute
    const leafPath = write(`ldevid-${kind}.pem`, leaf.pem);
    const caPath = write("ca.pem", p256.ca.pem);
    const v = openssl(["verify", "-x509_strict", "-purpose", "sslclient", "-CAfile", caPath, leafPath]);
    assert.equal(v.status, 0, v.stderr + v.stdout);
    assert.match(v.stdout, /: OK/);
    const text = x509Text(leafPath);
    assert.match(text, /Version: 3 \(0x2\)/);
    assert.match(text, /Subject: CN = worker-1\.g4\n/);
    assert.match(text, /Issuer: CN = fleetd test CA\n/);
    assert.match(text, kind === "ec" ? /Public Key Algorithm: id-ecPublicKey[\s\S]*NIST CURVE: P-256/ : /Public Key Algorithm: rsaEncryption[\s\S]*Public-Key: \(2048 bit\)/);
    assert.deepEqual(extensionBlock(text, "X509v3 Key Usage"), { critical: true, value: "Digital Signature" });
    assert.deepEqual(extensionBlock(text, "X509v3 Basic Constraints"), { critical: true, value: "CA:FALSE" });
    assert.deepEqual(extensionBlock(text, "X509v3 Extended Key Usage"), { critical: false, value: "TLS Web Client Authentication" });
    assert.equal(extensionBlock(text, "X509v3 Subject Key Identifier")?.critical, false);
    assert.equal(extensionBlock(text, "X509v3 Authority Key Identifier")?.critical, false);
    assert.equal(extensionBlock(text, "X509v3 Subject Alternative Name"), undefined);
    assert.equal((text.match(/critical/g) ?? []).length, 2);

    // fleetd's own verifier agrees
    const verdict = verifyIssued(leaf.pem, [p256.ca.pem], now, { profile: "ldevid" });
    assert.deepEqual(verdict.reasons, []);
    assert.equal(verdict.issuerFingerprint, p256.ca.fingerprint);
    // SPIRE's agent ID for this certificate would be spiffe://<td>/spire/agent/tpm_devid/<sha1(leaf DER)>
    assert.match(createHash("sha1").update(leaf.der).digest("hex"), /^[0-9a-f]{40}$/);
  });
}

test("LAK certificate: its own CN and the TCG AIK-certificate EKU, verified by OpenSSL", async () => {
  const key = fresh("rsa");
  const lak = await issueLakCertificate(issuing(), { node: "worker-1", generation: 4, publicKey: key.spki, notBefore: new Date(now.getTime() - minute), lifetimeDays: 30 });
  const lakPath = write("lak.pem", lak.pem);
  const v = openssl(["verify", "-x509_strict", "-CAfile", write("ca.pem", p256.ca.pem), lakPath]);
  assert.equal(v.status, 0, v.stderr + v.stdout);
  const text = x509Text(lakPath);
  assert.match(text, /Subject: CN = worker-1\.g4\.lak\n/);
  assert.deepEqual(extensionBlock(text, "X509v3 Extended Key Usage"), { critical: false, value: OID_EKU_TCG_AIK_CERTIFICATE });
  assert.equal(verifyIssued(lak.der, [p256.ca.der], now, { profile: "lak" }).verdict, "pass");
});

test("a request over 30 days is refused before anything is signed", async () => {
  const before = signatures;
  await assert.rejects(
    issueLdevidCertificate(issuing(), { node: "worker-1", generation: 5, publicKey: fresh("ec").spki, notBefore: now, lifetimeDays: 31 }),
    (e) => e instanceof PkiError && e.code === "lifetime-too-long" && /31 days exceeds the 30-day maximum/.test(e.message),
  );
  assert.equal(signatures, before, "the token was not asked to sign");
  await issueLdevidCertificate(issuing(), { node: "worker-1", generation: 5, publicKey: fresh("ec").spki, notBefore: now, lifetimeDays: 30 });
  assert.equal(signatures, before + 1, "the instrumentation counts token signatures (so the assertion above can fail)");
});

test("RSA CA keys (CKA_ALWAYS_AUTHENTICATE like PIV 9c; both RSA mechanisms) and a P-384 CA key", async () => {
  const cases = [
    { key: "ca-rsa", extra: {}, mechanism: "CKM_SHA256_RSA_PKCS", alg: "sha256WithRSAEncryption" },
    { key: "ca-rsa", extra: { rsaMechanism: "CKM_RSA_PKCS" as const }, mechanism: "CKM_RSA_PKCS", alg: "sha256WithRSAEncryption" },
    { key: "ca-p384", extra: {}, mechanism: "CKM_ECDSA", alg: "ecdsa-with-SHA384" },
  ];
  for (const c of cases) {
    const signer = await openPkcs11Signer(hsm.signerConfig(TOKEN, c.key, c.extra));
    try {
      assert.equal(signer.mechanism, c.mechanism);
      const ca = await createCaCertificate({ signer, commonName: `CA ${c.key} ${c.mechanism}`, notBefore: new Date(now.getTime() - day), lifetimeDays: 90 });
      const leaf = await issueLdevidCertificate({ certificate: ca.pem, signer }, { node: "n", generation: 1, publicKey: fresh("ec").spki, notBefore: now, lifetimeDays: 7 });
      const caPath = write(`ca-${c.key}.pem`, ca.pem);
      const leafPath = write(`leaf-${c.key}.pem`, leaf.pem);
      const v = openssl(["verify", "-x509_strict", "-CAfile", caPath, leafPath]);
      assert.equal(v.status, 0, `${c.key} ${c.mechanism}: ${v.stderr}${v.stdout}`);
      assert.match(x509Text(leafPath), new RegExp(`Signature Algorithm: ${c.alg}`));
    } finally {
      await signer.close();
    }
  }
});
