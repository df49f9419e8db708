/**
 * The node agent's side of renewal with runtime attestation (talos-config-server/README.md "Renewal"; used by
 * `tink-action renew`): ask for a challenge with the current LDevID and LAK certificates, quote with the LAK over
 * the PCRs the server asks for, bound to its nonce, sign the possession digest with the current LDevID (TPM2_Sign:
 * the proof that this TPM holds it), send both with the event log; for a renewal, confirm the new certificates
 * with the same LDevID key. The TPM keys never change: only their certificates do.
 *
 * Every refusal is an AttestationRefused (its `step` is `renew-challenge`, `renew-evidence` or `renew-confirm`):
 * a failed runtime verdict is a 403 from `renew-evidence` whose reasons name the failed checks and events.
 */
import { createHash } from "node:crypto";
import type { z } from "zod";
import type { PcrSelection } from "@fleetd/verify/attest";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { quote } from "../../tpmclient/attest.js";
import type { TpmClient } from "../../tpmclient/client.js";
import type { KeyBlobs } from "../../tpmclient/keys.js";
import { sign } from "../../tpmclient/sign.js";
import type { KeyAlg } from "../../tpmclient/templates.js";
import { withTransients } from "../../tpmclient/transients.js";
import { renewConfirmMessage, renewPossessionMessage, renewQuoteExtraData } from "../bindings.js";
import type { PcrBankSelection, RenewChallengeRequest, RenewChallengeResponse, RenewConfirm, RenewConfirmResponse, RenewEvidence, RenewEvidenceResponse, RenewPurpose } from "../messages.js";
import { loadUnderSrk, postStep, readPcrsWire, type RetryUnavailable, type ServerTransport } from "./attest.js";

export const RENEW_PATHS = { challenge: "/v1/renew/challenge", evidence: "/v1/renew/evidence", confirm: "/v1/renew/confirm" } as const;
export type RenewStep = keyof typeof RENEW_PATHS;

/** The renewal messages as sent (binary fields base64). */
export type RenewChallengeWire = z.input<typeof RenewChallengeRequest>;
export type RenewEvidenceWire = z.input<typeof RenewEvidence>;
export type RenewConfirmWire = z.input<typeof RenewConfirm>;

/** A key the node holds: its current certificate (DER) and its blobs under the SRK (as seeded / last renewed). */
export interface HeldKey {
  certificate: Uint8Array;
  blobs: KeyBlobs;
}

export interface RuntimeAttestInput {
  tpm: TpmClient;
  server: ServerTransport;
  ldevid: HeldKey;
  lak: HeldKey;
  /** The running OS's boot event log (binary_bios_measurements). */
  eventLog: Uint8Array;
  /** `attest`: the verdict only; `renew`: also the next generation's certificates when the server finds renewal due. */
  purpose: RenewPurpose;
  /** Algorithm of the SRK the blobs were created under (the LDevID's); RSA by default. */
  keyAlg?: KeyAlg;
  retryUnavailable?: RetryUnavailable;
  /**
   * purpose renew, renewal due: called with the issued certificates BEFORE the confirm (which makes them current
   * server-side and the held ones stale). The node agent stages the next generation here, durably, so a crash
   * after the confirm still finds it on disk. A throw (or rejection) sends no confirm: the issued certificates
   * stay void and the held ones current.
   */
  beforeConfirm?: (issued: IssuedCertificates) => void | Promise<void>;
}

/** The next generation's certificates (DER) for the same keys, and the CA bundle (PEM). */
export interface IssuedCertificates {
  ldevidCertificate: Uint8Array;
  lakCertificate: Uint8Array;
  caBundle: string;
}

export interface RuntimeAttestResult {
  /** Always "pass": a failed verdict is an AttestationRefused (403, step `renew-evidence`). */
  verdict: "pass";
  /**
   * purpose renew, renewal due: the confirmed next generation's certificates (DER) for the same keys, and the CA
   * bundle (PEM). Absent: nothing was issued (attest, or not due) — keep the current files.
   */
  issued?: IssuedCertificates;
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const unb64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
const sha256 = (b: Uint8Array) => new Uint8Array(createHash("sha256").update(b).digest());

const BANK_ALGS = { sha1: TPM_ALG.SHA1, sha256: TPM_ALG.SHA256, sha384: TPM_ALG.SHA384, sha512: TPM_ALG.SHA512 } as const;

/** The server's PCR selection as the TPM takes it. */
export function selectionFromWire(sel: PcrBankSelection[]): PcrSelection[] {
  return sel.map((s) => ({ hash: BANK_ALGS[s.bank], pcrs: [...s.pcrs].sort((a, b) => a - b) }));
}

/** TPM2_Sign of SHA-256(message) with a key held as blobs under the SRK; the TPMT_SIGNATURE bytes. */
export function signWithHeldKey(tpm: TpmClient, alg: KeyAlg, key: KeyBlobs, message: Uint8Array): Promise<Uint8Array> {
  return withTransients(tpm, async (t) => {
    const loaded = await loadUnderSrk(tpm, t, alg, key);
    return (await sign(tpm, loaded, sha256(message))).signatureBytes;
  });
}

/** The evidence body: a LAK quote over `selection` bound to the session, and the LDevID's possession signature. */
export async function renewEvidenceBody(
  tpm: TpmClient,
  alg: KeyAlg,
  keys: { ldevid: KeyBlobs; lak: KeyBlobs },
  ch: Pick<RenewChallengeResponse, "sessionId" | "nonce" | "pcrSelection">,
  eventLog: Uint8Array,
): Promise<RenewEvidenceWire> {
  const nonce = unb64(ch.nonce);
  const selection = selectionFromWire(ch.pcrSelection);
  const q = await withTransients(tpm, async (t) => {
    const lak = await loadUnderSrk(tpm, t, alg, keys.lak);
    const signed = await quote(tpm, lak, selection, renewQuoteExtraData(nonce, ch.sessionId));
    return { message: b64(signed.attestBytes), signature: b64(signed.signatureBytes), pcrs: await readPcrsWire(tpm, selection) };
  });
  const signature = await signWithHeldKey(tpm, alg, keys.ldevid, renewPossessionMessage(nonce, ch.sessionId, unb64(q.message)));
  return { sessionId: ch.sessionId, quote: q, eventLog: b64(eventLog), signature: b64(signature) };
}

/**
 * One runtime attestation (and, for `renew`, a renewal): challenge → evidence → (confirm). Returns after the
 * confirm when certificates were issued; the caller then swaps its files (the keys' blobs stay as they are). With
 * `beforeConfirm` the caller has them on disk before the server makes them current (no crash window strands it).
 */
export async function runtimeAttest(input: RuntimeAttestInput): Promise<RuntimeAttestResult> {
  const { tpm, server } = input;
  const alg = input.keyAlg ?? "rsa";
  const retry = input.retryUnavailable;
  const challengeBody: RenewChallengeWire = { ldevidCertificate: b64(input.ldevid.certificate), lakCertificate: b64(input.lak.certificate), purpose: input.purpose };
  const ch = await postStep<RenewChallengeResponse>(server, RENEW_PATHS.challenge, "renew-challenge", challengeBody, retry);
  const body = await renewEvidenceBody(tpm, alg, { ldevid: input.ldevid.blobs, lak: input.lak.blobs }, ch, input.eventLog);
  const ev = await postStep<RenewEvidenceResponse>(server, RENEW_PATHS.evidence, "renew-evidence", body, retry);
  if (ev.issued === "none") return { verdict: "pass" };
  const ldevidCertificate = unb64(ev.ldevidCertificate);
  const lakCertificate = unb64(ev.lakCertificate);
  const issued: IssuedCertificates = { ldevidCertificate, lakCertificate, caBundle: ev.caBundle };
  await input.beforeConfirm?.(issued);
  const signature = await signWithHeldKey(tpm, alg, input.ldevid.blobs, renewConfirmMessage(ch.sessionId, ldevidCertificate, lakCertificate));
  await postStep<RenewConfirmResponse>(server, RENEW_PATHS.confirm, "renew-confirm", { sessionId: ch.sessionId, signature: b64(signature) } satisfies RenewConfirmWire, retry);
  return { verdict: "pass", issued };
}
