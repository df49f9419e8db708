/**
 * TPM_MakeIdentity's identityBinding (TPM Main Part 3 §15.1, Part 2 §12.5): the new AIK's signature over
 * TPM_IDENTITY_CONTENTS { 1.1.0.0, TPM_ORD_MakeIdentity, labelPrivCADigest, the AIK's TPM_PUBKEY }. A TPM signs
 * that structure only inside TPM_MakeIdentity (an identity key signs nothing the caller chose: TPM_Sign refuses
 * it), so a valid binding with fleetd's label says the key was made as an AIK. It is a consistency check; the
 * proof that the AIK lives in the approved EK's TPM is TPM_ActivateIdentity. Pure; no I/O.
 */
import { constants, verify } from "node:crypto";
import { encode } from "../codec/codec.js";
import { digest } from "../crypto/hash.js";
import { Checks, type Verdict } from "../attest/verdict.js";
import { TPM_ALG } from "../tcg/constants.js";
import { TPM_ORD } from "../tpm12/commands.js";
import { type Rsa12Key, decodePubkey } from "../tpm12/keys.js";
import { TPM_IDENTITY_CONTENTS, TPM_STRUCT_VER_1_1 } from "../tpm12/structures.js";

/** labelPrivCADigest fleetd's client passes to TPM_MakeIdentity: SHA-1 of this label (no privacy CA is named). */
export const FLEETD_AIK_LABEL = "fleetd/tpm12/aik/v1";
export function fleetdLabelDigest(): Uint8Array {
  return digest(TPM_ALG.SHA1, new TextEncoder().encode(FLEETD_AIK_LABEL));
}

export function identityContents(aikPubkeyBytes: Uint8Array, labelPrivCADigest: Uint8Array = fleetdLabelDigest()): Uint8Array {
  return encode(TPM_IDENTITY_CONTENTS, { ver: TPM_STRUCT_VER_1_1, ordinal: TPM_ORD.MakeIdentity, labelPrivCADigest, identityPubKey: decodePubkey(aikPubkeyBytes) });
}

export function verifyIdentityBinding(aik: Rsa12Key, aikPubkeyBytes: Uint8Array, identityBinding: Uint8Array): Verdict {
  const c = new Checks();
  const ok =
    identityBinding.length === aik.bits / 8 &&
    verify("sha1", identityContents(aikPubkeyBytes), { key: aik.key, padding: constants.RSA_PKCS1_PADDING }, identityBinding);
  c.check(ok, "tpm12.identityBinding", "the AIK's identityBinding does not verify over TPM_IDENTITY_CONTENTS with fleetd's label: the key was not made by TPM_MakeIdentity for fleetd");
  return c.verdict();
}
