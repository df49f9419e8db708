/**
 * TPM2_ActivateCredential with the EK (Part 3 §12.5): the AK (activateHandle, ADMIN role: its empty auth value
 * via a password session, as adminWithPolicy is clear) and the EK (keyHandle, USER role: the EK has
 * userWithAuth clear, so a policy session satisfying its authPolicy PolicySecret(TPM_RH_ENDORSEMENT) is
 * needed). The policy session is started fresh for each activation; the TPM flushes it when the command
 * succeeds, and this function flushes it when the command fails. High-range EKs (H-1…H-7) have userWithAuth
 * set: their empty auth value authorizes them with a password session, and no policy session is started.
 */
import { decodeExact } from "@fleetd/verify/codec";
import { TPM_RH, TPMA_OBJECT } from "@fleetd/verify/tcg";
import { TPM_SE, TPM2B_ENCRYPTED_SECRET, TPM2B_ID_OBJECT } from "@fleetd/verify/tpm";
import type { LoadedObject, TpmClient } from "./client.js";
import { passwordAuth, policyAuth } from "./sessions.js";

export interface ActivateOptions {
  endorsementAuth?: Uint8Array;
  akAuth?: Uint8Array;
  /** The EK's own auth value, for high-range EKs (userWithAuth). */
  ekAuth?: Uint8Array;
}

/**
 * Recovers the credential MakeCredential wrapped to `ek` for the Name of `ak`. `idObject` and `encSecret` are
 * the marshalled TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET (with their sizes) as the server sends them.
 */
export async function activateCredential(
  tpm: TpmClient,
  ak: LoadedObject,
  ek: LoadedObject,
  idObject: Uint8Array,
  encSecret: Uint8Array,
  opts: ActivateOptions = {},
): Promise<Uint8Array> {
  const credentialBlob = decodeExact(TPM2B_ID_OBJECT, idObject);
  const secret = decodeExact(TPM2B_ENCRYPTED_SECRET, encSecret);
  if (ek.public.objectAttributes & TPMA_OBJECT.userWithAuth) {
    return tpm.activateCredential(ak.handle, ek.handle, credentialBlob, secret, [passwordAuth(opts.akAuth), passwordAuth(opts.ekAuth)]);
  }
  const session = await tpm.startAuthSession(TPM_SE.POLICY);
  let ok = false;
  try {
    await tpm.policySecret(TPM_RH.ENDORSEMENT, session.handle, opts.endorsementAuth);
    const credential = await tpm.activateCredential(ak.handle, ek.handle, credentialBlob, secret, [
      passwordAuth(opts.akAuth),
      policyAuth(session.handle),
    ]);
    ok = true;
    return credential;
  } finally {
    if (!ok) await tpm.flushContext(session.handle).catch(() => undefined);
  }
}
