/**
 * Machines for the attestation tests, honest or not, built from the steps the real client uses
 * (shared/platform/src/protocol/client/attest.ts) on a real swtpm: challenge, evidence (activation, quote, certified
 * LDevID and LAK), confirm, unwrap. Every step takes options that let a test make the machine misbehave in
 * exactly one way — present other EKs or an old AK, quote over other claims or PCRs, send a tampered log,
 * create the LDevID from the wrong template, reuse an earlier session's certify, sign the confirm with another
 * key — while everything else stays what an honest machine sends.
 */
import { parseEventLog, type TcgEvent } from "@fleetd/verify/eventlog";
import {
  activateCredentials,
  attest,
  AttestationRefused,
  type AttestResult,
  call,
  certifiedKey,
  challengeBody,
  confirmSignature,
  createFreshAk,
  DEFAULT_QUOTE_SELECTION,
  gatherEks,
  loadUnderSrk,
  presentEk,
  quoteWithPcrs,
  readPcrsWire,
  unwrapInstallCode,
  type CertifiedKey,
  type ConfirmWire,
  type EvidenceWire,
  type PresentedEk,
  type ServerTransport,
} from "@fleetd/platform/protocol/client";
import {
  certifyExtraData, claimsHash, quoteExtraData, type ChallengeResponse, type Claims, type ConfirmResponse,
  type EvidenceResponse,
} from "@fleetd/platform/protocol";
import { type TpmClient, createLdevid, createSrk, type KeyBlobs, withTransients } from "@fleetd/platform/tpmclient";
import { b64, unb64, type ChallengeOptions, type Evidence, type EvidenceOptions as CommonEvidenceOptions, type MachineOn, type Session } from "./machineTypes.js";
import type { World, WorldMachine } from "./world.js";

export type Machine = MachineOn<TpmClient>;

/** Runs `fn` with a connection to the machine's TPM, closed afterwards. */
export async function withMachine<T>(wm: WorldMachine, server: ServerTransport, fn: (m: Machine) => Promise<T>): Promise<T> {
  const tpm = wm.client();
  try {
    return await fn({ tpm, server, alg: "rsa", eventLog: wm.eventLog });
  } finally {
    await tpm.close();
  }
}

/** A challenged session, as the machine remembers it. */
export type Challenged = Session<PresentedEk, KeyBlobs>;

/** Step 1. Throws AttestationRefused when the server refuses. */
export async function challenge(m: Machine, claims: Claims, o: ChallengeOptions<PresentedEk, KeyBlobs> = {}): Promise<Challenged> {
  const eks = await gatherEks(m.tpm);
  const present = o.present ?? eks;
  const ak = o.ak ?? (await createFreshAk(m.tpm, m.alg));
  const response = await call<ChallengeResponse>(m.server, "challenge", challengeBody(claims, present, ak));
  return { claims, eks: [...eks, ...present.filter((p) => !eks.some((e) => e.binding === p.binding))], ak, response, nonce: unb64(response.nonce) };
}

/** An EK of this TPM from a profile template, presented without a certificate (e.g. "L-2": the P-256 EK). */
export function ekFromTemplate(m: Machine, templateId: PresentedEk["templateId"]): Promise<PresentedEk> {
  return presentEk(m.tpm, templateId);
}

export interface EvidenceOptions extends CommonEvidenceOptions<CertifiedKey> {
  /** Create the "LDevID" with another function (e.g. createAk: a restricted key). */
  createLdevidWith?: Parameters<typeof certifiedKey>[6];
}

/** The evidence of a challenged session and the keys it certifies; not sent yet. */
export type Evidenced = Evidence<CertifiedKey>;

/** Step 2, built: activation, quote, PCR values, the log, a certified LDevID and LAK. */
export function evidence(m: Machine, s: Challenged, o: EvidenceOptions = {}): Promise<Evidenced> {
  const { tpm, alg } = m;
  const sessionId = s.response.sessionId;
  return withTransients(tpm, async (t) => {
    const ak = await loadUnderSrk(tpm, t, alg, s.ak);
    const secrets = await activateCredentials(tpm, t, ak, s.eks, s.response.credentials);
    const quote = await quoteWithPcrs(tpm, ak, o.quoteSelection ?? DEFAULT_QUOTE_SELECTION, quoteExtraData(s.nonce, sessionId, claimsHash(o.quoteClaims ?? s.claims)));
    if (o.sendPcrs) quote.pcrs = await readPcrsWire(tpm, o.sendPcrs);
    const ldevid = o.ldevid ?? (await certifiedKey(tpm, t, alg, ak, "ldevid", certifyExtraData("ldevid", s.nonce, sessionId), o.createLdevidWith));
    const lak = await certifiedKey(tpm, t, alg, ak, "lak", certifyExtraData("lak", s.nonce, sessionId));
    const body: EvidenceWire = { sessionId, secrets, quote, eventLog: b64(o.eventLog ?? m.eventLog), ldevid: ldevid.wire, lak: lak.wire };
    return { body, ldevid, lak };
  });
}

export function sendEvidence(m: Machine, body: EvidenceWire): Promise<EvidenceResponse> {
  return call<EvidenceResponse>(m.server, "evidence", body);
}

/** Step 3's body: the confirm digest signed by `signer` (default: the LDevID the evidence certified). */
export async function confirmBody(m: Machine, s: Challenged, ev: Evidenced, accepted: EvidenceResponse, signer: KeyBlobs = ev.ldevid.blobs): Promise<ConfirmWire> {
  if (accepted.issued !== "new") throw new Error("the evidence was accepted without certificates: there is nothing to confirm");
  const signature = await confirmSignature(m.tpm, m.alg, signer, s.response.sessionId, unb64(accepted.ldevidCertificate), unb64(accepted.lakCertificate));
  return { sessionId: s.response.sessionId, signature: b64(signature) };
}

export function sendConfirm(m: Machine, body: ConfirmWire): Promise<ConfirmResponse> {
  return call<ConfirmResponse>(m.server, "confirm", body);
}

/** The install code of a provision confirm, unwrapped by the TPM (undefined when the reply carries none). */
export async function unwrap(m: Machine, s: Challenged, conf: ConfirmResponse): Promise<string | undefined> {
  if (!conf.installCode) return undefined;
  const first = s.eks.find((e) => e.binding === s.response.credentials[0]?.ekBinding);
  if (!first) throw new Error("no approved EK to unwrap the install code with");
  return unwrapInstallCode(m.tpm, m.alg, s.ak, first, conf.installCode);
}

/** A signing key shaped like an LDevID that no AK certified and no CA signed. */
export function uncertifiedKey(m: Machine): Promise<KeyBlobs> {
  return withTransients(m.tpm, async (t) => createLdevid(m.tpm, t.keep(await createSrk(m.tpm, m.alg)), m.alg));
}

/** The whole honest run, step by step; returns the session, the evidence, and the install code if any. */
export async function honest(m: Machine, claims: Claims): Promise<{ session: Challenged; evidence: Evidenced; accepted: EvidenceResponse; confirm: ConfirmWire; code?: string }> {
  const session = await challenge(m, claims);
  const ev = await evidence(m, session);
  const accepted = await sendEvidence(m, ev.body);
  const confirm = await confirmBody(m, session, ev, accepted);
  const code = await unwrap(m, session, await sendConfirm(m, confirm));
  return { session, evidence: ev, accepted, confirm, ...(code ? { code } : {}) };
}

/**
 * The log with one byte of one event's data flipped (the first event `pick` selects): the record still parses,
 * but its digests no longer vouch for its data. Throws if no event matches or it carries no data.
 */
export function flipEventDataByte(log: Uint8Array, pick: (ev: TcgEvent) => boolean): { log: Uint8Array; event: TcgEvent } {
  const parsed = parseEventLog(log);
  const i = parsed.events.findIndex(pick);
  const ev = parsed.events[i];
  if (!ev || ev.data.length === 0) throw new Error("no event with data to tamper with");
  // The data is the last part of the record, which ends where the next one starts.
  const end = parsed.events[i + 1]?.offset ?? parsed.byteLength;
  const at = end - ev.data.length + Math.floor(ev.data.length / 2);
  const out = new Uint8Array(log);
  out[at] = (out[at] as number) ^ 0x01;
  return { log: out, event: ev };
}

/**
 * An honest machine of a world (by default worker-1, the world's own) runs `mode` through fleetd's client, with
 * optional claim changes.
 */
export async function runHonest(
  w: World,
  mode: Claims["mode"],
  over: Partial<Claims> = {},
  server: ServerTransport = w.transport,
  machine: Pick<WorldMachine, "client" | "claims" | "eventLog"> = w,
): Promise<AttestResult> {
  const tpm = machine.client();
  try {
    return await attest({ tpm, server, claims: machine.claims({ mode, ...over }), eventLog: machine.eventLog });
  } finally {
    await tpm.close();
  }
}

/** Awaits a run that must be refused and returns the refusal; fails the test if it was accepted. */
export async function refusal(p: Promise<unknown>): Promise<AttestationRefused> {
  try {
    await p;
  } catch (e) {
    if (e instanceof AttestationRefused) return e;
    throw e;
  }
  throw new Error("accepted, but it must be refused");
}

/** The certificates of a passing run (a run that got none fails the test here). */
export function issued(r: AttestResult): NonNullable<AttestResult["issued"]> {
  if (!r.issued) throw new Error(`${r.mode}: the server issued no certificates`);
  return r.issued;
}
