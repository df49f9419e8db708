import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { decodeExact } from "@fleetd/verify/codec";
import { hex } from "@fleetd/verify/crypto";
import { TPM_ALG, TPMA_OBJECT } from "@fleetd/verify/tcg";
import { objectName, TPM2B_PUBLIC, TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { conformance } from "@fleetd/testkit/conformance";
import { ekBindingFromCertificate, ekBindingFromTpmPublic, readCertificate, ekPublicFromCertificate, ekPublicMatchesCertificate, compareToTemplate, identifyEkTemplate, EK_TEMPLATES, ekTemplate, ekTemplateForNvIndex, policyA, policyB } from "@fleetd/verify/ek";
import { CertificateError } from "@fleetd/verify/x509";

const file = (rel: string) => new Uint8Array(readFileSync(conformance(rel)));
const json = JSON.parse(readFileSync(conformance("ek/ek_templates.json"), "utf8")) as {
  rsa2048_low_range: { tpmt_public_hex: string };
  eccp256_low_range: { tpmt_public_hex: string };
};
const intel = (k: "rsa" | "ecc") => decodeExact(TPM2B_PUBLIC, file(`ek/public/intel_ptt_${k}_ek.tpm2b_public.bin`));

test("low-range templates equal the conformance bytes (go-tpm/go-attestation) and the tpm2-tools fixture", () => {
  assert.equal(hex(ekTemplate("L-1").bytes), json.rsa2048_low_range.tpmt_public_hex);
  assert.equal(ekTemplate("L-1").bytes.length, 314);
  assert.deepEqual(ekTemplate("L-1").bytes, file("ek/public/tpm2-tools_ek-template-default.bin"));
  assert.equal(hex(ekTemplate("L-2").bytes), json.eccp256_low_range.tpmt_public_hex);
  assert.equal(ekTemplate("L-2").bytes.length, 122);
});

test("EK policies: PolicyA computed per hash, PolicyB = PolicyOR(A, C) equals the published digests", () => {
  assert.equal(hex(policyA(TPM_ALG.SHA256)), "837197674484b3f81a90cc8d46a5d724fd52d76e06520b64f2a1da1b331469aa");
  assert.equal(hex(policyA(TPM_ALG.SHA384)), "8bbf2266537c171cb56e403c4dc1d4b64f432611dc386e6f532050c3278c930e143e8bb1133824ccb431053871c6db53");
  assert.equal(
    hex(policyA(TPM_ALG.SHA512)),
    "1e3b76502c8a1425aa0b7b3fc646a1b0fae063b03b5368f9c4cddecaff0891dd682bac1a85d4d832b781ea451915de5fc5bf0dc4a1917cd42fa041e3f998e0ee",
  );
  assert.equal(hex(policyB(TPM_ALG.SHA256)), "ca3d0a99a2b93906f7a3342414efcfb3a385d44cd1fd459089d19b5071c0b7a0");
  assert.equal(hex(policyB(TPM_ALG.SHA384)), "b26e7d28d11a50bc53d882bcf5fd3a1a074148bb35d3b4e4cb1c0ad9bde419cacb47ba09699646150f9fc000f3f80e12");
  assert.equal(
    hex(policyB(TPM_ALG.SHA512)),
    "b8221ca69e8550a4914de3faa6a18c072cc01208073a928d5d66d59ef79e49a429c41a6b269571d57edb25fbdb1838425608b413cd616a5f6db5b6071af99bea",
  );
});

test("high-range templates: userWithAuth set, PolicyB, empty unique, hash and AES size per key; H-3 is the template swtpm 0.7.1 uses", () => {
  for (const t of EK_TEMPLATES.filter((x) => x.id.startsWith("H-"))) {
    assert.equal(t.public.objectAttributes, 0x000300f2, t.id);
    assert.ok(t.public.objectAttributes & TPMA_OBJECT.userWithAuth);
    assert.equal(t.public.unique.kind === "rsa" ? t.public.unique.n.length : t.public.unique.kind === "ecc" ? t.public.unique.x.length + t.public.unique.y.length : -1, 0, t.id);
  }
  const nameAlgs = Object.fromEntries(EK_TEMPLATES.map((t) => [t.id, t.public.nameAlg]));
  assert.deepEqual(nameAlgs, {
    "L-1": TPM_ALG.SHA256,
    "L-2": TPM_ALG.SHA256,
    "H-1": TPM_ALG.SHA256,
    "H-2": TPM_ALG.SHA256,
    "H-3": TPM_ALG.SHA384,
    "H-4": TPM_ALG.SHA512,
    "H-5": TPM_ALG.SM3_256,
    "H-6": TPM_ALG.SHA384,
    "H-7": TPM_ALG.SHA384,
  });
  // Observed on swtpm 0.7.1 (swtpm_setup --create-ek-cert): its ECC EK public area at 0x81010016 with unique emptied.
  assert.equal(
    hex(ekTemplate("H-3").bytes),
    "0023000c000300f20030b26e7d28d11a50bc53d882bcf5fd3a1a074148bb35d3b4e4cb1c0ad9bde419cacb47ba09699646150f9fc000f3f80e12" +
      "000601000043001000040010" +
      "00000000",
  );
  assert.equal(ekTemplateForNvIndex(0x01c00002)?.id, "L-1");
  assert.equal(ekTemplateForNvIndex(0x01c0000a)?.id, "L-2");
  assert.equal(ekTemplateForNvIndex(0x01c00016)?.id, "H-3");
  assert.equal(ekTemplateForNvIndex(0x01c0001e)?.id, "H-7");
});

test("Intel PTT EK public areas follow L-1 and L-2; a changed field is named", () => {
  const rsa = intel("rsa");
  const ecc = intel("ecc");
  const r = identifyEkTemplate(rsa);
  assert.ok(r.ok);
  assert.equal(r.template.id, "L-1");
  const e = identifyEkTemplate(ecc);
  assert.ok(e.ok);
  assert.equal(e.template.id, "L-2");

  const withUserAuth = { ...rsa, objectAttributes: (rsa.objectAttributes | TPMA_OBJECT.userWithAuth) >>> 0 };
  const c1 = compareToTemplate(withUserAuth, ekTemplate("L-1"));
  assert.equal(c1.ok, false);
  if (!c1.ok) {
    assert.equal(c1.field, "objectAttributes");
    assert.match(c1.detail, /template L-1 has 0x000300b2 .*the EK has 0x000300f2/);
  }
  // With userWithAuth set but the low-range policy it is neither L-1 nor H-1; the closest is named.
  const c2 = identifyEkTemplate(withUserAuth);
  assert.equal(c2.ok, false);
  if (!c2.ok) assert.ok(["objectAttributes", "authPolicy"].includes(c2.field), c2.detail);

  const sha384 = { ...rsa, nameAlg: TPM_ALG.SHA384 as typeof rsa.nameAlg };
  const c3 = compareToTemplate(sha384, ekTemplate("L-1"));
  assert.ok(!c3.ok && c3.field === "nameAlg" && /SHA384/.test(c3.detail), JSON.stringify(c3));

  if (ecc.parameters.kind === "ecc") {
    const p = ecc.parameters;
    const aes256 = { ...ecc, parameters: { ...p, symmetric: { ...p.symmetric, details: { ...p.symmetric.details, keyBits: 256 } } } } as typeof ecc;
    const c4 = compareToTemplate(aes256, ekTemplate("L-2"));
    assert.ok(!c4.ok && c4.field === "parameters.symmetric.details.keyBits", JSON.stringify(c4));
  }
});

test("an EK public area rebuilt from a certificate: same key, same binding, a Name, and it matches the template", () => {
  for (const [f, id] of [
    ["ek/certs/stm_st33htph_rsa_ek.der", "L-1"],
    ["ek/certs/stm_st33htph_ecc_ek.der", "L-2"],
    ["ek/certs/gce_uca_tpm_rsa_enc_cert.pem", "L-1"],
    ["ek/certs/gce_uca_tpm_ecc_enc_cert.pem", "L-2"],
  ] as const) {
    const { cert } = readCertificate(file(f));
    const built = ekPublicFromCertificate(cert);
    assert.equal(built.template.id, id, f);
    assert.deepEqual(decodeExact(TPMT_PUBLIC, built.bytes), built.public);
    assert.deepEqual(built.name, objectName(built.bytes));
    assert.equal(built.name.length, 34);
    assert.equal(ekBindingFromTpmPublic(built.public), ekBindingFromCertificate(cert), f);
    assert.ok(compareToTemplate(built.public, built.template).ok);
    assert.ok(ekPublicMatchesCertificate(built.public, cert).ok);
  }
  const { cert: stmRsa } = readCertificate(file("ek/certs/stm_st33htph_rsa_ek.der"));
  // The same key under the high-range template has another Name.
  assert.notDeepEqual(ekPublicFromCertificate(stmRsa, "H-1").name, ekPublicFromCertificate(stmRsa, "L-1").name);
  // Another TPM's EK does not match this certificate.
  const m = ekPublicMatchesCertificate(intel("rsa"), stmRsa);
  assert.equal(m.ok, false);
  if (!m.ok) assert.match(m.detail, /is not the certificate's RSA-2048 key/);
  // A key that does not fit the template is refused.
  const { cert: stmEcc } = readCertificate(file("ek/certs/stm_st33htph_ecc_ek.der"));
  assert.throws(() => ekPublicFromCertificate(stmEcc, "L-1"), (e: unknown) => e instanceof CertificateError && e.code === "unsupported-key");
  assert.throws(() => ekPublicFromCertificate(stmEcc, "H-3"), (e: unknown) => e instanceof CertificateError && /P-256.*H-3/.test(e.message));
});
