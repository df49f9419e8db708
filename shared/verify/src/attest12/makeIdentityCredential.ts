/**
 * The privacy-CA step of TPM 1.2 identity proof (TPM Main Part 3 §15.2, TPM_ActivateIdentity): a
 * TPM_ASYM_CA_CONTENTS { sessionKey, idDigest = SHA-1(the AIK's TPM_PUBKEY) } encrypted to the approved EK with
 * RSAES-OAEP, SHA-1, MGF1-SHA-1 and the label "TCPA" (Part 1 §31.1.1: the TPM's OAEP parameter). Only the TPM
 * holding that EK's private key can decrypt it, and it releases sessionKey only to TPM_ActivateIdentity with a
 * loaded identity key whose TPM_PUBKEY hashes to idDigest: returning sessionKey proves "this AIK lives in the
 * TPM of this EK". sessionKey.data is fleetd's 32-byte secret, compared in constant time by the caller.
 *
 * fleetd is not a privacy CA: it issues no AIK certificate, so there is no TPM_SYM_CA_ATTESTATION (the
 * symmetric blob a CA would send with the certificate encrypted under sessionKey). Nothing is released.
 * Pure function: no I/O; the randomness (secret, OAEP seed) may be given for test vectors.
 */
import type { KeyObject } from "node:crypto";
import { encode } from "../codec/codec.js";
import { oaepEncrypt } from "../crypto/oaep.js";
import { TPM_ALG } from "../tcg/constants.js";
import { idDigest } from "../tpm12/keys.js";
import { TPM_ASYM_CA_CONTENTS, TPM12 } from "../tpm12/structures.js";

/** The OAEP label a TPM 1.2 uses for everything it decrypts with the EK (the four ASCII bytes, no NUL). */
export const TCPA_OAEP_LABEL = new TextEncoder().encode("TCPA");
export const IDENTITY_SECRET_BYTES = 32;

export interface IdentityCredential {
  /** The EK-encrypted TPM_ASYM_CA_CONTENTS, for TPM_ActivateIdentity's blob. */
  blob: Uint8Array;
  /** What TPM_ActivateIdentity returns as symmetricKey.data when the AIK is in that EK's TPM. */
  secret: Uint8Array;
}

export function makeIdentityCredential(
  ek: KeyObject,
  aikPubkeyBytes: Uint8Array,
  rnd: { secret?: Uint8Array; seed?: Uint8Array; random: (n: number) => Uint8Array },
): IdentityCredential {
  const secret = rnd.secret ?? rnd.random(IDENTITY_SECRET_BYTES);
  if (secret.length !== IDENTITY_SECRET_BYTES) throw new RangeError(`the identity secret must be ${IDENTITY_SECRET_BYTES} bytes`);
  const contents = encode(TPM_ASYM_CA_CONTENTS, {
    sessionKey: { algId: TPM12.ALG_AES256, encScheme: TPM12.ES_SYM_CBC_PKCS5PAD, data: secret },
    idDigest: idDigest(aikPubkeyBytes),
  });
  const blob = oaepEncrypt(ek, TPM_ALG.SHA1, TCPA_OAEP_LABEL, contents, rnd.seed ?? rnd.random(20));
  return { blob, secret };
}
