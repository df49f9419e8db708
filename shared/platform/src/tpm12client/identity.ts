/**
 * The machine's side of the TPM 1.2 identity proof (design: talos-config-server/README.md, "TPM 1.2 machines"):
 *  1. `createAik`: TPM_MakeIdentity (owner OSAP + ADIP, SRK OIAP) with fleetd's label; the AIK's usage auth is
 *     random, lives in memory only, and dies with the session;
 *  2. `withLoadedAik`: TPM_LoadKey2 under the SRK, run the steps, TPM_FlushSpecific the AIK — also on failure;
 *  3. `activateIdentity`: TPM_ActivateIdentity on the server's blob; returns the recovered secret;
 *  4. `quote`: TPM_Quote over SHA-1 PCRs with the server's 20-byte externalData.
 * Owner and SRK secrets come from the caller (tink-action: the site's configuration); they are never logged.
 */
import type { Captured } from "@fleetd/verify/codec";
import { aikTemplate, checkIdentityKey, pubkeyOfKey, TPM12, type TPM_KEY } from "@fleetd/verify/tpm12";
import { fleetdLabelDigest } from "@fleetd/verify/attest12";
import type { AuthData, Tpm12Client } from "./client.js";

export interface Tpm12Secrets {
  ownerAuth: AuthData;
  srkAuth: AuthData;
}

export interface Aik12 {
  /** The AIK blob (TPM_KEY, wrapped by the SRK) as the TPM returned it. */
  blob: Captured<TPM_KEY>;
  /** Marshalled TPM_PUBKEY of the AIK: what the server's idDigest covers and what it verifies quotes with. */
  pubkey: Uint8Array;
  identityBinding: Uint8Array;
  /** The AIK's usage secret (random, in memory only). */
  usageAuth: AuthData;
}

export async function createAik(c: Tpm12Client, secrets: Tpm12Secrets, random: (n: number) => Uint8Array): Promise<Aik12> {
  const usageAuth = random(20);
  const r = await c.makeIdentity({ ownerAuth: secrets.ownerAuth, srkAuth: secrets.srkAuth, identityAuth: usageAuth, labelPrivCADigest: fleetdLabelDigest(), template: aikTemplate() });
  checkIdentityKey(r.idKey.value);
  return { blob: r.idKey, pubkey: pubkeyOfKey(r.idKey.value), identityBinding: r.identityBinding, usageAuth };
}

export async function withLoadedAik<T>(c: Tpm12Client, secrets: Tpm12Secrets, aik: Aik12, fn: (handle: number) => Promise<T>): Promise<T> {
  const handle = await c.loadKey2(TPM12.KH_SRK, secrets.srkAuth, aik.blob);
  try {
    return await fn(handle);
  } finally {
    try {
      await c.flushSpecific(handle, TPM12.RT_KEY);
    } catch {
      // the TPM may already have evicted it; nothing else holds it
    }
  }
}

export async function activateIdentity(c: Tpm12Client, secrets: Tpm12Secrets, aik: Aik12, handle: number, blob: Uint8Array): Promise<Uint8Array> {
  return (await c.activateIdentity(handle, aik.usageAuth, secrets.ownerAuth, blob)).data;
}

export async function quote(c: Tpm12Client, aik: Aik12, handle: number, externalData: Uint8Array, pcrs: readonly number[]): Promise<{ pcrComposite: Uint8Array; signature: Uint8Array }> {
  return c.quote(handle, aik.usageAuth, externalData, pcrs);
}
