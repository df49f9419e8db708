/**
 * Renewal with runtime attestation, and quarantine (talos-config-server/README.md "Renewal", "Quarantine").
 *
 *  1. challenge: the node's current LDevID and LAK certificates (public: anyone may send them). Both must chain to
 *     fleetd's CA bundle, be valid now, be exactly the certificates the state store records, and be the node's
 *     current generation (the latest LDevID not void; an unconfirmed renewal is void). The node is the one the
 *     issued record names, re-read from NetBox: `decommissioning`/`offline`, an unknown class, a field not
 *     written by its account, or a quarantined worker → refused (journalled at most once per window: nothing is
 *     proven yet). Answer: a session, a single-use nonce, and the PCRs the class profile needs.
 *  2. evidence: possession first — a TPM2_Sign by the LDevID over the session, the nonce and the quote. Without
 *     it nothing changes (no verdict; the refusal is journalled rate-limited). Then the LAK's quote (bound to
 *     the nonce and session), the replay of the event log and the class profile: the runtime verdict. A pass is
 *     recorded (and lifts fleetd's cordon); with purpose `renew` and the LDevID past two thirds of its life the
 *     next generation's certificates for the same keys are issued — void until the confirm. A failure is
 *     recorded with its reasons; a worker is quarantined (latched in the store, its Node cordoned through the
 *     outbox), a control plane is alerted on (journal, metric, error log) and neither cordoned nor latched.
 *     Nothing is ever signed on a failed quote.
 *  3. confirm: the LDevID signs the new certificates; only then are they current (store, NetBox). Single use.
 *
 * The latch lives in the state store, never in NetBox (which its users can edit); an operator's passing `attest`
 * (evidence.ts) releases it.
 */
import { randomUUID } from "node:crypto";
import { AK_POLICY, Checks, checkKeyAttributes, LDEVID_POLICY, type Reason, verifyQuote, verifyTpmSignature } from "@fleetd/verify/attest";
import { decodeExact, ParseError } from "@fleetd/verify/codec";
import { fromHex, hex } from "@fleetd/verify/crypto";
import { TPMT_PUBLIC, TPMT_SIGNATURE } from "@fleetd/verify/tpm";
import { renewConfirmMessage, renewPossessionMessage, renewQuoteExtraData } from "../bindings.js";
import type { PcrBankSelection, RenewChallengeRequest, RenewChallengeResponse, RenewConfirm, RenewConfirmResponse, RenewEvidence, RenewEvidenceResponse, RenewPurpose } from "../messages.js";
import type { IssuedRecord, NodeRef, RuntimeUpdate, SessionRecord } from "../../state/store.js";
import type { Node } from "../../fleet/node.js";
import { parseIssuedCertificate } from "../../pki/parseCertificate.js";
import { verifyIssued } from "../../pki/verifyIssued.js";
import { renewalDue } from "../../pki/renewal.js";
import { ldevidCommonName } from "../../pki/names.js";
import { randomSerial } from "../../pki/serial.js";
import { PkiError } from "../../pki/errors.js";
import { DEFAULT_CORDON_REASSERT_WINDOW_MS, Refused, type ServerContext } from "./context.js";
import { confirmMoved } from "./confirm.js";
import { BANKS, pcrValuesOf } from "./evidence.js";
import { type ClaimedStep, withClaim } from "./step.js";
import { StepEffects } from "../../outbox/effects.js";

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

/** Statuses that never renew or attest at runtime: the node is leaving, or switched off on purpose. */
export const RUNTIME_REFUSED_STATUSES: readonly string[] = ["decommissioning", "offline"];

/** What the server needs for renewal (wired by talos-config-server; absent: the renewal endpoints refuse). */
export interface RenewalSettings {
  /** fleetd's CA bundle now (DER certificates): the presented LDevID and LAK must chain to it. */
  caBundle: () => Uint8Array[] | Promise<Uint8Array[]>;
  /** Node class → runtime profile (site configuration `runtime.profiles`); a class not listed is refused. */
  profiles: Readonly<Record<string, string>>;
  /** The PCRs (per bank) a profile needs quoted. */
  selection: (profile: string) => PcrBankSelection[];
  /** A worker was quarantined (a metric). */
  onQuarantine?: (node: NodeRef, profile: string, reasons: Reason[]) => void;
  /** A control plane's runtime quote failed: an alert (a metric and an error log line), no cordon. */
  onAlert?: (node: NodeRef, profile: string, reasons: Reason[]) => void;
  /** Every runtime verdict (a metric). */
  onVerdict?: (verdict: "pass" | "fail", profile: string) => void;
}

/** What a renewal session keeps between its steps (session.data.renew). */
export interface RenewSessionData {
  purpose: RenewPurpose;
  profile: string;
  role: Node["role"];
  pcrSelection: PcrBankSelection[];
  generation: number;
  ldevidSerial: string;
  lakSerial: string;
  /** The keys' TPMT_PUBLIC, hex (from the issued records). */
  ldevidPublic: string;
  lakPublic: string;
  /** The current LDevID certificate, hex (renewalDue reads its validity). */
  ldevidDer: string;
  /** Set by a pass that issued: the next generation, void until the confirm. */
  issued?: { generation: number; ldevid: IssuedRecord; lak: IssuedRecord; bundlePem: string };
}

export function renewDataOf(session: Pick<SessionRecord, "data">): RenewSessionData | undefined {
  const r = session.data["renew"];
  return r && typeof r === "object" ? (r as RenewSessionData) : undefined;
}

function settings(ctx: ServerContext): RenewalSettings {
  if (!ctx.renewal) throw new Refused(404, "refused", [{ check: "renew.disabled", detail: "this server does not renew LDevIDs (no renewal settings)" }]);
  return ctx.renewal;
}

/** The PCR selection of a policy profile: its required banks (else SHA-256), its enforced and informational PCRs. */
export function profileSelection(profile: { banks: { allowed: string[]; required: string[] }; pcrs: { enforced: number[]; informational: number[] } }): PcrBankSelection[] {
  const pcrs = [...new Set([...profile.pcrs.enforced, ...profile.pcrs.informational])].sort((a, b) => a - b);
  const banks = profile.banks.required.length > 0 ? profile.banks.required : profile.banks.allowed.includes("sha256") ? ["sha256"] : profile.banks.allowed.slice(0, 1);
  return banks.map((bank) => ({ bank: bank as PcrBankSelection["bank"], pcrs }));
}

/** A serial as the issued records hold it: lowercase hex of the DER INTEGER's content bytes. */
const serialOf = (der: Uint8Array) => hex(parseIssuedCertificate(der).serial);

export async function renewChallenge(ctx: ServerContext, req: RenewChallengeRequest, request: string): Promise<RenewChallengeResponse> {
  const r = settings(ctx);
  const now = ctx.now();
  // 1. The certificates, by the one X.509 module: they parse, chain to fleetd's bundle, are valid now.
  const bundle = await r.caBundle();
  const c = new Checks();
  for (const [kind, der] of [["ldevid", req.ldevidCertificate], ["lak", req.lakCertificate]] as const) {
    for (const x of verifyIssued(der, bundle, now, { profile: kind }).reasons) c.fail(`${kind}.${x.check}`, x.detail);
  }
  if (!c.ok) throw new Refused(403, "refused", c.reasons);
  let serials: { ldevid: string; lak: string };
  try {
    serials = { ldevid: serialOf(req.ldevidCertificate), lak: serialOf(req.lakCertificate) };
  } catch (e) {
    if (e instanceof PkiError || e instanceof ParseError) throw new Refused(400, "bad-request", [{ check: "certificate.parse", detail: e.message }]);
    throw e;
  }

  // 2. Exactly what fleetd issued, and the node's current generation.
  const ldevid = await ctx.store.issuedBySerial(serials.ldevid);
  if (!ldevid || ldevid.kind !== "ldevid" || ldevid.der !== hex(req.ldevidCertificate)) {
    throw new Refused(403, "refused", [{ check: "ldevid.unknown", detail: "fleetd's records hold no LDevID certificate with this serial and content" }]);
  }
  const ref: NodeRef = ldevid.node;
  const lak = await ctx.store.issuedBySerial(serials.lak);
  const records = await ctx.store.listIssued(ref.deviceId);
  const current = records.filter((x) => x.kind === "ldevid" && !x.voided).sort((a, b) => b.generation - a.generation)[0];
  c.check(!ldevid.voided, "ldevid.void", `the LDevID g${ldevid.generation} was never delivered or never confirmed; it counts for nothing`);
  c.check(current?.serial === ldevid.serial, "ldevid.stale", `the LDevID is g${ldevid.generation}; the node's current LDevID is g${current?.generation ?? "?"}`);
  c.check(
    lak !== undefined && lak.kind === "lak" && lak.der === hex(req.lakCertificate) && !lak.voided && lak.node.deviceId === ref.deviceId && lak.generation === ldevid.generation,
    "lak.generation",
    "the LAK certificate is not the one fleetd issued with this LDevID (same node, same generation)",
  );
  if (c.ok) {
    // The recorded keys are what they were certified as: an unrestricted signing LDevID, a restricted signing LAK
    // (whose quotes only cover TPM-generated attestation structures).
    checkKeyAttributes(c, "ldevid", decodeExact(TPMT_PUBLIC, fromHex(ldevid.keyPublic)), LDEVID_POLICY);
    checkKeyAttributes(c, "lak", decodeExact(TPMT_PUBLIC, fromHex((lak as IssuedRecord).keyPublic)), AK_POLICY);
  }
  if (!c.ok) throw new Refused(403, "refused", c.reasons, ref);

  // 3. The node as NetBox holds it now.
  const node = await ctx.inventory.reread(ref.deviceId);
  const profile = node ? r.profiles[node.class] : undefined;
  const runtime = await ctx.store.getRuntime(ref.deviceId);
  for (const x of nodeGates(node, ref)) c.fail(x.check, x.detail, x.internal !== undefined ? { internal: x.internal } : {});
  if (node) {
    c.check(profile !== undefined, "runtime.class", "the node's class has no runtime profile in the site configuration", { internal: `class "${node.class}"` });
    c.check(!(runtime?.quarantine && node.role === "worker"), "quarantine", "the node is quarantined: an operator must attest it (desired_action: attest) before it renews again", {
      ...(runtime?.quarantine ? { internal: `quarantined since ${new Date(runtime.quarantine.at).toISOString()}: ${runtime.quarantine.why}` } : {}),
    });
  }
  if (node && runtime?.quarantine && runtime.cordoned && node.role === "worker") await reassertCordon(ctx, ref, runtime.quarantine.why);
  if (!c.ok || !node || profile === undefined) throw new Refused(403, "refused", c.reasons, ref);

  const sessionId = hex(ctx.random(16));
  const nonce = ctx.random(32);
  const expiresAt = now.getTime() + ctx.settings.sessionTtlMs;
  const pcrSelection = r.selection(profile);
  const response: RenewChallengeResponse = { sessionId, nonce: b64(nonce), expiresAt: new Date(expiresAt).toISOString(), pcrSelection };
  const data: RenewSessionData = {
    purpose: req.purpose,
    profile,
    role: node.role,
    pcrSelection,
    generation: ldevid.generation,
    ldevidSerial: ldevid.serial,
    lakSerial: (lak as IssuedRecord).serial,
    ldevidPublic: ldevid.keyPublic,
    lakPublic: (lak as IssuedRecord).keyPublic,
    ldevidDer: ldevid.der,
  };
  await ctx.store.createSession({
    id: sessionId,
    node: ref,
    mode: "attest",
    nonce: hex(nonce),
    claimsHash: "",
    // sessions are looked up by AK Name for challenge replays; a renewal has no AK, and no replay by it
    akName: `renew:${sessionId}`,
    akPublic: (lak as IssuedRecord).keyPublic,
    secretHashes: [],
    ekBindings: [],
    data: { renew: data, answers: { challenge: { request, response } } } as unknown as Record<string, unknown>,
    state: "challenged",
    createdAt: now.getTime(),
    expiresAt,
  });
  return response;
}

/**
 * A latched worker's agent asks again (it does at every start and after each refusal): its cordon is queued once
 * more, at most once per window per device. The cordon holds while the latch does: a Node that was absent when
 * the worker was quarantined (not registered yet, or deleted and registered again), or that someone uncordoned by
 * hand, is cordoned at the node's next attempt — the agent runs as a DaemonSet pod, so the Node exists by then.
 * Only the NetBox `attest` release lifts it. Asking is unauthenticated (certificates are public), hence the window.
 */
async function reassertCordon(ctx: ServerContext, ref: NodeRef, why: string): Promise<void> {
  const now = ctx.now().getTime();
  const charge = await ctx.store.chargeLimit(`cordon:${ref.deviceId}`, now, ctx.settings.cordonReassertWindowMs ?? DEFAULT_CORDON_REASSERT_WINDOW_MS, 1);
  if (!charge.allowed) return;
  const effects = new StepEffects(`cordon:${randomUUID()}`);
  effects.quarantine(ref, "cordon", why);
  await ctx.store.enqueue(effects.items, now);
}

/** The gates of a runtime attestation on a fresh read of the node: it exists, may renew, is attributed, kept its name. */
function nodeGates(node: Node | undefined, ref: NodeRef): Reason[] {
  const c = new Checks();
  if (!node) return [{ check: "gate.node", detail: "the node is no longer in the inventory", internal: `device ${ref.deviceId} (${ref.name}) is gone` }];
  c.check(!RUNTIME_REFUSED_STATUSES.includes(node.status), "gate.status", "the node's status does not allow renewal or runtime attestation", { internal: `status ${node.status}` });
  c.check(node.name === ref.name, "gate.name", "the node was renamed since its LDevID was issued", { internal: `device ${node.deviceId} was ${ref.name}, now ${node.name}` });
  for (const u of node.unattributed) c.fail(`gate.attribution.${u.code}`, "a node field this step relies on was not written by the account that owns it", { internal: u.reason });
  return c.reasons;
}

/** The renewal session of `s`, or a refusal (a session of the attestation protocol). */
function claimedRenewal(s: ClaimedStep): RenewSessionData {
  const d = renewDataOf(s.session);
  if (!d) throw new Refused(409, "refused", [{ check: "session.kind", detail: "this session was opened by the attestation challenge; send its steps to /v1/attest" }], s.session.node);
  return d;
}

export function renewEvidence(ctx: ServerContext, ev: RenewEvidence, request: string): Promise<RenewEvidenceResponse> {
  settings(ctx);
  return withClaim(
    ctx,
    {
      sessionId: ev.sessionId,
      name: "renew-evidence",
      from: "challenged",
      request,
      moved: (session) => new Refused(409, "refused", [{ check: "nonce.reused", detail: "this session's nonce was already used or has expired" }], session.node),
    },
    (s) => judgeRuntime(ctx, ev, s),
  );
}

function signatureOf(bytes: Uint8Array, check: string, node: NodeRef) {
  try {
    return decodeExact(TPMT_SIGNATURE, bytes);
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
    throw new Refused(400, "bad-request", [{ check, detail: e.message }], node);
  }
}

async function judgeRuntime(ctx: ServerContext, ev: RenewEvidence, s: ClaimedStep): Promise<RenewEvidenceResponse> {
  const r = settings(ctx);
  const now = ctx.now();
  const session = s.session;
  const ref = session.node;
  const data = claimedRenewal(s);
  const nonce = fromHex(session.nonce);

  // 1. Possession of the current LDevID, before anything else: an unauthenticated body changes no verdict.
  const sig = signatureOf(ev.signature, "possession.signature.parse", ref);
  const ldevidKey = decodeExact(TPMT_PUBLIC, fromHex(data.ldevidPublic));
  const possession = new Checks();
  verifyTpmSignature(possession, "possession.signature", ldevidKey, renewPossessionMessage(nonce, session.id, ev.quote.message), sig);
  if (!possession.ok) return s.refuse(new Refused(403, "refused", possession.reasons, ref), "evidenced");

  // The node as NetBox holds it now (it may have been moved to decommissioning since the challenge): a refusal,
  // not a verdict.
  const node = await ctx.inventory.reread(ref.deviceId);
  const gates = nodeGates(node, ref);
  if (gates.length > 0 || !node) return s.refuse(new Refused(403, "refused", gates, ref, true), "evidenced");
  const runtime = await ctx.store.getRuntime(ref.deviceId);

  // 2. The LAK's quote, bound to this session, over at least the PCRs asked for; 3. the log against the profile.
  const c = new Checks();
  const pcrs = pcrValuesOf(ev.quote.pcrs, c);
  for (const want of data.pcrSelection) {
    const missing = want.pcrs.filter((p) => !pcrs.get(BANKS[want.bank])?.has(p));
    c.check(missing.length === 0, "quote.selection", `the quote lacks ${want.bank} PCRs ${missing.join(", ")} the challenge asked for`);
  }
  const q = verifyQuote({ akPublic: decodeExact(TPMT_PUBLIC, fromHex(data.lakPublic)), quote: ev.quote.message, signature: ev.quote.signature, pcrs, expectedExtraData: renewQuoteExtraData(nonce, session.id) });
  for (const x of q.reasons) c.fail(x.check, x.detail);
  if (q.verdict === "pass") {
    const mb = await ctx.measuredBoot.evaluate(data.profile, ev.eventLog, pcrs);
    for (const x of mb.reasons) c.fail(`policy.${x.check}`, x.detail, { ...(x.pcr !== undefined ? { pcr: x.pcr } : {}), ...(x.event !== undefined ? { event: x.event } : {}) });
  }
  r.onVerdict?.(c.ok ? "pass" : "fail", data.profile);

  if (!c.ok) {
    // The runtime verdict failed, proven by the node's own LDevID: recorded; a worker is quarantined.
    const checks = c.reasons.map((x) => x.check).join(", ");
    s.effects.runtime(ref, { verdict: { verdict: "fail", at: now } });
    let update: RuntimeUpdate;
    if (node.role === "worker") {
      const why = `runtime attestation failed (profile ${data.profile}): ${checks}`;
      update = { node: ref, verdict: { verdict: "fail", at: now.getTime() }, quarantine: { latch: { at: now.getTime(), why } }, cordoned: true };
      s.effects.quarantine(ref, "cordon", why);
      s.effects.journal(ref, {
        kind: "danger",
        summary: `runtime attestation FAILED (profile ${data.profile}): worker quarantined — renewal refused and the Node cordoned until an operator attests it (desired_action: attest): ${checks}`,
        reasons: c.reasons,
      });
      r.onQuarantine?.(ref, data.profile, c.reasons);
    } else {
      update = { node: ref, verdict: { verdict: "fail", at: now.getTime() } };
      s.effects.journal(ref, {
        kind: "danger",
        summary: `runtime attestation FAILED (profile ${data.profile}) on a control plane: alert only (no cordon, no quarantine); nothing was issued: ${checks}`,
        reasons: c.reasons,
      });
      r.onAlert?.(ref, data.profile, c.reasons);
    }
    return s.refuse(new Refused(403, "refused", c.reasons, ref, true, true), "evidenced", { runtime: update });
  }

  // A pass. Still refused for a latched worker (the latch is set while this session was open).
  if (runtime?.quarantine && node.role === "worker") {
    return s.refuse(
      new Refused(403, "refused", [{ check: "quarantine", detail: "the node is quarantined: an operator must attest it (desired_action: attest) before it renews again", internal: runtime.quarantine.why }], ref, true),
      "evidenced",
    );
  }
  const update: RuntimeUpdate = { node: ref, verdict: { verdict: "pass", at: now.getTime() }, ...(runtime?.cordoned ? { cordoned: false } : {}) };
  s.effects.runtime(ref, { verdict: { verdict: "pass", at: now } });
  if (runtime?.cordoned) s.effects.quarantine(ref, "uncordon", "runtime attestation passed after an operator's release");

  const due = data.purpose === "renew" && renewalDue(fromHex(data.ldevidDer), now);
  let response: RenewEvidenceResponse = { verdict: "pass", issued: "none" };
  let next: RenewSessionData = data;
  const records: IssuedRecord[] = [];
  if (due) {
    const generation = await ctx.store.nextGeneration(ref.deviceId);
    const serials = { ldevid: hex(randomSerial()), lak: hex(randomSerial()) };
    const voided = { at: now.getTime(), why: `renewal g${generation} (session ${session.id.slice(0, 8)}): void until the node confirms it; never current otherwise` };
    for (const [kind, serial, key] of [["ldevid", serials.ldevid, data.ldevidPublic], ["lak", serials.lak, data.lakPublic]] as const) {
      await ctx.store.recordIssued({ serial, node: ref, kind, generation, notAfter: now.getTime(), issuedAt: now.getTime(), der: "", keyPublic: key, voided });
    }
    // The same TPM keys, certified again: their public areas are the ones the current certificates were issued for.
    const issued = await ctx.issuer.issue({ node: ref.name, generation, ldevid: ldevidKey, lak: decodeExact(TPMT_PUBLIC, fromHex(data.lakPublic)), serials });
    const record = (kind: "ldevid" | "lak", cert: { der: Uint8Array; serialHex: string; notAfter: Date }, key: string): IssuedRecord => ({
      serial: cert.serialHex,
      node: ref,
      kind,
      generation,
      notAfter: cert.notAfter.getTime(),
      issuedAt: now.getTime(),
      der: hex(cert.der),
      keyPublic: key,
      voided,
    });
    const ldevid = record("ldevid", issued.ldevid, data.ldevidPublic);
    const lak = record("lak", issued.lak, data.lakPublic);
    records.push(ldevid, lak);
    next = { ...data, issued: { generation, ldevid, lak, bundlePem: issued.bundlePem } };
    response = { verdict: "pass", issued: "new", ldevidCertificate: b64(issued.ldevid.der), lakCertificate: b64(issued.lak.der), caBundle: issued.bundlePem };
  }
  const what = due ? `LDevID g${next.issued?.generation ?? "?"} issued for the same key, current after the node's confirm` : data.purpose === "renew" ? `renewal not due (LDevID g${data.generation})` : "no renewal asked";
  s.effects.journal(ref, { kind: runtime?.cordoned ? "success" : "info", summary: `runtime attestation passed (profile ${data.profile})${runtime?.cordoned ? "; fleetd's cordon lifted" : ""}; ${what}` });
  await s.commit("evidenced", { ...session.data, renew: next }, { response }, { issued: records, runtime: update });
  return response;
}

export function renewConfirm(ctx: ServerContext, req: RenewConfirm, request: string): Promise<RenewConfirmResponse> {
  settings(ctx);
  return withClaim(
    ctx,
    {
      sessionId: req.sessionId,
      name: "renew-confirm",
      from: "evidenced",
      request,
      moved: confirmMoved("a passing renewal"),
    },
    async (s) => {
      const data = claimedRenewal(s);
      const ref = s.session.node;
      const issued = data.issued;
      if (!issued) throw new Refused(409, "refused", [{ check: "confirm.state", detail: "nothing was issued in this session, so there is nothing to confirm" }], ref);
      const sig = signatureOf(req.signature, "confirm.signature.parse", ref);
      const c = new Checks();
      // A wrong signature spends nothing: only the holder of the LDevID can confirm; anyone may try.
      verifyTpmSignature(c, "confirm.signature", decodeExact(TPMT_PUBLIC, fromHex(data.ldevidPublic)), renewConfirmMessage(s.session.id, fromHex(issued.ldevid.der), fromHex(issued.lak.der)), sig);
      if (!c.ok) throw new Refused(403, "refused", c.reasons, ref);
      // The gates again on a fresh read: the node may have been moved to decommissioning, or latched, meanwhile.
      const node = await ctx.inventory.reread(ref.deviceId);
      const gates = nodeGates(node, ref);
      const runtime = await ctx.store.getRuntime(ref.deviceId);
      if (runtime?.quarantine && node?.role === "worker") gates.push({ check: "quarantine", detail: "the node was quarantined since the renewal passed", internal: runtime.quarantine.why });
      if (gates.length > 0) return s.refuse(new Refused(403, "refused", gates, ref, true), "confirmed");
      const { voided: _l, ...ldevid } = issued.ldevid;
      const { voided: _k, ...lak } = issued.lak;
      const cn = ldevidCommonName(ref.name, issued.generation);
      s.effects.runtime(ref, { ldevid: { serial: ldevid.serial, cn, notAfter: new Date(ldevid.notAfter) } });
      s.effects.journal(ref, { kind: "success", summary: `LDevID g${issued.generation} (${cn}, serial ${ldevid.serial}) confirmed by the node: current from now; g${data.generation} expires on its own` });
      const response: RenewConfirmResponse = {};
      await s.commit("confirmed", s.session.data, { response }, { issued: [ldevid, lak] });
      return response;
    },
  );
}
