/**
 * EK templates of the TCG EK Credential Profile for TPM 2.0 (low range: L-1, L-2; high range, profile 2.3+:
 * H-1 … H-7), as restated in public code: google/go-tpm tpm2/templates.go and google/go-attestation
 * attest/tpm.go (L-1, L-2; bytes in conformance ek/ek_templates.json), tpm2-software/tpm2-tools
 * tools/tpm2_createek.c and tpm2-software/tpm2-pytss internal/templates.py (H-1 … H-7 parameters and
 * policies), keylime/systemd tests (PolicyA/B/C digests). Each template is a TPMT_PUBLIC whose `unique` is
 * what the profile puts there (zeros of key size in the low range, empty in the high range).
 *
 * Policies (TCG EK Credential Profile §B.6):
 *   PolicyA = PolicySecret(TPM_RH_ENDORSEMENT)                = H(H(0ⁿ ‖ TPM_CC_PolicySecret ‖ 4000000B) ‖ ∅)
 *   PolicyC = PolicyAuthorizeNV(0x01C07F01/02/03 per hash)    (published digests, below)
 *   PolicyB = PolicyOR(PolicyA, PolicyC)                      = H(0ⁿ ‖ TPM_CC_PolicyOR ‖ PolicyA ‖ PolicyC)
 * Low-range templates use PolicyA with userWithAuth clear; high-range ones PolicyB with userWithAuth set.
 */
import { Writer, decodeExact } from "../codec/codec.js";
import { digest, fromHex } from "../crypto/hash.js";
import { EK_NV, TPM_ALG, TPM_ECC, TPM_RH, objectAttributes } from "../tcg/constants.js";
import { TPMT_PUBLIC } from "../tpm/structures.js";

export type EkTemplateId = "L-1" | "L-2" | "H-1" | "H-2" | "H-3" | "H-4" | "H-5" | "H-6" | "H-7";

export interface EkTemplate {
  id: EkTemplateId;
  /** "RSA-2048", "ECC P-384", … */
  key: string;
  /** NV index of the EK certificate for this template. */
  certNvIndex: number;
  public: TPMT_PUBLIC;
  /** Marshalled template (TPMT_PUBLIC). */
  bytes: Uint8Array;
}

const TPM_CC_PolicySecret = 0x00000151;
const TPM_CC_PolicyOR = 0x00000171;

function u32(v: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, v);
  return b;
}

/** PolicyA for a hash algorithm. */
export function policyA(hashAlg: number): Uint8Array {
  const n = digest(hashAlg).length;
  const step = digest(hashAlg, new Uint8Array(n), u32(TPM_CC_PolicySecret), u32(TPM_RH.ENDORSEMENT));
  return digest(hashAlg, step);
}

/** PolicyC = PolicyAuthorizeNV of the EK policy NV index, as published (tpm2-software, keylime, systemd restate it). */
export const POLICY_C: Readonly<Record<number, string>> = {
  [TPM_ALG.SHA256]: "3767e2edd43ff45a3a7e1eaefcef78643dca964632e7aad82c673a30d8633fde",
  [TPM_ALG.SHA384]: "d6032ce61f2fb3c240eb3cf6a33237ef2b6a16f4293c22b455e261cffd217ad5b4947c2d73e63005eed2dc2b3593d165",
  [TPM_ALG.SHA512]:
    "589ee1e146544716e8deafe6db247b01b81e9f9c7dd16b814aa159138749105fba5388dd1dea702f35240c184933121e2c61b8f50d3ef91393a49a38c3f73fc8",
};

/** PolicyB for SHA-256/384/512 (computed); SM3-256's is the published value (fleetd cannot compute SM3). */
export function policyB(hashAlg: number): Uint8Array {
  if (hashAlg === TPM_ALG.SM3_256) return fromHex("167860a35f2c5c3567f9c927ac56c032f3b3a6462f8d037998e7a10f77fa454a");
  const c = POLICY_C[hashAlg];
  if (!c) throw new Error(`no PolicyC for hash 0x${hashAlg.toString(16)}`);
  const n = digest(hashAlg).length;
  return digest(hashAlg, new Uint8Array(n), u32(TPM_CC_PolicyOR), policyA(hashAlg), fromHex(c));
}

const ATTRS_LOW = objectAttributes("fixedTPM", "fixedParent", "sensitiveDataOrigin", "adminWithPolicy", "restricted", "decrypt");
const ATTRS_HIGH = (ATTRS_LOW | objectAttributes("userWithAuth")) >>> 0;

/*
 * Templates are written as the spec tables list them, field by field in marshalled order, and decoded with
 * the one TPMT_PUBLIC declaration (so a template that does not decode cannot exist).
 */
interface Shape {
  nameAlg: number;
  attrs: number;
  policy: Uint8Array;
  /** [algorithm, keyBits] of the symmetric parameters (mode is always CFB). */
  sym: readonly [number, number];
}

function rsaTemplate(s: Shape, keyBits: number, uniqueSize: number): Uint8Array {
  const w = head(TPM_ALG.RSA, s);
  w.u16(TPM_ALG.NULL); // scheme
  w.u16(keyBits).u32(0); // keyBits, exponent 0 = 65537
  w.u16(uniqueSize).bytes(new Uint8Array(uniqueSize));
  return w.finish();
}

function eccTemplate(s: Shape, curveID: number, uniqueSize: number): Uint8Array {
  const w = head(TPM_ALG.ECC, s);
  w.u16(TPM_ALG.NULL); // scheme
  w.u16(curveID).u16(TPM_ALG.NULL); // curveID, kdf
  w.u16(uniqueSize).bytes(new Uint8Array(uniqueSize)); // unique.x
  w.u16(uniqueSize).bytes(new Uint8Array(uniqueSize)); // unique.y
  return w.finish();
}

function head(type: number, s: Shape): Writer {
  const w = new Writer("be");
  w.u16(type).u16(s.nameAlg).u32(s.attrs).u16(s.policy.length).bytes(s.policy);
  w.u16(s.sym[0]).u16(s.sym[1]).u16(TPM_ALG.CFB);
  return w;
}

function template(id: EkTemplateId, key: string, certNvIndex: number, bytes: Uint8Array): EkTemplate {
  return { id, key, certNvIndex, public: decodeExact(TPMT_PUBLIC, bytes), bytes };
}

const A = TPM_ALG;

const low256: Shape = { nameAlg: A.SHA256, attrs: ATTRS_LOW, policy: policyA(A.SHA256), sym: [A.AES, 128] };
const high256: Shape = { nameAlg: A.SHA256, attrs: ATTRS_HIGH, policy: policyB(A.SHA256), sym: [A.AES, 128] };
const high384: Shape = { nameAlg: A.SHA384, attrs: ATTRS_HIGH, policy: policyB(A.SHA384), sym: [A.AES, 256] };
const high512: Shape = { nameAlg: A.SHA512, attrs: ATTRS_HIGH, policy: policyB(A.SHA512), sym: [A.AES, 256] };
const highSm3: Shape = { nameAlg: A.SM3_256, attrs: ATTRS_HIGH, policy: policyB(A.SM3_256), sym: [A.SM4, 128] };

/** All EK templates, low range first. */
export const EK_TEMPLATES: readonly EkTemplate[] = [
  template("L-1", "RSA-2048", EK_NV.RSA2048_CERT, rsaTemplate(low256, 2048, 256)),
  template("L-2", "ECC P-256", EK_NV.ECC_P256_CERT, eccTemplate(low256, TPM_ECC.NIST_P256, 32)),
  template("H-1", "RSA-2048", EK_NV.RSA2048_H_CERT, rsaTemplate(high256, 2048, 0)),
  template("H-2", "ECC P-256", EK_NV.ECC_P256_H_CERT, eccTemplate(high256, TPM_ECC.NIST_P256, 0)),
  template("H-3", "ECC P-384", EK_NV.ECC_P384_H_CERT, eccTemplate(high384, TPM_ECC.NIST_P384, 0)),
  template("H-4", "ECC P-521", EK_NV.ECC_P521_H_CERT, eccTemplate(high512, TPM_ECC.NIST_P521, 0)),
  template("H-5", "ECC SM2 P-256", EK_NV.ECC_SM2_H_CERT, eccTemplate(highSm3, TPM_ECC.SM2_P256, 0)),
  template("H-6", "RSA-3072", EK_NV.RSA3072_H_CERT, rsaTemplate(high384, 3072, 0)),
  template("H-7", "RSA-4096", EK_NV.RSA4096_H_CERT, rsaTemplate(high384, 4096, 0)),
];

export function ekTemplate(id: EkTemplateId): EkTemplate {
  const t = EK_TEMPLATES.find((x) => x.id === id);
  if (!t) throw new Error(`unknown EK template ${id}`);
  return t;
}

/** The template whose certificate lives at `nvIndex` (0x01C00002 → L-1, 0x01C00016 → H-3, …). */
export function ekTemplateForNvIndex(nvIndex: number): EkTemplate | undefined {
  return EK_TEMPLATES.find((t) => t.certNvIndex === nvIndex);
}
