/**
 * Step 4 — confirm (attestation-protocol.md "Messages" 4). The machine signs the confirm digest with the LDevID
 * it was just issued: proof that the certified key is usable in this TPM. Single use (the session is claimed,
 * and spent only by the commit that records what it released: step.ts). intake → admission; provision → the
 * install code, 32 random bytes wrapped by MakeCredential to the first approved EK for Name(AK); only
 * SHA-256(code) is stored, with the one-time config sealed to the code, in the same commit as the session.
 */
import { createHash } from "node:crypto";
import { Checks, verifyTpmSignature } from "@fleetd/verify/attest";
import { decodeExact, ParseError } from "@fleetd/verify/codec";
import { fromHex, sealConfig } from "@fleetd/verify/crypto";
import { makeCredential } from "@fleetd/verify/credential";
import { TPMT_PUBLIC, TPMT_SIGNATURE } from "@fleetd/verify/tpm";
import { certificateToPem } from "@fleetd/verify/x509";
import { confirmMessage } from "../bindings.js";
import type { Confirm, ConfirmResponse } from "../messages.js";
import { Refused, type ServerContext } from "./context.js";
import type { SessionRecord } from "../../state/store.js";
import type { Node } from "../../fleet/node.js";
import { type EvidenceSessionData, freshGates, spendingRefusals } from "./evidence.js";
import { failpoint } from "../../outage/failpoint.js";
import { outageOf } from "../../outage/outage.js";
import { StepEffects } from "../../outbox/effects.js";
import { type ClaimedStep, DEFAULT_CLAIM_STALE_MS, withClaim } from "./step.js";

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

export function confirm(ctx: ServerContext, req: Confirm, request: string): Promise<ConfirmResponse> {
  return withClaim(
    ctx,
    {
      sessionId: req.sessionId,
      name: "confirm",
      from: "evidenced",
      request,
      moved: confirmMoved("accepted evidence"),
    },
    (s) => confirmClaimed(ctx, req, s),
  );
}

async function confirmClaimed(ctx: ServerContext, req: Confirm, s: ClaimedStep): Promise<ConfirmResponse> {
  const now = ctx.now();
  const session = s.session;
  const data = session.data as unknown as EvidenceSessionData;
  if (session.data["renew"] !== undefined) {
    throw new Refused(409, "refused", [{ check: "session.kind", detail: "this session was opened by the renewal challenge; send its confirm to /v1/renew/confirm" }], session.node);
  }
  if (!data.ldevidCertificate || !data.lakCertificate || !data.ldevidPublic) {
    throw new Refused(409, "refused", [{ check: "confirm.state", detail: `nothing was issued in this ${session.mode} session, so there is nothing to confirm` }], session.node);
  }
  const ldevidPublic = data.ldevidPublic;
  const ldevidCert = fromHex(data.ldevidCertificate);
  const lakCert = fromHex(data.lakCertificate);
  const message = confirmMessage(session.id, ldevidCert, lakCert);
  const c = new Checks();
  let sig;
  try {
    sig = decodeExact(TPMT_SIGNATURE, req.signature);
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
    throw new Refused(400, "bad-request", [{ check: "confirm.signature.parse", detail: e.message }], session.node);
  }
  const ldevid = decodeExact(TPMT_PUBLIC, fromHex(ldevidPublic));
  // TPM2_Sign over SHA-256(message) is a SHA-256 signature over the message; the LDevID's scheme fixes the hash.
  // A wrong signature spends nothing (only the holder of the LDevID can confirm; anyone may try).
  verifyTpmSignature(c, "confirm.signature", ldevid, message, sig);
  if (!c.ok) throw new Refused(403, "refused", c.reasons, session.node);

  // The gates again, on a fresh read: the install code (and admission) is released here, and an operator may
  // have moved the device (e.g. to decommissioning) or changed desired_action since the evidence. A refusal
  // spends the session (the stricter choice); an outage does not.
  const node = await spendingRefusals(s, "confirmed", () => freshGates(ctx, session, data.claims));
  const ref = session.node;

  if (session.mode === "intake") {
    // the admission's journal entry (its outcome, failed or not) is committed with the step and delivered with its entries
    await ctx.admission.admit(node, { macs: data.claims.macs, uuid: data.claims.uuid }, s.effects.journalOf(ref));
    s.effects.journal(ref, { kind: "success", summary: "intake confirmed by the new LDevID; admission requested (provision workflow)" });
    const response: ConfirmResponse = { mode: "intake" };
    await s.commit("confirmed", session.data, { response });
    return response;
  }
  if (session.mode === "provision") {
    // One provision confirm per node at a time (every replica shares the store): two concurrent ones would each
    // create a bootstrap token and store a code, leaving one token valid that no stored record names.
    // A request's lock (`lock:` keys): it ends with the request, with the claim staleness if its process died,
    // or at once when a single server starts again (releaseAllClaims).
    const lock = `lock:provision:${ref.deviceId}`;
    const window = ctx.settings.claimStaleMs ?? DEFAULT_CLAIM_STALE_MS;
    if (!(await ctx.store.chargeLimit(lock, now.getTime(), window, 1)).allowed) {
      await ctx.store.refundLimit(lock, now.getTime(), window);
      throw new Refused(409, "refused", [{ check: "confirm.concurrent", detail: "another provision confirm of this node is in progress; nothing was released" }], ref, true);
    }
    try {
      return await releaseInstallCode(ctx, s, data, node, ldevidCert, ldevidPublic, now);
    } finally {
      await ctx.store.refundLimit(lock, now.getTime(), window);
    }
  }
  s.effects.journal(ref, { kind: "success", summary: `${session.mode} confirmed` });
  const response: ConfirmResponse = { mode: session.mode };
  await s.commit("confirmed", session.data, { response });
  return response;
}

/**
 * provision: render the config, create its bootstrap token, and commit SHA-256(code) with the sealed config, the
 * token, the staged status and the journal entry with the session; the code goes to the TPM wrapped to its EK.
 */
async function releaseInstallCode(ctx: ServerContext, s: ClaimedStep, data: EvidenceSessionData, node: Node, ldevidCert: Uint8Array, ldevidPublic: string, now: Date): Promise<ConfirmResponse> {
  const session = s.session;
  const ref = session.node;
  const code = ctx.random(32);
  const ek = decodeExact(TPMT_PUBLIC, fromHex(data.firstEkPublic));
  const wrapped = makeCredential(ek, fromHex(session.akName), code);
  const chainPem = `${certificateToPem(ldevidCert)}${data.bundlePem ?? ""}`;
  const rendered = await ctx.renderer.render(node, {
    mac: data.claims.bootMac ?? (data.claims.macs[0] as string),
    chainPem,
    ldevidPublic: fromHex(ldevidPublic),
    ldevidPrivate: fromHex(data.ldevidPrivate ?? ""),
    lakPublic: fromHex(data.lakPublic ?? ""),
    lakPrivate: fromHex(data.lakPrivate ?? ""),
    // the node agent presents it at every runtime attestation (tink-action renew; SEED_FILES.lakCertPem)
    lakCertPem: certificateToPem(fromHex(data.lakCertificate ?? "")),
  });
  // A worker's token Secret exists before the config can be fetched; if it cannot be created, no install code
  // (fail closed). A re-provision retires the node's previous token. A control plane's Secret is Talos's own:
  // Talos creates `bootstrap-token-<id>` from the control plane's cluster.token (research/talos.md §5), and
  // before the first control plane boots there is no cluster to create it in, so fleetd creates and deletes
  // none (it never owned one: the Secret Talos makes carries no fleetd label).
  const previous = await ctx.store.getBootstrapToken(ref.deviceId);
  const cancel: string[] = [];
  if (node.role === "worker") {
    // The Secret is made outside the store, so its clean-up is queued first (durably): it runs unless this
    // commit cancels it — a confirm that never completes leaves no valid token behind, even if the process dies.
    const cleanup = new StepEffects(`${session.id}:confirm-token:${s.claimer}`);
    const key = cleanup.compensation({ kind: "kube.deleteBootstrapToken", tokenId: rendered.bootstrapTokenId, unlessRecordedFor: ref.deviceId }, now.getTime() + (ctx.settings.claimStaleMs ?? DEFAULT_CLAIM_STALE_MS));
    await ctx.store.enqueue(cleanup.items, now.getTime());
    cancel.push(key);
    try {
      await ctx.bootstrapTokens.create(ref.name, rendered.bootstrapToken, rendered.tokenExpiresAt);
    } catch (e) {
      if (!outageOf(e)) {
        s.effects.journal(ref, { kind: "danger", summary: `provision failed closed: the bootstrap token Secret could not be created (${(e as Error).message}); no install code` });
        await ctx.store.enqueue(s.effects.items, now.getTime());
        // as a refusal's: NetBox hears of it before the machine does (the evidence's lingering entry goes with it)
        await ctx.outbox?.flush(ref.deviceId).catch(() => false);
        ctx.outbox?.kick();
      }
      throw e;
    }
    if (previous && previous.tokenId !== rendered.bootstrapTokenId) s.effects.cleanUp({ kind: "kube.deleteBootstrapToken", tokenId: previous.tokenId });
  }
  failpoint("confirm.afterToken");
  s.effects.status(ref, "staged", "provision confirmed, install code released");
  s.effects.journal(ref, { kind: "success", summary: `provision confirmed; install code wrapped to the TPM; Talos config rendered (bootstrap token ${rendered.bootstrapTokenId}); device staged` });
  const response: ConfirmResponse = { mode: "provision", installCode: { idObject: b64(wrapped.idObject), encryptedSecret: b64(wrapped.encryptedSecret) } };
  await s.commit("confirmed", session.data, { response }, {
    // One install code per node: an earlier session's undelivered code (and its config) is void now.
    installCode: {
      codeHash: createHash("sha256").update(code).digest("hex"),
      node: ref,
      uuid: data.claims.uuid,
      sourceAddress: data.sourceAddress,
      // sealed to the code: the store never holds the config's secrets in a form it could read (crypto/seal.ts)
      config: sealConfig(code, rendered.config, { deviceId: ref.deviceId, uuid: data.claims.uuid }, ctx.random(12)),
      expiresAt: now.getTime() + ctx.settings.installCodeTtlMs,
    },
    bootstrapToken: { node: ref, tokenId: rendered.bootstrapTokenId, expiresAt: rendered.tokenExpiresAt.getTime() },
    cancel,
  });
  return response;
}



/**
 * The refusal of a confirm whose session is not where a confirm can follow: a confirmed (or expired) session is a
 * replay — said so by name (the refusals test expects it) — anything else is out of order. `after`: what a
 * confirm follows (accepted evidence; a passing renewal).
 */
export function confirmMoved(after: string) {
  return (session: SessionRecord, why: "state" | "expired"): Refused =>
    session.state === "confirmed" || why === "expired"
      ? new Refused(409, "refused", [{ check: "confirm.replayed", detail: "this session was already confirmed or has expired; a confirm is single use" }], session.node)
      : new Refused(409, "refused", [{ check: "confirm.state", detail: `session is ${session.state}; a confirm follows ${after}, once` }], session.node);
}
