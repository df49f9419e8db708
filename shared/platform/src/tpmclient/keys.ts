/**
 * The storage root key and the keys fleetd creates under it. Ordinary keys come back as blobs — the
 * TPM2B_PRIVATE payload and the exact TPMT_PUBLIC bytes, both **without** their TPM2B size prefix, as SPIRE's
 * tpm_devid reads `devid_priv_path`/`devid_pub_path` — and are loaded again whenever a step needs them, so
 * nothing depends on a transient handle surviving between protocol steps (`/dev/tpmrm0` flushes on close).
 */
import { decodeExact } from "@fleetd/verify/codec";
import { TPM_RH } from "@fleetd/verify/tcg";
import { TPMT_PUBLIC } from "@fleetd/verify/tpm";
import type { LoadedObject, PublicArea, TpmClient } from "./client.js";
import { akTemplate, type KeyAlg, lakTemplate, ldevidTemplate, srkTemplate } from "./templates.js";

/** A key as stored between steps. */
export interface KeyBlobs extends PublicArea {
  /** TPM2B_PRIVATE payload (no size prefix). */
  private: Uint8Array;
}

/** The SRK from SPIRE's high-range template for `alg`, in the owner hierarchy (transient; deterministic). */
export function createSrk(tpm: TpmClient, alg: KeyAlg = "rsa", ownerAuth?: Uint8Array): Promise<LoadedObject> {
  return tpm.createPrimary(TPM_RH.OWNER, srkTemplate(alg), ownerAuth);
}

async function createUnder(tpm: TpmClient, parent: LoadedObject, template: Parameters<TpmClient["create"]>[1]): Promise<KeyBlobs> {
  const c = await tpm.create(parent.handle, template);
  return { private: c.private, public: c.public, publicBytes: c.publicBytes, name: c.name };
}

/** A fresh AK (restricted signing) under the SRK. */
export function createAk(tpm: TpmClient, srk: LoadedObject, alg: KeyAlg = "rsa"): Promise<KeyBlobs> {
  return createUnder(tpm, srk, akTemplate(alg));
}

/** An LDevID (unrestricted sign-only, SPIRE tpm_devid) under the SRK. */
export function createLdevid(tpm: TpmClient, srk: LoadedObject, alg: KeyAlg = "rsa"): Promise<KeyBlobs> {
  return createUnder(tpm, srk, ldevidTemplate(alg));
}

/** An LAK (restricted signing, long-lived) under the SRK. */
export function createLak(tpm: TpmClient, srk: LoadedObject, alg: KeyAlg = "rsa"): Promise<KeyBlobs> {
  return createUnder(tpm, srk, lakTemplate(alg));
}

/** Loads stored blobs under `parent`. The public bytes are sent exactly as stored (decoded first to refuse garbage). */
export function load(tpm: TpmClient, parent: LoadedObject, blobs: { private: Uint8Array; publicBytes: Uint8Array }): Promise<LoadedObject> {
  const value = decodeExact(TPMT_PUBLIC, blobs.publicBytes);
  return tpm.load(parent.handle, blobs.private, { value, bytes: blobs.publicBytes });
}
