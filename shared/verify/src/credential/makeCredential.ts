/**
 * TPM2_MakeCredential done in software (TPM 2.0 Library Part 1 §24.4, Part 3 §12.6): wrap a credential to an
 * EK so that only a TPM holding that EK *and* the object named `objectName` (the AK) can recover it with
 * TPM2_ActivateCredential. Everything uses the EK's own nameAlg and symmetric definition.
 */
import { createCipheriv } from "node:crypto";
import { encode } from "../codec/codec.js";
import { kdfa } from "../crypto/kdf.js";
import { hashInfo, hmac } from "../crypto/hash.js";
import { TPMA_OBJECT, TPM_ALG } from "../tcg/constants.js";
import { TPM2B_DIGEST, TPM2B_ENCRYPTED_SECRET, TPM2B_ID_OBJECT, type TPMT_PUBLIC } from "../tpm/structures.js";
import { EncapsulationError, labeledEncapsulate, type EncapsulationRandomness } from "./labeledEncapsulation.js";

export interface Credential {
  /** Marshalled TPM2B_ID_OBJECT (with its size). */
  idObject: Uint8Array;
  /** Marshalled TPM2B_ENCRYPTED_SECRET (with its size). */
  encryptedSecret: Uint8Array;
}

export function makeCredential(
  ek: TPMT_PUBLIC,
  objectName: Uint8Array,
  credential: Uint8Array,
  rnd: EncapsulationRandomness = {},
): Credential {
  if (ek.nameAlg === TPM_ALG.NULL) throw new EncapsulationError("invalid-key", "EK nameAlg is NULL");
  const { size } = hashInfo(ek.nameAlg);
  const attrs = ek.objectAttributes;
  if (!(attrs & TPMA_OBJECT.restricted) || !(attrs & TPMA_OBJECT.decrypt) || attrs & TPMA_OBJECT.sign) {
    throw new EncapsulationError("invalid-key", "the protecting key must be a restricted decryption key (an EK or storage key)");
  }
  if (credential.length === 0 || credential.length > size) {
    throw new EncapsulationError("invalid-key", `credential must be 1..${size} bytes for nameAlg ${hashInfo(ek.nameAlg).name}`);
  }
  if (objectName.length < 2) throw new EncapsulationError("invalid-key", "object Name is empty");
  const sym = ek.parameters.kind === "rsa" || ek.parameters.kind === "ecc" ? ek.parameters.symmetric : undefined;
  if (!sym || sym.details.kind !== "aes" || sym.details.mode !== TPM_ALG.CFB) {
    throw new EncapsulationError("unsupported-key", "the protecting key's symmetric definition must be AES-CFB");
  }
  const keyBits = sym.details.keyBits;

  const { seed, encryptedSecret } = labeledEncapsulate(ek, "IDENTITY", rnd);
  const symKey = kdfa(ek.nameAlg, seed, "STORAGE", objectName, new Uint8Array(0), keyBits);
  const plain = encode(TPM2B_DIGEST, credential);
  const cipher = createCipheriv(`aes-${keyBits}-cfb`, symKey, Buffer.alloc(16));
  const encIdentity = new Uint8Array(Buffer.concat([cipher.update(plain), cipher.final()]));
  const hmacKey = kdfa(ek.nameAlg, seed, "INTEGRITY", new Uint8Array(0), new Uint8Array(0), size * 8);
  const integrityHMAC = hmac(ek.nameAlg, hmacKey, encIdentity, objectName);
  return {
    idObject: encode(TPM2B_ID_OBJECT, { integrityHMAC, encIdentity }),
    encryptedSecret: encode(TPM2B_ENCRYPTED_SECRET, encryptedSecret),
  };
}

/** The file tpm2-tools' `tpm2_makecredential -o` writes and `tpm2_activatecredential -i` reads. */
export const TPM2_TOOLS_CREDENTIAL_MAGIC = 0xbadcc0de;

export function tpm2ToolsCredentialFile(c: Credential): Uint8Array {
  const header = new Uint8Array(8);
  const v = new DataView(header.buffer);
  v.setUint32(0, TPM2_TOOLS_CREDENTIAL_MAGIC, false);
  v.setUint32(4, 1, false);
  return new Uint8Array(Buffer.concat([header, c.idObject, c.encryptedSecret]));
}
