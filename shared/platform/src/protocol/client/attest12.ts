/**
 * The machine's side of the TPM 1.2 variant (talos-config-server/README.md "TPM 1.2 machines"; server: ../server/tpm12.ts):
 * read the EK (TPM_OwnerReadInternalPub) and its NV certificate, make a fresh AIK, send the challenge, activate
 * the server's credential, quote PCRs 0–15 (SHA-1) with externalData bound to the session and claims, send the
 * evidence. Only modes intake and wipe exist here, and the server issues nothing: there is no confirm.
 * Owner and SRK secrets come from the caller (the site's configuration); they never leave this process.
 */
import type { z } from "zod";
import { ParseError } from "@fleetd/verify/codec";
import { activateIdentity, createAik, quote, type Tpm12Secrets, withLoadedAik } from "../../tpm12client/identity.js";
import type { Tpm12Client } from "../../tpm12client/client.js";
import { Tpm12Error } from "../../tpm12client/rc.js";
import { claimsHash, quoteExternalData12 } from "../bindings.js";
import type { Claims, Tpm12ChallengeRequest, Tpm12ChallengeResponse, Tpm12Evidence, Tpm12EvidenceResponse } from "../messages.js";
import { postStep, type RetryUnavailable, type ServerTransport } from "./attest.js";

export const ATTEST12_PATHS = { challenge: "/v1/attest/tpm12/challenge", evidence: "/v1/attest/tpm12/evidence" } as const;
export type Challenge12Wire = z.input<typeof Tpm12ChallengeRequest>;
export type Evidence12Wire = z.input<typeof Tpm12Evidence>;

/** PCRs a TPM 1.2 machine quotes: 0–15 (the profile enforces 0–7 and reads 8–15). */
export const TPM12_QUOTE_PCRS: readonly number[] = Array.from({ length: 16 }, (_, i) => i);

export interface Attest12Input {
  tpm: Tpm12Client;
  secrets: Tpm12Secrets;
  server: ServerTransport;
  claims: Claims;
  eventLog: Uint8Array;
  random: (n: number) => Uint8Array;
  /** As AttestInput.retryUnavailable: a 503 `unavailable` is retried with the same request until the deadline. */
  retryUnavailable?: RetryUnavailable;
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const unb64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));

function call12<T>(server: ServerTransport, step: keyof typeof ATTEST12_PATHS, body: unknown, retry?: RetryUnavailable): Promise<T> {
  return postStep<T>(server, ATTEST12_PATHS[step], `tpm12 ${step}`, body, retry);
}

/** The EK certificate from NV, or none when the index is absent (a TPM 1.2 without a stored certificate). */
export async function readEkCertificate12(tpm: Tpm12Client): Promise<Uint8Array | undefined> {
  try {
    return await tpm.readEkCertificate();
  } catch (e) {
    if (e instanceof Tpm12Error && e.rcName === "TPM_BADINDEX") return undefined;
    if (e instanceof ParseError) return undefined;
    throw e;
  }
}

export async function attest12(input: Attest12Input): Promise<{ mode: Claims["mode"]; issued: "none" }> {
  const { tpm, secrets, server, claims } = input;
  const ekPubkey = (await tpm.ownerReadEk(secrets.ownerAuth)).bytes;
  const certificate = await readEkCertificate12(tpm);
  const aik = await createAik(tpm, secrets, input.random);
  const body: Challenge12Wire = {
    claims,
    ek: { pubkey: b64(ekPubkey), ...(certificate ? { certificate: b64(certificate) } : {}) },
    aik: { pubkey: b64(aik.pubkey), identityBinding: b64(aik.identityBinding) },
  };
  const ch = await call12<Tpm12ChallengeResponse>(server, "challenge", body, input.retryUnavailable);
  const externalData = quoteExternalData12(unb64(ch.nonce), ch.sessionId, claimsHash(claims));
  const { secret, q } = await withLoadedAik(tpm, secrets, aik, async (h) => {
    const secret = await activateIdentity(tpm, secrets, aik, h, unb64(ch.credential.blob));
    return { secret, q: await quote(tpm, aik, h, externalData, TPM12_QUOTE_PCRS) };
  });
  const ev: Evidence12Wire = {
    sessionId: ch.sessionId,
    secret: b64(secret),
    quote: { pcrComposite: b64(q.pcrComposite), signature: b64(q.signature) },
    eventLog: b64(input.eventLog),
  };
  await call12<Tpm12EvidenceResponse>(server, "evidence", ev, input.retryUnavailable);
  return { mode: claims.mode, issued: "none" };
}
