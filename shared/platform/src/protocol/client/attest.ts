/**
 * The machine's side of the attestation protocol (used by tink-action; renewal later): gather EKs, create a
 * fresh AK, answer the challenge by credential activation, quote bound to the session and claims, certify a new
 * LDevID and LAK with the AK, send the evidence, confirm with the LDevID, and unwrap the install code.
 *
 * Each step is an exported function (`attest` composes them in order); tests build misbehaving machines from the
 * same steps. A TPM may hold only three loaded objects (swtpm does), so each step loads what it needs and
 * flushes it.
 */
import { createHash } from "node:crypto";
import type { z } from "zod";
import { type PcrSelection, bankName } from "@fleetd/verify/attest";
import { encode, ParseError } from "@fleetd/verify/codec";
import { hex } from "@fleetd/verify/crypto";
import { ekBindingFromTpmPublic, ekTemplateForNvIndex, type EkTemplateId } from "@fleetd/verify/ek";
import { parseEventLog } from "@fleetd/verify/eventlog";
import { isHashAlg, TPM_ALG } from "@fleetd/verify/tcg";
import { TPM2B_PUBLIC } from "@fleetd/verify/tpm";
import { activateCredential } from "../../tpmclient/activate.js";
import { certify, quote } from "../../tpmclient/attest.js";
import type { LoadedObject, TpmClient } from "../../tpmclient/client.js";
import { createEk, readEkCertificates } from "../../tpmclient/ek.js";
import { createAk, createLak, createLdevid, createSrk, load, type KeyBlobs } from "../../tpmclient/keys.js";
import { pcrRead } from "../../tpmclient/pcr.js";
import { sign } from "../../tpmclient/sign.js";
import type { KeyAlg } from "../../tpmclient/templates.js";
import { withTransients, type Transients } from "../../tpmclient/transients.js";
import { certifyExtraData, claimsHash, confirmMessage, quoteExtraData } from "../bindings.js";
import type { ChallengeRequest, ChallengeResponse, Claims, Confirm, ConfirmResponse, Evidence, EvidenceResponse, Refusal } from "../messages.js";

export interface ServerTransport {
  post(path: string, body: unknown): Promise<{ status: number; body: unknown }>;
}

export const ATTEST_PATHS = { challenge: "/v1/attest/challenge", evidence: "/v1/attest/evidence", confirm: "/v1/attest/confirm" } as const;
export type AttestStep = keyof typeof ATTEST_PATHS;

/** The messages as sent (binary fields base64): the input side of the server's schemas. */
export type ChallengeWire = z.input<typeof ChallengeRequest>;
export type EvidenceWire = z.input<typeof Evidence>;
export type ConfirmWire = z.input<typeof Confirm>;
export type PcrWire = EvidenceWire["quote"]["pcrs"][number];
export type CertifiedKeyWire = EvidenceWire["ldevid"];

export class AttestationRefused extends Error {
  override readonly name = "AttestationRefused";
  constructor(
    readonly step: string,
    readonly status: number,
    readonly refusal: Refusal,
  ) {
    // (a transport that does not check answers may hand over any body: no reasons is still a refusal)
    super(`${step} refused (${status} ${refusal.error}): ${(refusal.reasons ?? []).map((r) => `${r.check}: ${r.detail}`).join("; ")}`);
  }
  get pending(): boolean {
    return this.refusal.error === "pending";
  }
}

export interface AttestInput {
  tpm: TpmClient;
  server: ServerTransport;
  claims: Claims;
  eventLog: Uint8Array;
  /** Algorithm of the SRK, AK, LDevID and LAK. RSA-2048 by default (SPIRE tpm_devid needs the RSA EK anyway). */
  keyAlg?: KeyAlg;
  /** PCRs to quote; default PCRs 0–15 of every bank the event log carries (`quoteSelectionFor`). */
  pcrs?: PcrSelection[];
  /**
   * Retry a step the server answered 503 `unavailable` (a dependency outage: nothing was spent), or that did not
   * reach the server or lost its answer (a restart), with the same request, until `deadline` (ms since the
   * epoch). Without it, a 503 is an AttestationRefused at once and a transport failure is thrown.
   */
  retryUnavailable?: RetryUnavailable;
}

export interface RetryUnavailable {
  deadline: number;
  /** The wait before retry `attempt` (1, 2, …). */
  delayMs: (attempt: number) => number;
  sleep?: (ms: number) => Promise<void>;
  /** Told before each wait (for logs). */
  onRetry?: (step: string, refusal: Refusal, attempt: number, waitMs: number) => void;
}

export interface AttestResult {
  mode: Claims["mode"];
  /** The certified keys; absent when the server issued nothing (wipe, a device being retired, an attest not due). */
  issued?: {
    ldevid: { certificate: Uint8Array; blobs: KeyBlobs };
    lak: { certificate: Uint8Array; blobs: KeyBlobs };
    caBundle: string;
  };
  /** provision: the Talos install code (lowercase hex of the 32 unwrapped bytes). */
  installCode?: string;
}

/** An EK as the machine presents it: the profile template it was created from, its binding and public area. */
export interface PresentedEk {
  templateId: EkTemplateId;
  binding: string;
  publicBytes: Uint8Array;
  certificate?: Uint8Array;
}

/** A key created and certified by the AK in this session: its blobs and the evidence fields. */
export interface CertifiedKey {
  blobs: KeyBlobs;
  wire: CertifiedKeyWire;
}

/** SHA-256 PCRs 0–15: what `attest` quotes unless told otherwise. */
export const DEFAULT_QUOTE_SELECTION: PcrSelection[] = [{ hash: TPM_ALG.SHA256, pcrs: Array.from({ length: 16 }, (_, i) => i) }];

/**
 * What `attest` quotes: PCRs 0–15 of every bank the event log carries (SHA-256 when the log names none we can
 * hash, or does not parse). The server requires the log's banks and the quoted banks to agree (issue 10), so a
 * machine whose firmware logs SHA-384 quotes SHA-384 too.
 */
export function quoteSelectionFor(eventLog: Uint8Array): PcrSelection[] {
  let banks: number[] = [];
  try {
    banks = parseEventLog(eventLog).banks.filter((b) => b.computable && isHashAlg(b.alg)).map((b) => b.alg);
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
  }
  if (banks.length === 0) return DEFAULT_QUOTE_SELECTION;
  return [...new Set(banks)].sort((a, b) => a - b).map((hash) => ({ hash, pcrs: Array.from({ length: 16 }, (_, i) => i) }));
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const unb64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));

/** TPM2B_PUBLIC (size-prefixed) from TPMT_PUBLIC bytes. */
export function tpm2b(publicBytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(publicBytes.length + 2);
  out[0] = publicBytes.length >> 8;
  out[1] = publicBytes.length & 0xff;
  out.set(publicBytes, 2);
  return out;
}

/** POSTs one protocol step; a non-200 answer is an AttestationRefused carrying the server's reasons. */
export function call<T>(server: ServerTransport, step: AttestStep, body: unknown, retry?: RetryUnavailable): Promise<T> {
  return postStep<T>(server, ATTEST_PATHS[step], step, body, retry);
}

/**
 * POSTs one step to `path` (the TPM 2.0 or TPM 1.2 protocol); a non-200 answer is an AttestationRefused named
 * `step`. With `retry`, a 503 `unavailable` is sent again, the same request, until the deadline.
 */
export async function postStep<T>(server: ServerTransport, path: string, step: string, body: unknown, retry?: RetryUnavailable): Promise<T> {
  const sleep = retry?.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  for (let attempt = 1; ; attempt++) {
    const wait = retry?.delayMs(attempt) ?? 0;
    let res: Awaited<ReturnType<ServerTransport["post"]>>;
    try {
      res = await server.post(path, body);
    } catch (e) {
      // The request did not reach the server, or its answer was lost (a restart, a dropped connection): the
      // same request again — a step the server had completed answers it again, unchanged (server/step.ts).
      if (!retry || !retryableTransportFailure(e) || Date.now() + wait >= retry.deadline) throw e;
      retry.onRetry?.(step, { error: "unavailable", reasons: [{ check: "transport", detail: (e as Error).message }] }, attempt, wait);
      await sleep(wait);
      continue;
    }
    if (res.status === 200) return res.body as T;
    const refusal = res.body as Refusal;
    if (!retry || res.status !== 503 || refusal.error !== "unavailable" || Date.now() + wait >= retry.deadline) throw new AttestationRefused(step, res.status, refusal);
    retry.onRetry?.(step, refusal, attempt, wait);
    await sleep(wait);
  }
}

/**
 * A transport failure worth sending the same request again for: the transport says so (`retryable`: it could
 * not connect, or timed out), or fetch() failed below HTTP (a refused or reset connection). Not a TLS refusal
 * or a malformed answer: those do not heal by waiting.
 */
export function retryableTransportFailure(e: unknown): boolean {
  if (typeof e !== "object" || e === null) return false;
  if ((e as { retryable?: unknown }).retryable === true) return true;
  if (e instanceof TypeError && e.message === "fetch failed") return true;
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && CONNECTION_FAILURES.has(code);
}

/** Node's errors for a connection that was refused, reset or cut (not a TLS refusal). */
const CONNECTION_FAILURES = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ECONNABORTED", "ETIMEDOUT"]);

/** One EK from a profile template (recreated, read, flushed). */
export async function presentEk(tpm: TpmClient, templateId: EkTemplateId, certificate?: Uint8Array): Promise<PresentedEk> {
  const ek = await createEk(tpm, templateId);
  try {
    return { templateId, binding: ekBindingFromTpmPublic(ek.public), publicBytes: ek.publicBytes, ...(certificate ? { certificate } : {}) };
  } finally {
    await tpm.flushContext(ek.handle);
  }
}

/** Every EK the TPM can show: one per EK certificate in NV (its template from the index), else the RSA default. */
export async function gatherEks(tpm: TpmClient): Promise<PresentedEk[]> {
  const certs = await readEkCertificates(tpm);
  const wanted: { templateId: EkTemplateId; certificate?: Uint8Array }[] = [];
  for (const c of certs) {
    const t = ekTemplateForNvIndex(c.index);
    if (t) wanted.push({ templateId: t.id, certificate: c.bytes });
  }
  if (wanted.length === 0) wanted.push({ templateId: "L-1" });
  const out: PresentedEk[] = [];
  for (const w of wanted) out.push(await presentEk(tpm, w.templateId, w.certificate));
  return out;
}

/** A fresh AK under the SRK, as blobs (reloaded by every later step that needs it). */
export function createFreshAk(tpm: TpmClient, alg: KeyAlg): Promise<KeyBlobs> {
  return withTransients(tpm, async (t) => createAk(tpm, t.keep(await createSrk(tpm, alg)), alg));
}

/** Step 1's body: the claims, every presented EK (TPM2B_PUBLIC + certificate), the AK's TPM2B_PUBLIC. */
export function challengeBody(claims: Claims, eks: PresentedEk[], ak: KeyBlobs): ChallengeWire {
  return {
    claims,
    eks: eks.map((e) => ({ public: b64(tpm2b(e.publicBytes)), ...(e.certificate ? { certificate: b64(e.certificate) } : {}) })),
    akPublic: b64(tpm2b(ak.publicBytes)),
  };
}

/** Loads blobs under a fresh SRK (flushed right away; the key stays in `t`). */
export async function loadUnderSrk(tpm: TpmClient, t: Transients, alg: KeyAlg, blobs: KeyBlobs): Promise<LoadedObject> {
  const srk = t.keep(await createSrk(tpm, alg));
  const key = t.keep(await load(tpm, srk, blobs));
  await t.flush(srk.handle);
  return key;
}

/** ActivateCredential for each credential of the challenge, with the EK it names (base64 secrets, in order). */
export async function activateCredentials(tpm: TpmClient, t: Transients, ak: LoadedObject, eks: PresentedEk[], credentials: ChallengeResponse["credentials"]): Promise<string[]> {
  const secrets: string[] = [];
  for (const cred of credentials) {
    const e = eks.find((x) => x.binding === cred.ekBinding);
    if (!e) throw new Error(`the server asked for EK ${cred.ekBinding}, which this TPM did not present`);
    const ek = t.keep(await createEk(tpm, e.templateId));
    secrets.push(b64(await activateCredential(tpm, ak, ek, unb64(cred.idObject), unb64(cred.encryptedSecret))));
    await t.flush(ek.handle);
  }
  return secrets;
}

/** TPM2_Quote over `selection` with `extraData`, and the values of exactly those PCRs. */
export async function quoteWithPcrs(tpm: TpmClient, ak: LoadedObject, selection: PcrSelection[], extraData: Uint8Array): Promise<EvidenceWire["quote"]> {
  const q = await quote(tpm, ak, selection, extraData);
  return { message: b64(q.attestBytes), signature: b64(q.signatureBytes), pcrs: await readPcrsWire(tpm, selection) };
}

/** PCR values as the evidence carries them. */
export async function readPcrsWire(tpm: TpmClient, selection: PcrSelection[]): Promise<PcrWire[]> {
  const values = (await pcrRead(tpm, selection)).values;
  const pcrs: PcrWire[] = [];
  for (const s of selection) {
    for (const p of s.pcrs) pcrs.push({ bank: bankName(s.hash) as PcrWire["bank"], pcr: p, value: hex(values.get(s.hash)?.get(p) ?? new Uint8Array()) });
  }
  return pcrs;
}

/** Creates a key under the SRK (the LDevID or LAK template unless `create` says otherwise) and certifies it with the AK. */
export async function certifiedKey(
  tpm: TpmClient,
  t: Transients,
  alg: KeyAlg,
  ak: LoadedObject,
  kind: "ldevid" | "lak",
  extraData: Uint8Array,
  create: (tpm: TpmClient, srk: LoadedObject, alg: KeyAlg) => Promise<KeyBlobs> = kind === "ldevid" ? createLdevid : createLak,
): Promise<CertifiedKey> {
  const parent = t.keep(await createSrk(tpm, alg));
  const blobs = await create(tpm, parent, alg);
  const key = t.keep(await load(tpm, parent, blobs));
  await t.flush(parent.handle);
  const c = await certify(tpm, key, ak, extraData);
  await t.flush(key.handle);
  return { blobs, wire: { public: b64(blobs.publicBytes), private: b64(blobs.private), certifyInfo: b64(c.attestBytes), signature: b64(c.signatureBytes) } };
}

/** TPM2_Sign of the confirm digest with `key` (the LDevID just issued). Returns the TPMT_SIGNATURE bytes. */
export function confirmSignature(tpm: TpmClient, alg: KeyAlg, key: KeyBlobs, sessionId: string, ldevidCert: Uint8Array, lakCert: Uint8Array): Promise<Uint8Array> {
  return withTransients(tpm, async (t) => {
    const loaded = await loadUnderSrk(tpm, t, alg, key);
    const digest = new Uint8Array(createHash("sha256").update(confirmMessage(sessionId, ldevidCert, lakCert)).digest());
    return (await sign(tpm, loaded, digest)).signatureBytes;
  });
}

/** The install code: ActivateCredential of the wrapped 32 bytes with the AK and the first approved EK; lowercase hex. */
export function unwrapInstallCode(tpm: TpmClient, alg: KeyAlg, ak: KeyBlobs, ek: PresentedEk, wrapped: NonNullable<ConfirmResponse["installCode"]>): Promise<string> {
  return withTransients(tpm, async (t) => {
    const loadedAk = await loadUnderSrk(tpm, t, alg, ak);
    const loadedEk = t.keep(await createEk(tpm, ek.templateId));
    return hex(await activateCredential(tpm, loadedAk, loadedEk, unb64(wrapped.idObject), unb64(wrapped.encryptedSecret)));
  });
}

export async function attest(input: AttestInput): Promise<AttestResult> {
  const { tpm, server, claims } = input;
  const alg = input.keyAlg ?? "rsa";
  const selection = input.pcrs ?? quoteSelectionFor(input.eventLog);

  // 1. EKs and a fresh AK.
  const eks = await gatherEks(tpm);
  const akBlobs = await createFreshAk(tpm, alg);
  const ch = await call<ChallengeResponse>(server, "challenge", challengeBody(claims, eks, akBlobs), input.retryUnavailable);
  const nonce = unb64(ch.nonce);

  // 2. Evidence: activation per approved EK, the quote, the certified LDevID and LAK.
  const evidence = await withTransients(tpm, async (t) => {
    const ak = await loadUnderSrk(tpm, t, alg, akBlobs);
    const secrets = await activateCredentials(tpm, t, ak, eks, ch.credentials);
    const q = await quoteWithPcrs(tpm, ak, selection, quoteExtraData(nonce, ch.sessionId, claimsHash(claims)));
    const ldevid = await certifiedKey(tpm, t, alg, ak, "ldevid", certifyExtraData("ldevid", nonce, ch.sessionId));
    const lak = await certifiedKey(tpm, t, alg, ak, "lak", certifyExtraData("lak", nonce, ch.sessionId));
    const body: EvidenceWire = { sessionId: ch.sessionId, secrets, quote: q, eventLog: b64(input.eventLog), ldevid: ldevid.wire, lak: lak.wire };
    return { ldevid, lak, body };
  });
  const ev = await call<EvidenceResponse>(server, "evidence", evidence.body, input.retryUnavailable);
  // Nothing issued (wipe, retirement, an attest whose LDevID is not due): the verdict is all; no confirm.
  if (ev.issued === "none") return { mode: claims.mode };
  const ldevidCert = unb64(ev.ldevidCertificate);
  const lakCert = unb64(ev.lakCertificate);

  // 3. Confirm with the new LDevID; in provision, unwrap the install code with the same AK.
  const signature = await confirmSignature(tpm, alg, evidence.ldevid.blobs, ch.sessionId, ldevidCert, lakCert);
  const conf = await call<ConfirmResponse>(server, "confirm", { sessionId: ch.sessionId, signature: b64(signature) } satisfies ConfirmWire, input.retryUnavailable);
  let installCode: string | undefined;
  if (conf.installCode) {
    const first = eks.find((e) => e.binding === ch.credentials[0]?.ekBinding);
    if (!first) throw new Error("no approved EK to unwrap the install code with");
    installCode = await unwrapInstallCode(tpm, alg, akBlobs, first, conf.installCode);
  }
  return {
    mode: conf.mode,
    issued: {
      ldevid: { certificate: ldevidCert, blobs: evidence.ldevid.blobs },
      lak: { certificate: lakCert, blobs: evidence.lak.blobs },
      caBundle: ev.caBundle,
    },
    ...(installCode ? { installCode } : {}),
  };
}

export { encode, TPM2B_PUBLIC };
