import { strict as assert } from "node:assert";
import { createHash, createPublicKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { ParseError } from "@fleetd/verify/codec";
import { keyObjectFromTpmPublic } from "@fleetd/verify/tpm";
import { conformance } from "@fleetd/testkit/conformance";
import { relabelRsaAsOaep } from "@fleetd/testkit/x509Builder";
import { ekBinding, ekBindingFromCertificate, ekBindingFromTpmPublic, readCertificate, ekPublicFromCertificate, readEkPublic } from "@fleetd/verify/ek";
import { parseSubjectPublicKeyInfo, CertificateError, toPem, canonicalKey } from "@fleetd/verify/x509";

const file = (rel: string) => new Uint8Array(readFileSync(conformance(rel)));
const enc = (s: string) => new TextEncoder().encode(s);

test("certificate, rebuilt TPM public area and PEM public key give the same EK binding (STMicro RSA and ECC, GCE)", () => {
  const expected: Record<string, string> = {
    // = sha256(openssl x509 -pubkey | openssl pkey -pubin -outform der), checked by hand
    "ek/certs/stm_st33htph_rsa_ek.der": "de6a6ba0564fc32ed137b2e2c97b39c741e87a3fbbb80bc9092b75b6dc8a2aab",
    "ek/certs/stm_st33htph_ecc_ek.der": "da87f7c33d64091ea39f83a22a4ea25549f6e91b2e448251bd57fa3dfcf39560",
    "ek/certs/gce_pca_tpm_ecc_enc_cert.pem": "0f5c1fcd070862edf0c73336ba3f675ba4ba045267a96a76f38f569c09335106",
  };
  for (const [f, want] of Object.entries(expected)) {
    const { cert } = readCertificate(file(f));
    const fromCert = ekBindingFromCertificate(cert);
    const built = ekPublicFromCertificate(cert);
    const fromTpm = ekBindingFromTpmPublic(built.public);
    const nodePem = new TextEncoder().encode(
      createPublicKey(Buffer.from(toPem("CERTIFICATE", cert.der))).export({ type: "spki", format: "pem" }) as string,
    );
    const fromPem = readEkPublic(nodePem);
    const tpm2b = new Uint8Array([built.bytes.length >> 8, built.bytes.length & 0xff, ...built.bytes]);
    const fromTpm2b = readEkPublic(tpm2b);
    assert.equal(fromCert, want, f);
    assert.equal(fromTpm, want, f);
    assert.equal(fromPem.binding, want, f);
    assert.equal(fromPem.form, "pem");
    assert.equal(fromTpm2b.binding, want, f);
    assert.equal(fromTpm2b.form, "tpm2b_public");
  }
});

test("Intel PTT TPM2B_PUBLIC: TPM2B, bare TPMT, PEM, PKCS#1 PEM and DER SPKI of the same key agree", () => {
  for (const k of ["rsa", "ecc"] as const) {
    const tpm2b = file(`ek/public/intel_ptt_${k}_ek.tpm2b_public.bin`);
    const a = readEkPublic(tpm2b);
    assert.equal(a.form, "tpm2b_public");
    const b = readEkPublic(tpm2b.subarray(2));
    assert.equal(b.form, "tpmt_public");
    if (a.form !== "tpm2b_public") throw new Error("unreachable");
    const key = keyObjectFromTpmPublic(a.public);
    const pem = readEkPublic(enc(key.export({ type: "spki", format: "pem" }) as string));
    const derSpki = readEkPublic(new Uint8Array(key.export({ type: "spki", format: "der" })));
    assert.equal(derSpki.form, "der");
    for (const x of [b, pem, derSpki]) assert.equal(x.binding, a.binding, `${k} ${x.form}`);
    if (k === "rsa") {
      const pkcs1 = readEkPublic(enc(key.export({ type: "pkcs1", format: "pem" }) as string));
      assert.equal(pkcs1.binding, a.binding);
    }
    // The binding is SHA-256 of the canonical SPKI, which for these keys is what OpenSSL exports.
    assert.equal(a.binding, createHash("sha256").update(key.export({ type: "spki", format: "der" })).digest("hex"));
  }
});

test("an id-RSAES-OAEP labelled key binds like its rsaEncryption form", () => {
  const tpm2b = file("ek/public/intel_ptt_rsa_ek.tpm2b_public.bin");
  const a = readEkPublic(tpm2b);
  if (a.form !== "tpm2b_public") throw new Error("unreachable");
  const spki = new Uint8Array(keyObjectFromTpmPublic(a.public).export({ type: "spki", format: "der" }));
  const oaep = relabelRsaAsOaep(spki);
  assert.notDeepEqual(oaep, spki);
  const k = canonicalKey(parseSubjectPublicKeyInfo(oaep));
  assert.deepEqual(k.spki, spki);
  assert.equal(ekBinding(k.spki), a.binding);
});

test("bad EK public inputs are typed errors", () => {
  const isTyped = (e: unknown) => e instanceof CertificateError || e instanceof ParseError;
  assert.throws(() => readEkPublic(new Uint8Array(0)), isTyped);
  assert.throws(() => readEkPublic(enc("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")), (e: unknown) => e instanceof CertificateError && e.code === "not-an-ek-public");
  assert.throws(() => readEkPublic(Uint8Array.of(0x00, 0x01, 0x00)), isTyped);
  const tpm2b = file("ek/public/intel_ptt_ecc_ek.tpm2b_public.bin");
  assert.throws(() => readEkPublic(tpm2b.subarray(0, tpm2b.length - 3)), isTyped);
  // A point not on the curve is refused by the crypto check.
  const broken = new Uint8Array(tpm2b);
  broken[broken.length - 1] = (broken[broken.length - 1] ?? 0) ^ 1;
  assert.throws(() => readEkPublic(broken), (e: unknown) => e instanceof CertificateError && e.code === "invalid-key");
});
