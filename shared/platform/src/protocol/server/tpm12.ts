/**
 * The TPM 1.2 variant of challenge and evidence (talos-config-server/README.md "TPM 1.2 machines"). The trust decision:
 * a TPM 1.2 can prove which machine it is (its approved EK, by TPM_ActivateIdentity) and how it booted (an AIK
 * quote over SHA-1 PCRs, judged by the `hookos-tpm12` profile), but fleetd never releases anything to it — no
 * LDevID, LAK, install code or Talos config (SPIRE's tpm_devid needs TPM 2.0). So this variant exists for two
 * modes only:
 *  - `intake`: a pass records the boot MAC (and MACs, serial, UUID) as TPM-proven, attributed to the attestation
 *    account like a TPM 2.0 intake; there is no confirm and no admission;
 *  - `wipe`: a pass lets the wipe Workflow's next action (wipe-disk) run on the machine the evidence proved.
 * Only nodes whose nodes-file `tpm` is "1.2" take this path; any other mode is refused and journalled. Nonces
 * are single use with the TPM 2.0 sessions' expiry, the Workflow gate applies at both steps, and the inventory is
 * read again before the pass is recorded. The steps mirror challenge.ts and evidence.ts; the shared gates are
 * theirs (checkGates, the Workflow gate, the pending list, the refusal journal).
 */
import { createHash } from "node:crypto";
import { Checks } from "@fleetd/verify/attest";
import { makeIdentityCredential, verifyIdentityBinding, verifyQuote12 } from "@fleetd/verify/attest12";
import { ParseError } from "@fleetd/verify/codec";
import { ctEqual, fromHex, hex } from "@fleetd/verify/crypto";
import { ekBinding, ekBindingFromCertificate, readCertificate, verifyEkCertificate } from "@fleetd/verify/ek";
import { checkAikPubkey, checkEkPubkey, decodePubkey, type Rsa12Key, Tpm12KeyError } from "@fleetd/verify/tpm12";
import { claimsHash, quoteExternalData12 } from "../bindings.js";
import { TPM12_MODES, type Tpm12ChallengeRequest, type Tpm12ChallengeResponse, type Tpm12Evidence, type Tpm12EvidenceResponse } from "../messages.js";
import { decideOnIndex, uuidEqual } from "./challenge.js";
import { Refused, type ServerContext } from "./context.js";
import type { Node } from "../../fleet/node.js";
import { type EvidenceSessionData, freshGates, passRecord, spendingRefusals, withEvidenceSession } from "./evidence.js";
import { answersOf, replay, type ClaimedStep } from "./step.js";

export { TPM12_MODES };
/** The profile TPM 1.2 evidence is judged by (policy/hookos-tpm12.yaml) unless the settings name another. */
export const DEFAULT_TPM12_PROFILE = "hookos-tpm12";

/** What a TPM 1.2 session keeps between its steps (session.data). */
export interface Tpm12SessionData extends EvidenceSessionData {
  tpm: "1.2";
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const sha256 = (b: Uint8Array) => new Uint8Array(createHash("sha256").update(b).digest());

function key12(bytes: Uint8Array, what: string, check: (p: ReturnType<typeof decodePubkey>) => Rsa12Key): Rsa12Key {
  try {
    return check(decodePubkey(bytes));
  } catch (e) {
    if (e instanceof ParseError) throw new Refused(400, "bad-request", [{ check: `${what}.parse`, detail: e.message }]);
    if (e instanceof Tpm12KeyError) throw new Refused(400, "bad-request", [{ check: `${what}.key`, detail: e.message }]);
    throw e;
  }
}

/** Whether a session was opened by the TPM 1.2 challenge (the TPM 2.0 steps refuse those, and vice versa). */
export function isTpm12Session(data: Record<string, unknown>): boolean {
  return data["tpm"] === "1.2";
}

export async function challenge12(ctx: ServerContext, req: Tpm12ChallengeRequest, sourceAddress: string, request: string): Promise<Tpm12ChallengeResponse> {
  const now = ctx.now();
  const ek = key12(req.ek.pubkey, "ek.pubkey", checkEkPubkey);
  const aik = key12(req.aik.pubkey, "aik.pubkey", checkAikPubkey);
  const binding = ekBinding(ek.spki);

  const decided = await decideOnIndex(ctx, [binding], async (node) => {
    const c = new Checks();
    // As in challenge.ts: until the secret comes back, the caller showed only public EK material, so details name
    // no inventory value (the journal gets them as `internal`).
    const check = (ok: boolean, name: string, detail: string, internal: string) => c.check(ok, name, detail, { internal });
    check(node.tpm === "1.2", "node.tpm", "the node approving this EK is not recorded with a TPM 1.2; use the TPM 2.0 protocol", `recorded TPM: ${node.tpm}`);
    check(
      (TPM12_MODES as readonly string[]).includes(req.claims.mode),
      "tpm12.mode",
      `a TPM 1.2 machine attests only for intake or wipe; ${req.claims.mode} needs a TPM 2.0 (fleetd issues no LDevID, LAK, install code or Talos config to a TPM 1.2)`,
      `claimed mode: ${req.claims.mode}`,
    );
    for (const u of node.unattributed) {
      check(false, `attribution.${u.code}`, "a node field this attestation relies on was not written by the account that owns it; an operator must re-apply the inventory", u.reason);
    }
    // A TPM 1.2 has one EK: the node must approve exactly this one.
    for (const a of node.ekBindings) c.check(a.binding === binding, "ek.missing", `approved ${a.alg} EK ${a.binding} was not presented`);
    const approval = node.ekBindings.find((a) => a.binding === binding);
    if (approval?.chain) {
      if (c.check(req.ek.certificate !== undefined, "ek.certificate", `EK ${binding} has no certificate but the node requires a manufacturer chain`)) {
        try {
          const cert = readCertificate(req.ek.certificate as Uint8Array).cert;
          c.check(ekBindingFromCertificate(cert) === binding, "ek.certificateKey", `EK ${binding}: the certificate certifies another key`);
          const v = verifyEkCertificate(cert, ctx.ekRoots, { allowExpired: ctx.settings.allowExpiredEkCertificates, at: now });
          for (const r of v.reasons) c.fail(`ek.chain.${r.check}`, `EK ${binding}: ${r.detail}`);
        } catch (e) {
          c.fail("ek.certificate", `EK ${binding}: ${(e as Error).message}`);
        }
      }
    }
    check(req.claims.serial === node.serial, "claims.serial", `the claimed serial ${req.claims.serial} is not the node's`, `recorded serial: ${node.serial}`);
    if (node.uuid) {
      check(uuidEqual(req.claims.uuid, node.uuid), "claims.uuid", `the claimed UUID ${req.claims.uuid} is not the one recorded at the node's first attestation`, `recorded UUID: ${node.uuid}`);
    }
    for (const r of verifyIdentityBinding(aik, req.aik.pubkey, req.aik.identityBinding).reasons) c.fail(`aik.${r.check}`, r.detail);
    if (!c.ok) return c.reasons;
    return ctx.workflows.check(node, req.claims);
  });
  if (!decided) {
    const kept = await ctx.store.recordPendingEk({ binding, serial: req.claims.serial, macs: req.claims.macs, sourceAddress }, now.getTime(), ctx.settings.maxPendingEks);
    throw new Refused(403, "pending", [
      kept
        ? { check: "ek.unknown", detail: `no node approves TPM 1.2 EK ${binding}; listed as pending for an operator` }
        : { check: "ek.unknown", detail: "no node approves the presented EK, and the pending list is full: an operator must clear it (`fleetd pending`) before this machine is listed" },
    ]);
  }
  const node: Node = decided.node;
  const ref = { deviceId: node.deviceId, name: node.name };
  if (decided.reasons.length > 0) throw new Refused(403, "refused", decided.reasons, ref);

  // A fresh AIK (its TPM_PUBKEY's SHA-256, in the same table as TPM 2.0 AK Names, with a prefix of its own).
  const aikId = `tpm12:${hex(sha256(req.aik.pubkey))}`;
  if (!(await ctx.store.recordAkName(aikId, node.deviceId, now.getTime()))) {
    // The same challenge again (the machine did not see the answer): the session it opened, as it was answered.
    const prior = await ctx.store.sessionByAkName(aikId);
    const kept = prior?.state === "challenged" ? replay<Tpm12ChallengeResponse>(answersOf(prior).challenge, request, prior.node) : undefined;
    if (kept) return kept;
    throw new Refused(403, "refused", [{ check: "ak.reused", detail: `AIK ${aikId} was used before; every attestation needs a fresh AIK` }], ref);
  }

  const sessionId = hex(ctx.random(16));
  const nonce = ctx.random(32);
  const cred = makeIdentityCredential(ek.key, req.aik.pubkey, { random: ctx.random });
  const expiresAt = now.getTime() + ctx.settings.sessionTtlMs;
  const response: Tpm12ChallengeResponse = { sessionId, nonce: b64(nonce), expiresAt: new Date(expiresAt).toISOString(), credential: { ekBinding: binding, blob: b64(cred.blob) } };
  const ekChained = node.ekBindings.filter((a) => a.chain).map((a) => a.binding);
  const data = { tpm: "1.2", claims: req.claims, sourceAddress, firstEkPublic: hex(req.ek.pubkey), ekChained, answers: { challenge: { request, response } } };
  await ctx.store.createSession({
    id: sessionId,
    node: ref,
    mode: req.claims.mode,
    nonce: hex(nonce),
    claimsHash: hex(claimsHash(req.claims)),
    akName: aikId,
    akPublic: hex(req.aik.pubkey),
    secretHashes: [hex(sha256(cred.secret))],
    ekBindings: [binding],
    data: data as unknown as Record<string, unknown>,
    state: "challenged",
    createdAt: now.getTime(),
    expiresAt,
  });
  return response;
}

export function evidence12(ctx: ServerContext, ev: Tpm12Evidence, request: string): Promise<Tpm12EvidenceResponse> {
  return withEvidenceSession(
    ctx,
    ev.sessionId,
    request,
    "tpm12-evidence",
    (session) => (isTpm12Session(session.data) ? undefined : { check: "session.tpm", detail: "this session was opened by the TPM 2.0 challenge; send its evidence there" }),
    (s, now) => judge12(ctx, ev, s, now),
  );
}

async function judge12(ctx: ServerContext, ev: Tpm12Evidence, s: ClaimedStep, now: Date): Promise<Tpm12EvidenceResponse> {
  const session = s.session;
  const data = session.data as unknown as Tpm12SessionData;
  const c = new Checks();
  const [secretHash] = session.secretHashes;
  const activated = secretHash !== undefined && ctEqual(sha256(ev.secret), fromHex(secretHash));
  c.check(activated, "activation.secret", `the secret for approved EK ${session.ekBindings[0] ?? "?"} was not recovered: the AIK is not in the TPM holding that EK`);

  const aik = checkAikPubkey(decodePubkey(fromHex(session.akPublic)));
  const q = verifyQuote12({
    aik,
    pcrComposite: ev.quote.pcrComposite,
    signature: ev.quote.signature,
    expectedExternalData: quoteExternalData12(fromHex(session.nonce), session.id, fromHex(session.claimsHash)),
  });
  for (const r of q.reasons) c.fail(r.check, r.detail);
  const profile = ctx.settings.tpm12Profile ?? DEFAULT_TPM12_PROFILE;
  if (q.verdict === "pass" && q.pcrs) {
    const mb = await ctx.measuredBoot.evaluate(profile, ev.eventLog, q.pcrs, "1.2");
    for (const r of mb.reasons) c.fail(`policy.${r.check}`, r.detail, { ...(r.pcr !== undefined ? { pcr: r.pcr } : {}), ...(r.event !== undefined ? { event: r.event } : {}) });
  }
  if (!activated) return s.refuse(new Refused(403, "refused", c.reasons, session.node), "evidenced");
  if (!c.ok) {
    s.effects.attestation(session.node, { verdict: "fail", at: now });
    return s.refuse(new Refused(403, "refused", c.reasons, session.node, true), "evidenced");
  }

  // The gates check the TPM family against the session's variant (gate.tpm: still recorded with a TPM 1.2).
  const node = await spendingRefusals(s, "evidenced", () => freshGates(ctx, session, data.claims));

  s.effects.attestation(session.node, passRecord(data.claims, node, now));
  s.effects.journal(session.node, {
    kind: "success",
    summary: `${session.mode} (TPM 1.2): TPM evidence passed (EK ${binding12(session.ekBindings)}, profile ${profile}); nothing issued (a TPM 1.2 machine gets no LDevID, LAK, install code or Talos config)`,
  });
  const response: Tpm12EvidenceResponse = { verdict: "pass", issued: "none" };
  await s.commit("evidenced", session.data, { response });
  return response;
}

function binding12(bindings: string[]): string {
  return (bindings[0] ?? "?").slice(0, 12);
}
