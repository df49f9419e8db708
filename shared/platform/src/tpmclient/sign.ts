/** TPM2_Sign of a digest with a loaded unrestricted key (the LDevID signing the confirm). */
import { hashInfo } from "@fleetd/verify/crypto";
import { algName, isHashAlg } from "@fleetd/verify/tcg";
import { keySigningScheme } from "@fleetd/verify/attest";
import type { LoadedObject, TpmClient } from "./client.js";
import { TpmClientError } from "./errors.js";

/**
 * Signs `digest` with the key's own scheme. The digest must have the size of the scheme's hash (a TPM would
 * otherwise refuse with TPM_RC_SIZE; this says why before asking). Returns the TPMT_SIGNATURE, decoded and as bytes.
 */
export async function sign(tpm: TpmClient, key: LoadedObject, digest: Uint8Array): ReturnType<TpmClient["sign"]> {
  const scheme = keySigningScheme(key.public);
  if (!scheme) throw new TpmClientError("bad-input", "the key has no signing scheme of its own (RSASSA, RSAPSS or ECDSA)");
  if (isHashAlg(scheme.hashAlg) && hashInfo(scheme.hashAlg).size !== digest.length) {
    throw new TpmClientError("bad-input", `digest is ${digest.length} bytes; the key signs ${algName(scheme.hashAlg)} digests of ${hashInfo(scheme.hashAlg).size}`);
  }
  return tpm.sign(key.handle, digest);
}
