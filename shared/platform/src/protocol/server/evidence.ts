/**
 * Step 2 — evidence, then step 3 — every gate, then issuance (attestation-protocol.md "Messages" 2–3).
 * The session is claimed first, every check runs, the inventory is read again, and only when all of that holds
 * are the LDevID and LAK certificates issued; the outcome — pass or refusal — is committed with the session
 * (its nonce is single use whatever the checks find), and NetBox is told through the outbox.
 */
import { createHash } from "node:crypto";
import { AK_POLICY, checkKeyAttributes, LDEVID_POLICY, type PcrValues, Checks, type Reason, verifyCertify, verifyQuote } from "@fleetd/verify/attest";
import { decodeExact } from "@fleetd/verify/codec";
import { ctEqual, fromHex, hex } from "@fleetd/verify/crypto";
import { CURVES, isCurve, TPM_ALG } from "@fleetd/verify/tcg";
import { TPMT_PUBLIC, type TPMT_PUBLIC as Public } from "@fleetd/verify/tpm";
import { certifyExtraData, quoteExtraData } from "../bindings.js";
import type { Claims, Evidence, EvidenceResponse } from "../messages.js";
import type { IssuedRecord, SessionRecord, SessionState } from "../../state/store.js";
import { randomSerial } from "../../pki/serial.js";
import { ldevidCommonName } from "../../pki/names.js";
import { failpoint } from "../../outage/failpoint.js";
import { Unavailable } from "../../outage/outage.js";
import { uuidEqual } from "./challenge.js";
import { type ClaimedStep, JOURNAL_LINGER_MS, withClaim } from "./step.js";
import { Refused, type ServerContext } from "./context.js";
import type { Node, NodeRef } from "../../fleet/node.js";
import type { Issued } from "../../fleet/ports.js";

export const BANKS = { sha1: TPM_ALG.SHA1, sha256: TPM_ALG.SHA256, sha384: TPM_ALG.SHA384, sha512: TPM_ALG.SHA512 } as const;

/**
 * The quote's PCR values as the verifier takes them (both the attestation and the renewal evidence). One value per
 * (bank, PCR): a second one would silently replace the first (the schema cannot say this), so it fails
 * `quote.pcrDuplicate` in `c`.
 */
export function pcrValuesOf(values: readonly { bank: keyof typeof BANKS; pcr: number; value: string }[], c: Checks): PcrValues {
  const pcrs: PcrValues = new Map();
  for (const p of values) {
    const bank = pcrs.get(BANKS[p.bank]) ?? new Map<number, Uint8Array>();
    pcrs.set(BANKS[p.bank], bank);
    c.check(!bank.has(p.pcr), "quote.pcrDuplicate", `${p.bank}:${p.pcr} is given more than once`, { pcr: p.pcr });
    bank.set(p.pcr, fromHex(p.value));
  }
  return pcrs;
}
const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

export interface EvidenceSessionData {
  claims: Claims;
  sourceAddress: string;
  firstEkPublic: string;
  /** The approved EKs whose manufacturer chain the challenge verified (challengedWith). */
  ekChained?: string[];
  ldevidPublic?: string;
  lakPublic?: string;
  ldevidCertificate?: string;
  lakCertificate?: string;
  bundlePem?: string;
  ldevidPrivate?: string;
  lakPrivate?: string;
}

export function evidence(ctx: ServerContext, ev: Evidence, request: string): Promise<EvidenceResponse> {
  return withEvidenceSession(ctx, ev.sessionId, request, "evidence", (session) =>
    session.data["tpm"] === "1.2"
      ? // opened by the TPM 1.2 challenge (tpm12.ts): its AIK is a TPM_PUBKEY, and nothing may be issued for it
        { check: "session.tpm", detail: "this session was opened by the TPM 1.2 challenge; send its evidence to /v1/attest/tpm12/evidence" }
      : session.data["renew"] !== undefined
        ? { check: "session.kind", detail: "this session was opened by the renewal challenge; send its evidence to /v1/renew/evidence" }
        : undefined,
  (s, now) => judge(ctx, ev, s, now),
  );
}

/**
 * The evidence step's frame, for both protocol variants (TPM 2.0 here, TPM 1.2 in tpm12.ts): the session, of
 * this variant (`otherVariant` names the refusal otherwise), is claimed and judged. Whatever the checks find,
 * the judgement is committed with the session (its nonce is then spent) — a pass with what it released, a
 * refusal with its journal entry; only a dependency outage before that gives the claim back (step.ts).
 */
export function withEvidenceSession<T>(
  ctx: ServerContext,
  sessionId: string,
  request: string,
  name: "evidence" | "tpm12-evidence",
  otherVariant: (session: SessionRecord) => Reason | undefined,
  judged: (s: ClaimedStep, now: Date) => Promise<T>,
): Promise<T> {
  return withClaim(
    ctx,
    { sessionId, name, from: "challenged", request, moved: (session) => new Refused(409, "refused", [{ check: "nonce.reused", detail: "this session's nonce was already used or has expired" }], session.node) },
    async (s) => {
      const other = otherVariant(s.session);
      if (other) throw new Refused(409, "refused", [other], s.session.node);
      return judged(s, ctx.now());
    },
  );
}

/** The claimed session's evidence: every check, the gates on a fresh read, then issuance, committed together. */
async function judge(ctx: ServerContext, ev: Evidence, s: ClaimedStep, now: Date): Promise<EvidenceResponse> {
  const session = s.session;
  const data = session.data as unknown as EvidenceSessionData;
  const c = new Checks();
  const nonce = fromHex(session.nonce);
  const ak = decodeExact(TPMT_PUBLIC, fromHex(session.akPublic));

  // Credential activation: every approved EK answered with its own secret.
  c.check(ev.secrets.length === session.secretHashes.length, "activation.count", `${ev.secrets.length} secrets for ${session.secretHashes.length} approved EKs`);
  let activated = ev.secrets.length === session.secretHashes.length;
  session.secretHashes.forEach((h, i) => {
    const x = ev.secrets[i];
    const ok = x !== undefined && ctEqual(new Uint8Array(createHash("sha256").update(x).digest()), fromHex(h));
    activated &&= ok;
    c.check(ok, "activation.secret", `the secret for approved EK ${session.ekBindings[i] ?? i} was not recovered: the AK is not in the TPM holding that EK`);
  });

  // The quote, bound to this session's nonce and claims.
  const pcrs = pcrValuesOf(ev.quote.pcrs, c);
  const q = verifyQuote({
    akPublic: ak,
    quote: ev.quote.message,
    signature: ev.quote.signature,
    pcrs,
    expectedExtraData: quoteExtraData(nonce, session.id, fromHex(session.claimsHash)),
  });
  for (const r of q.reasons) c.fail(r.check, r.detail);

  // LDevID and LAK: certified by this AK for this session; attributes as SPIRE tpm_devid and an AK need.
  const certified = (kind: "ldevid" | "lak", key: Evidence["ldevid"]): Public | undefined => {
    const v = verifyCertify({
      akPublic: ak,
      objectPublic: key.public,
      attest: key.certifyInfo,
      signature: key.signature,
      expectedExtraData: certifyExtraData(kind, nonce, session.id),
    });
    for (const r of v.reasons) c.fail(`${kind}.${r.check}`, r.detail);
    if (!v.object) return undefined;
    checkKeyAttributes(c, kind, v.object, kind === "ldevid" ? LDEVID_POLICY : AK_POLICY);
    if (kind === "ldevid") checkLdevidKey(c, v.object);
    return v.object;
  };
  const ldevid = certified("ldevid", ev.ldevid);
  const lak = certified("lak", ev.lak);

  // Measured boot: only when the quote holds are its PCRs worth reading the log against.
  if (q.verdict === "pass") {
    const mb = await ctx.measuredBoot.evaluate(ctx.settings.provisioningProfile, ev.eventLog, pcrs);
    for (const r of mb.reasons) c.fail(`policy.${r.check}`, r.detail, { ...(r.pcr !== undefined ? { pcr: r.pcr } : {}), ...(r.event !== undefined ? { event: r.event } : {}) });
  }
  if (!activated) {
    // Nothing proves the caller holds the node's TPM: no verdict is written (anyone with a public EK certificate
    // could otherwise mark a node failed); the service counts it and journals it rate-limited.
    return s.refuse(new Refused(403, "refused", c.reasons, session.node), "evidenced");
  }
  if (!c.ok || !ldevid || !lak) {
    s.effects.attestation(session.node, { verdict: "fail", at: now });
    // The TPM proved it is the node's, and the node failed: in provision or attest that is a failed node.
    if (session.mode === "provision" || session.mode === "attest") {
      s.effects.status(session.node, "failed", `${session.mode}: TPM evidence failed (${c.reasons.map((r) => r.check).join(", ")})`);
    }
    return s.refuse(new Refused(403, "refused", c.reasons, session.node, true), "evidenced");
  }

  // Every gate, on a fresh read of the inventory (by device ID), before anything is signed.
  const node = await spendingRefusals(s, "evidenced", () => freshGates(ctx, session, data.claims));

  const plan = await issuancePlan(ctx, node, session.mode, now);
  let issued: { ldevid: Issued; lak: Issued; bundlePem: string } | undefined;
  let generation: number | undefined;
  const records: IssuedRecord[] = [];
  if (plan.issue === "new") {
    generation = await ctx.store.nextGeneration(node.deviceId);
    // The serials are reserved before the CA signs: a certificate whose step never records its verdict (the
    // process died, the signer failed) stays listed as void — never valid and unrecorded.
    const serials = { ldevid: hex(randomSerial()), lak: hex(randomSerial()) };
    const reserved = { at: now.getTime(), why: `reserved by ${session.mode} evidence (session ${session.id.slice(0, 8)}): void unless the step records its verdict; never delivered otherwise` };
    for (const [kind, serial, key] of [["ldevid", serials.ldevid, ev.ldevid.public], ["lak", serials.lak, ev.lak.public]] as const) {
      await ctx.store.recordIssued({ serial, node: session.node, kind, generation, notAfter: now.getTime(), issuedAt: now.getTime(), der: "", keyPublic: hex(key), voided: reserved });
    }
    issued = await ctx.issuer.issue({ node: session.node.name, generation, ldevid, lak, serials });
    for (const [kind, cert, key] of [["ldevid", issued.ldevid, ev.ldevid.public], ["lak", issued.lak, ev.lak.public]] as const) {
      records.push({ serial: cert.serialHex, node: session.node, kind, generation, notAfter: cert.notAfter.getTime(), issuedAt: now.getTime(), der: hex(cert.der), keyPublic: hex(key) });
    }
    failpoint("evidence.afterSign");
  }
  // The verdict, the certificates, the session's data and the journal entry: one commit; NetBox hears of them
  // through the outbox.
  s.effects.attestation(session.node, {
    ...passRecord(data.claims, node, now),
    ...(issued ? { ldevid: { serial: issued.ldevid.serialHex, cn: ldevidCommonName(session.node.name, generation ?? 0), notAfter: issued.ldevid.notAfter } } : {}),
  });
  // An operator's attest that passes releases a quarantined node (renew.ts): the latch is cleared with this commit;
  // fleetd's cordon is lifted at the node's next passing runtime attestation.
  const latched = session.mode === "attest" ? (await ctx.store.getRuntime(node.deviceId))?.quarantine : undefined;
  // Certificates issued: a confirm follows at once. The answer waits for the verdict's fields, not for the
  // journal entries (in the store with the verdict): they linger so the confirm's commit delivers them with its
  // own, in one request.
  const linger = issued ? now.getTime() + JOURNAL_LINGER_MS : 0;
  if (latched) {
    s.effects.journal(session.node, {
      kind: "success",
      summary: `released from quarantine by the operator's attest (quarantined since ${new Date(latched.at).toISOString()}: ${latched.why}); the cordon is lifted at the next passing runtime attestation`,
    }, linger);
  }
  const what = issued ? `LDevID g${generation ?? "?"} serial ${issued.ldevid.serialHex} issued (${plan.why})` : `no certificate issued (${plan.why})`;
  s.effects.journal(session.node, {
    kind: "success",
    summary: `${session.mode}: TPM evidence passed (EKs ${session.ekBindings.map((b) => b.slice(0, 12)).join(", ")}, profile ${ctx.settings.provisioningProfile}); ${what}`,
  }, linger);
  const next: EvidenceSessionData = {
    ...data,
    ...(issued
      ? {
          ldevidPublic: hex(ev.ldevid.public),
          lakPublic: hex(ev.lak.public),
          ldevidPrivate: hex(ev.ldevid.private),
          lakPrivate: hex(ev.lak.private),
          ldevidCertificate: hex(issued.ldevid.der),
          lakCertificate: hex(issued.lak.der),
          bundlePem: issued.bundlePem,
        }
      : {}),
  };
  const response: EvidenceResponse = issued
    ? { verdict: "pass", issued: "new", ldevidCertificate: b64(issued.ldevid.der), lakCertificate: b64(issued.lak.der), caBundle: issued.bundlePem }
    : { verdict: "pass", issued: "none" };
  await s.commit("evidenced", next as unknown as Record<string, unknown>, { response }, { issued: records, ...(latched ? { runtime: { node: session.node, quarantine: "release" as const } } : {}) }, issued ? "fields" : "all");
  return response;
}

/**
 * `check` (the gates) with its refusals spending the session: the refusal and its journal entry are committed
 * (the nonce is used up, the stricter choice); an outage is not a refusal and gives the claim back.
 */
export async function spendingRefusals<T>(s: ClaimedStep, to: SessionState, check: () => Promise<T>): Promise<T> {
  try {
    return await check();
  } catch (e) {
    if (e instanceof Refused) return s.refuse(e, to);
    throw e;
  }
}

/**
 * What a pass records in NetBox for both protocol variants: the verdict, the claimed MACs and boot MAC (bound by
 * the quote), serial and UUID — the UUID as the node's own at its first pass (recordUuid), compared afterwards.
 */
export function passRecord(claims: Claims, node: Node, at: Date) {
  return {
    verdict: "pass" as const,
    at,
    macs: claims.macs,
    ...(claims.bootMac ? { bootMac: claims.bootMac } : {}),
    serial: claims.serial,
    uuid: claims.uuid,
    ...(node.uuid ? {} : { recordUuid: claims.uuid }),
    ...(node.bootInterface !== undefined ? { bootInterface: node.bootInterface } : {}),
  };
}

/** Statuses that never get a certificate: the node is leaving, or is switched off on purpose. */
const NO_ISSUANCE_STATUSES: readonly string[] = ["decommissioning", "offline"];

type IssuancePlan = { issue: "new" | "none"; why: string };

/**
 * Whether this pass gets certificates (attestation-protocol.md "Keys and certificates"): never in `wipe` (a wipe
 * releases nothing) and never to a `decommissioning`/`offline` device; `attest` only when the node's LDevID is due
 * for renewal (or it has none); `intake`/`provision` certify keys created in this session (a new key: always a
 * new pair, which the confirm then proves usable).
 */
async function issuancePlan(ctx: ServerContext, node: Node, mode: Claims["mode"], now: Date): Promise<IssuancePlan> {
  if (mode === "wipe") return { issue: "none", why: "wipe releases nothing" };
  if (NO_ISSUANCE_STATUSES.includes(node.status)) return { issue: "none", why: `the device is ${node.status}` };
  if (mode !== "attest") return { issue: "new", why: `${mode}: keys created in this session` };
  const ldevid = (await ctx.store.listIssued(node.deviceId)).filter((r) => r.kind === "ldevid" && !r.voided).sort((a, b) => b.generation - a.generation)[0];
  if (!ldevid) return { issue: "new", why: "the node had no LDevID" };
  const until = new Date(ldevid.notAfter).toISOString();
  return ldevid.notAfter - now.getTime() < ctx.settings.renewBeforeMs
    ? { issue: "new", why: `renewal due: the LDevID g${ldevid.generation} expires ${until}` }
    : { issue: "none", why: `the LDevID g${ldevid.generation} is valid until ${until}; renewal not due` };
}

/** SPIRE tpm_devid: RSA-2048 RSASSA-SHA256 or ECC P-256 ECDSA-SHA256 (the agent refuses a NULL scheme). */
function checkLdevidKey(c: Checks, pub: Public): void {
  if (pub.parameters.kind === "rsa") {
    const s = pub.parameters.scheme.details;
    c.check(pub.parameters.keyBits === 2048 && s.kind === "rsassa" && s.hashAlg === TPM_ALG.SHA256, "ldevid.scheme", "an RSA LDevID must be RSA-2048 with RSASSA-SHA256");
  } else if (pub.parameters.kind === "ecc") {
    const s = pub.parameters.scheme.details;
    const p256 = isCurve(pub.parameters.curveID) && CURVES[pub.parameters.curveID].name === "P-256";
    c.check(p256 && s.kind === "ecdsa" && s.hashAlg === TPM_ALG.SHA256, "ldevid.scheme", "an ECC LDevID must be P-256 with ECDSA-SHA256");
  }
}

/**
 * Every gate on a fresh read of the device by its ID (checkGates), then the Workflow gate: the node as it is now,
 * or a journalled 403 naming the gates that failed. Evidence runs it before anything is signed, confirm before
 * anything is released.
 */
export async function freshGates(ctx: ServerContext, session: Pick<SessionRecord, "node" | "mode" | "ekBindings" | "data">, claims: Claims): Promise<Node> {
  // NetBox must hold what fleetd recorded for this node before it is read (an outbox still delivering after an
  // outage): deliver it now, or wait — the gates never read a NetBox that is behind fleetd's own record.
  const id = session.node.deviceId;
  // Journal entries are no gate input: they may stay queued (an evidence's, lingering for its confirm's commit).
  const caughtUp = ctx.outbox ? await ctx.outbox.flush(id, { journal: false }) : (await ctx.store.listOutbox(id)).every((i) => i.effect["kind"] === "netbox.journal");
  if (!caughtUp) throw new Unavailable("netbox-writes-pending", "NetBox does not yet hold every write fleetd recorded for this node; they are being delivered", 2);
  const node = await ctx.inventory.reread(id);
  const gates = checkGates(ctx, node, session.node, session.mode, session.ekBindings, claims, challengedWith(session.data));
  if (gates.length > 0 || !node) throw new Refused(403, "refused", gates, session.node, true);
  const workflow = await ctx.workflows.check(node, claims);
  if (workflow.length > 0) throw new Refused(403, "refused", workflow, session.node, true);
  return node;
}

/** What the challenge decided on, as the gates re-check it: the protocol variant's TPM family, the EKs it chain-checked. */
export interface Challenged {
  /** The TPM family the session's protocol variant is for ("1.2": opened by the TPM 1.2 challenge, tpm12.ts). */
  tpm: "2.0" | "1.2";
  /**
   * The approved EKs whose manufacturer chain the challenge verified (session data `ekChained`); absent in a
   * session opened before the challenge recorded it (it then read the node fresh, and this gate is skipped).
   */
  chained?: readonly string[];
}

/** The session data's record of what its challenge checked. */
export function challengedWith(data: Record<string, unknown>): Challenged {
  const chained = data["ekChained"];
  return {
    tpm: data["tpm"] === "1.2" ? "1.2" : "2.0",
    ...(Array.isArray(chained) && chained.every((b) => typeof b === "string") ? { chained: chained as string[] } : {}),
  };
}

/**
 * The gates before anything is released, on a fresh read of the device by its ID: status, desired_action, the
 * EK set and the chain each EK needs, every attributed field (name, serial, EK bindings, …; recorded UUID and
 * boot MAC), the name the session began with, the TPM family and serial the challenge found, the recorded UUID,
 * and the cable's switch port — required for every mode that releases something (all but wipe) unless the nodes
 * file waives it for this node. The challenge may decide on the EK-binding index's copy of the node
 * (challenge.ts decideOnIndex): whatever it relied on is checked here again. [] when all hold. Details name no
 * inventory value; `internal` carries them to the journal.
 */
export function checkGates(ctx: ServerContext, node: Node | undefined, ref: NodeRef, mode: Claims["mode"], bindings: string[], claims: Claims, challenged: Challenged = { tpm: "2.0" }): Reason[] {
  const c = new Checks();
  if (!node) return [{ check: "gate.node", detail: "the node is no longer in the inventory", internal: `device ${ref.deviceId} (${ref.name}) is gone` }];
  const allowed = ctx.settings.gates[mode];
  c.check(allowed.includes(node.status), "gate.status", `the node's status does not allow ${mode}`, { internal: `status ${node.status} (allowed: ${allowed.join(", ")})` });
  c.check(node.desiredAction === null || node.desiredAction === mode, "gate.desiredAction", `desired_action is no longer ${mode}`, { internal: `desired_action is now ${node.desiredAction}` });
  const now = node.ekBindings.map((b) => b.binding).sort().join(",");
  c.check(now === [...bindings].sort().join(","), "gate.ekSet", "the node's approved EK set changed since the challenge");
  if (challenged.chained) {
    const unchecked = node.ekBindings.filter((b) => b.chain && !challenged.chained?.includes(b.binding)).map((b) => b.binding);
    c.check(unchecked.length === 0, "gate.ekChain", "the node requires a manufacturer chain for an EK whose chain the challenge did not check", { internal: `EKs ${unchecked.join(", ")}` });
  }
  for (const u of node.unattributed) {
    c.fail(`gate.attribution.${u.code}`, "a node field this step relies on was not written by the account that owns it", { internal: u.reason });
  }
  c.check(node.name === ref.name, "gate.name", "the node was renamed since the challenge", { internal: `device ${node.deviceId} was ${ref.name}, now ${node.name}` });
  c.check(node.tpm === challenged.tpm, "gate.tpm", `the node is no longer recorded with a TPM ${challenged.tpm}`, { internal: `recorded TPM: ${node.tpm}` });
  c.check(claims.serial === node.serial, "gate.serial", "the claimed serial is not the node's", { internal: `recorded serial: ${node.serial}` });
  if (node.uuid) c.check(uuidEqual(claims.uuid, node.uuid), "gate.uuid", "the claimed UUID is not the one recorded at the node's first attestation", { internal: `recorded UUID: ${node.uuid}` });
  if (node.switchPort) {
    c.check(claims.lldp !== null, "gate.switchPort", "no LLDP seen on the boot interface, but NetBox records a cable", { internal: `expected ${node.switchPort.device} ${node.switchPort.port}` });
    if (claims.lldp) {
      const ok = sameName(claims.lldp.chassisId, node.switchPort.device) && sameName(claims.lldp.portId, node.switchPort.port);
      c.check(ok, "gate.switchPort", `LLDP says ${claims.lldp.chassisId} ${claims.lldp.portId}; that is not the switch port NetBox cables the node to`, {
        internal: `NetBox cables it to ${node.switchPort.device} ${node.switchPort.port}`,
      });
    }
  } else if (mode !== "wipe" && !node.switchPortWaived) {
    c.fail("gate.switchPort", `NetBox records no cable for the node, so the switch port cannot be checked; ${mode} releases secrets only after it is`, {
      internal: "cable the node's boot interface in NetBox, or waive the check for this node in the nodes file (switchPortCheck: waived)",
    });
  }
  c.check(true, "gate", "");
  return c.reasons;
}

function sameName(a: string, b: string): boolean {
  return a.trim().toLowerCase() === b.trim().toLowerCase();
}
