/**
 * Endorsement keys and their certificates (TCG EK Credential Profile 2.x).
 *  - createEk: TPM2_CreatePrimary in the endorsement hierarchy from a profile template (../ek/templates.ts):
 *    "rsa" = L-1, "ecc" = L-2, or any template id (e.g. "H-3", the P-384 EK swtpm_setup certifies). For the low
 *    range, when asked to and the TPM has one, from the template in NV (RSA 0x01C00004 / ECC 0x01C0000C) with
 *    the nonce (0x01C00003 / 0x01C0000B) at the start of the unique field, zero-padded (EK Credential Profile).
 *  - readEkCertificates: the raw contents of every EK certificate index present (low range 0x01C00002,
 *    0x01C0000A; high range 0x01C00012…0x01C0001E). Bytes are returned as stored (some TPMs wrap or pad them);
 *    parsing them is the verifier's job.
 */
import { decodeExact } from "@fleetd/verify/codec";
import { CURVES, EK_NV, isCurve, TPM_RH } from "@fleetd/verify/tcg";
import { TPMT_PUBLIC, type TPMT_PUBLIC as Public } from "@fleetd/verify/tpm";
import type { LoadedObject, TpmClient } from "./client.js";
import { TpmClientError } from "./errors.js";
import { readNvIndex } from "./nv.js";
import { ekTemplate, type EkTemplateId } from "@fleetd/verify/ek";
import type { KeyAlg } from "./templates.js";

export interface CreateEkOptions {
  /** Use the EK template and nonce from NV when the TPM provides them (default false: the default template). */
  nvTemplate?: boolean;
  endorsementAuth?: Uint8Array;
}

export interface EkKey extends LoadedObject {
  /** Where the template came from: the profile's template or the TPM's NV. */
  template: "default" | "nv";
  /** The profile template asked for. */
  templateId: EkTemplateId;
}

/** "rsa"/"ecc" name the low-range templates L-1 and L-2. */
export function ekTemplateId(which: KeyAlg | EkTemplateId): EkTemplateId {
  return which === "rsa" ? "L-1" : which === "ecc" ? "L-2" : which;
}

const NV_TEMPLATE = {
  rsa: { template: EK_NV.RSA2048_TEMPLATE, nonce: EK_NV.RSA2048_NONCE },
  ecc: { template: EK_NV.ECC_P256_TEMPLATE, nonce: EK_NV.ECC_P256_NONCE },
} as const;

/** The EK template the TPM's NV holds for `alg` (with its nonce applied), or undefined when there is none. */
export async function readNvEkTemplate(tpm: TpmClient, alg: KeyAlg): Promise<Public | undefined> {
  const at = NV_TEMPLATE[alg];
  const t = await readNvIndex(tpm, at.template);
  if (!t) return undefined;
  const template = decodeExact(TPMT_PUBLIC, t.data);
  const nonce = (await readNvIndex(tpm, at.nonce))?.data;
  if (!nonce) return template;
  if (template.unique.kind === "rsa" && template.parameters.kind === "rsa") {
    const n = new Uint8Array(template.parameters.keyBits / 8);
    if (nonce.length > n.length) throw new TpmClientError("bad-input", `EK nonce of ${nonce.length} bytes is longer than the RSA unique field`);
    n.set(nonce);
    return { ...template, unique: { kind: "rsa", n } };
  }
  if (template.unique.kind === "ecc" && template.parameters.kind === "ecc") {
    const curve = template.parameters.curveID;
    const size = isCurve(curve) ? CURVES[curve].size : Math.max(template.unique.x.length, 32);
    if (nonce.length > size) throw new TpmClientError("bad-input", `EK nonce of ${nonce.length} bytes is longer than the ECC unique x field`);
    const x = new Uint8Array(size);
    x.set(nonce);
    return { ...template, unique: { kind: "ecc", x, y: new Uint8Array(size) } };
  }
  throw new TpmClientError("bad-input", `EK template at NV 0x${at.template.toString(16)} is neither RSA nor ECC`);
}

/** Creates (recreates: the EK is deterministic) the EK as a transient object. Flush it when done. */
export async function createEk(tpm: TpmClient, which: KeyAlg | EkTemplateId, opts: CreateEkOptions = {}): Promise<EkKey> {
  const templateId = ekTemplateId(which);
  const lowAlg: KeyAlg | undefined = templateId === "L-1" ? "rsa" : templateId === "L-2" ? "ecc" : undefined;
  const fromNv = opts.nvTemplate && lowAlg ? await readNvEkTemplate(tpm, lowAlg) : undefined;
  const ek = await tpm.createPrimary(TPM_RH.ENDORSEMENT, fromNv ?? ekTemplate(templateId).public, opts.endorsementAuth);
  return { ...ek, template: fromNv ? "nv" : "default", templateId };
}

/** EK certificate NV indices, low range first. */
export const EK_CERT_INDICES = [
  EK_NV.RSA2048_CERT,
  EK_NV.ECC_P256_CERT,
  EK_NV.RSA2048_H_CERT,
  EK_NV.ECC_P256_H_CERT,
  EK_NV.ECC_P384_H_CERT,
  EK_NV.ECC_P521_H_CERT,
  EK_NV.ECC_SM2_H_CERT,
  EK_NV.RSA3072_H_CERT,
  EK_NV.RSA4096_H_CERT,
] as const;

/** The raw bytes of one EK certificate index, or undefined when the index is not defined. */
export async function readEkCertificate(tpm: TpmClient, index: number): Promise<Uint8Array | undefined> {
  return (await readNvIndex(tpm, index))?.data;
}

/** Every EK certificate index the TPM has, with its raw contents. */
export async function readEkCertificates(tpm: TpmClient): Promise<{ index: number; bytes: Uint8Array }[]> {
  const out: { index: number; bytes: Uint8Array }[] = [];
  for (const index of EK_CERT_INDICES) {
    const bytes = await readEkCertificate(tpm, index);
    if (bytes) out.push({ index, bytes });
  }
  return out;
}
