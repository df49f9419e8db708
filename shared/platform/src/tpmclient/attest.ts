/**
 * Quotes and certifications by an AK. Both return the exact TPMS_ATTEST and TPMT_SIGNATURE bytes, which the
 * verifier (attest/verifyQuote.ts, attest/verifyCertify.ts) checks as received.
 */
import { type PcrSelection, selectionToBitmaps } from "@fleetd/verify/attest";
import type { LoadedObject, SignedAttestation, TpmClient } from "./client.js";

/** TPM2_Quote over `selection` with `qualifyingData` as extraData, signed with the AK's own scheme. */
export function quote(tpm: TpmClient, ak: LoadedObject, selection: PcrSelection[], qualifyingData: Uint8Array): Promise<SignedAttestation> {
  return tpm.quote(ak.handle, qualifyingData, selectionToBitmaps(selection));
}

/** TPM2_Certify of `object` by the AK, with `qualifyingData` as extraData. */
export function certify(tpm: TpmClient, object: LoadedObject, ak: LoadedObject, qualifyingData: Uint8Array): Promise<SignedAttestation> {
  return tpm.certify(object.handle, ak.handle, qualifyingData);
}
