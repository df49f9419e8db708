/**
 * Certify and key-attribute logic on structures built here and signed with node:crypto (the differential
 * suite in tests/ checks the same functions on tpm2_certify output from a real software TPM).
 */
import { strict as assert } from "node:assert";
import { generateKeyPairSync, sign } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { decodeExact, encode } from "@fleetd/verify/codec";
import { conformance } from "@fleetd/testkit/conformance";
import { objectAttributes, TPM_ALG, TPM_GENERATED_VALUE, TPM_ST } from "@fleetd/verify/tcg";
import { objectName, TPMS_ATTEST, TPMT_PUBLIC, TPMT_SIGNATURE } from "@fleetd/verify/tpm";
import { AK_POLICY, checkKeyAttributes, LDEVID_POLICY, Checks, verifyCertify } from "@fleetd/verify/attest";
import { tpmPublicFromKey } from "@fleetd/testkit/tpmPublic";

function eccKey(attrs: number) {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const pub = tpmPublicFromKey(publicKey, attrs);
  return { pub, bytes: encode(TPMT_PUBLIC, pub), privateKey };
}

const AK_ATTRS = objectAttributes("fixedTPM", "fixedParent", "sensitiveDataOrigin", "userWithAuth", "restricted", "sign");
const LDEVID_ATTRS = objectAttributes("fixedTPM", "fixedParent", "sensitiveDataOrigin", "userWithAuth", "sign");

function certifyBy(ak: ReturnType<typeof eccKey>, objBytes: Uint8Array, extraData: Uint8Array, type: number = TPM_ST.ATTEST_CERTIFY) {
  const attested =
    type === TPM_ST.ATTEST_CERTIFY
      ? { kind: "certify" as const, name: objectName(objBytes), qualifiedName: objectName(objBytes) }
      : { kind: "creation" as const, objectName: objectName(objBytes), creationHash: new Uint8Array(32) };
  const attest = encode(TPMS_ATTEST, {
    magic: TPM_GENERATED_VALUE,
    type,
    qualifiedSigner: objectName(ak.bytes),
    extraData,
    clockInfo: { clock: 1n, resetCount: 0, restartCount: 0, safe: 1 },
    firmwareVersion: 0n,
    attested,
  });
  const rs = sign("sha256", attest, { key: ak.privateKey, dsaEncoding: "ieee-p1363" });
  const signature = encode(TPMT_SIGNATURE, {
    sigAlg: TPM_ALG.ECDSA,
    signature: { kind: "ecdsa", hash: TPM_ALG.SHA256, signatureR: new Uint8Array(rs.subarray(0, 32)), signatureS: new Uint8Array(rs.subarray(32)) },
  });
  return { attest, signature };
}

test("certify: passes with the right object and qualifying data; each mismatch is refused by name", () => {
  const ak = eccKey(AK_ATTRS);
  const other = eccKey(AK_ATTRS);
  const ldevid = eccKey(LDEVID_ATTRS);
  const wrongObj = eccKey(LDEVID_ATTRS);
  const qd = new Uint8Array(32).fill(7);
  const { attest, signature } = certifyBy(ak, ldevid.bytes, qd);
  const input = { akPublic: ak.pub, objectPublic: ldevid.bytes, attest, signature, expectedExtraData: qd };
  assert.equal(verifyCertify(input).verdict, "pass");
  const checks = (r: { reasons: { check: string }[] }) => r.reasons.map((x) => x.check);
  assert.deepEqual(checks(verifyCertify({ ...input, objectPublic: wrongObj.bytes })), ["certify.name"]);
  assert.deepEqual(checks(verifyCertify({ ...input, akPublic: other.pub })), ["certify.signature.signature"]);
  assert.deepEqual(checks(verifyCertify({ ...input, expectedExtraData: new Uint8Array(32).fill(8) })), ["certify.extraData"]);
  const creation = certifyBy(ak, ldevid.bytes, qd, TPM_ST.ATTEST_CREATION);
  assert.deepEqual(checks(verifyCertify({ ...input, ...creation })), ["certify.type"]);
});

test("key attributes: the Windows AK is a proper AK; an LDevID is not an AK and vice versa", () => {
  const win = JSON.parse(readFileSync(conformance("quotes/go-attestation_windows_gcp_shielded_vm.json"), "utf8")) as { AK: { Public: string } };
  const winAk = decodeExact(TPMT_PUBLIC, new Uint8Array(Buffer.from(win.AK.Public, "base64")));
  const c1 = new Checks();
  assert.ok(checkKeyAttributes(c1, "ak", winAk, AK_POLICY), JSON.stringify(c1.reasons));
  const c2 = new Checks();
  assert.equal(checkKeyAttributes(c2, "ak", eccKey(LDEVID_ATTRS).pub, AK_POLICY), false);
  assert.deepEqual(c2.reasons.map((r) => r.check), ["ak.attributes.restricted"]);
  const c3 = new Checks();
  assert.equal(checkKeyAttributes(c3, "ldevid", eccKey(AK_ATTRS).pub, LDEVID_POLICY), false);
  assert.deepEqual(c3.reasons.map((r) => r.check), ["ldevid.attributes.restricted"]);
  const c4 = new Checks();
  const decryptToo = eccKey(AK_ATTRS | objectAttributes("decrypt")).pub;
  checkKeyAttributes(c4, "ak", { ...decryptToo, nameAlg: TPM_ALG.SHA1 }, AK_POLICY);
  assert.deepEqual(c4.reasons.map((r) => r.check).sort(), ["ak.attributes.decrypt", "ak.nameAlg"]);
});
