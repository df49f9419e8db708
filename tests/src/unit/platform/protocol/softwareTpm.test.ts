/**
 * The software TPM model (@fleetd/testkit/softwareTpm) the unit refusal matrix drives the server with: it must do
 * what a TPM does where the server can tell — recover a credential only for the EK and Name it was made for, and
 * produce quotes and certifies the verifier accepts exactly when they hold.
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { verifyCertify, verifyQuote } from "@fleetd/verify/attest";
import { makeCredential } from "@fleetd/verify/credential";
import { verifyEkCertificate, readCertificate } from "@fleetd/verify/ek";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { akTemplate, ldevidTemplate } from "@fleetd/platform/tpmclient";
import { SoftwareTpm, softwareKey, softwareManufacturer } from "@fleetd/testkit/softwareTpm";

const maker = softwareManufacturer();
const tpm = new SoftwareTpm({ manufacturer: maker });
const ak = softwareKey(akTemplate("ecc"));

test("ActivateCredential recovers the secret with the EK and Name it was made for (RSA and ECC EKs), and only then", () => {
  for (const ek of [tpm.eks.rsa, tpm.eks.ecc]) {
    const secret = new Uint8Array(randomBytes(32));
    const c = makeCredential(ek.public, ak.name, secret);
    assert.deepEqual(tpm.activateCredential(ek, ak.name, c.idObject, c.encryptedSecret), secret);
    const other = softwareKey(akTemplate("ecc"));
    assert.throws(() => tpm.activateCredential(ek, other.name, c.idObject, c.encryptedSecret), /TPM_RC_INTEGRITY/);
  }
  const toEcc = makeCredential(tpm.eks.ecc.public, ak.name, new Uint8Array(32).fill(7));
  assert.throws(() => tpm.activateCredential(tpm.eks.rsa, ak.name, toEcc.idObject, toEcc.encryptedSecret));
});

test("EK certificates chain to their manufacturer only", () => {
  for (const ek of [tpm.eks.rsa, tpm.eks.ecc]) {
    const cert = readCertificate(ek.certificate as Uint8Array).cert;
    assert.equal(verifyEkCertificate(cert, maker.store(), { at: new Date() }).verdict, "pass");
    assert.equal(verifyEkCertificate(cert, softwareManufacturer(maker.name).store(), { at: new Date() }).verdict, "fail");
  }
});

test("a quote verifies over the PCR values it covers, and not over others", () => {
  tpm.extend(0, new Map([[TPM_ALG.SHA256, new Uint8Array(32).fill(1)]]));
  const selection = [{ hash: TPM_ALG.SHA256, pcrs: [0, 1, 2, 3, 4, 5, 6, 7] }];
  const extra = new Uint8Array(32).fill(9);
  const q = tpm.quote(ak, selection, extra);
  const pcrs = tpm.pcrValues(selection);
  const ok = verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs, expectedExtraData: extra });
  assert.equal(ok.verdict, "pass", JSON.stringify(ok.reasons));
  const changed = new Map([[TPM_ALG.SHA256, new Map(pcrs.get(TPM_ALG.SHA256))]]);
  changed.get(TPM_ALG.SHA256)?.set(0, new Uint8Array(32));
  const bad = verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs: changed, expectedExtraData: extra });
  assert.ok(bad.reasons.some((r) => r.check === "quote.pcrDigest"), JSON.stringify(bad.reasons));
});

test("a certify verifies for the key it names, by the AK that signed it", () => {
  const key = softwareKey(ldevidTemplate("rsa"));
  const extra = new Uint8Array(32).fill(3);
  const c = tpm.certify(ak, key, extra);
  const ok = verifyCertify({ akPublic: ak.public, objectPublic: key.publicBytes, attest: c.attestBytes, signature: c.signatureBytes, expectedExtraData: extra });
  assert.equal(ok.verdict, "pass", JSON.stringify(ok.reasons));
  const other = softwareKey(ldevidTemplate("rsa"));
  const bad = verifyCertify({ akPublic: ak.public, objectPublic: other.publicBytes, attest: c.attestBytes, signature: c.signatureBytes, expectedExtraData: extra });
  assert.ok(bad.reasons.some((r) => r.check === "certify.name"), JSON.stringify(bad.reasons));
});
