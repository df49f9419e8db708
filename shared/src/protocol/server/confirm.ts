/**
 * Step 4 — confirm (attestation-protocol.md "Messages" 4). The machine signs the confirm digest with the LDevID
 * it was just issued: proof that the certified key is usable in this TPM. Single use. intake → admission;
 * provision → the install code, 32 random bytes wrapped by MakeCredential to the first approved EK for Name(AK);
 * only SHA-256(code) is stored, with the rendered one-time config.
 */
import { createHash } from "node:crypto";
import { Checks } from "../../attest/verdict.js";
import { verifyTpmSignature } from "../../attest/verifySignature.js";
import { decodeExact, ParseError } from "../../codec/codec.js";
import { fromHex } from "../../crypto/hash.js";
import { makeCredential } from "../../credential/makeCredential.js";
import { TPMT_PUBLIC, TPMT_SIGNATURE } from "../../tpm/structures.js";
import { confirmMessage } from "../bindings.js";
import type { Confirm, ConfirmResponse } from "../messages.js";
import type { SessionRecord } from "../../state/store.js";
import { Refused, type ServerContext } from "./context.js";
import type { NodeRecord } from "./deps.js";
import { type EvidenceSessionData, freshGates } from "./evidence.js";
import { sealConfig } from "../../crypto/seal.js";
import { outageOf } from "../../outage/outage.js";

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

export async function confirm(ctx: ServerContext, req: Confirm): Promise<ConfirmResponse> {
  const now = ctx.now();
  const session = await ctx.store.getSession(req.sessionId);
  if (!session) throw new Refused(404, "expired", [{ check: "session.unknown", detail: "no such session (expired, used, or never issued)" }]);
  const data = session.data as unknown as EvidenceSessionData;
  if (session.state === "confirmed") {
    // A confirm for a confirmed session is a replay: say so (it used to be reported as "confirm.state", which
    // hid the replay behind a generic state error; the refusals test expects the precise name).
    throw new Refused(409, "refused", [{ check: "confirm.replayed", detail: "this session was already confirmed; a confirm is single use" }], session.node);
  }
  if (session.state !== "evidenced") {
    throw new Refused(409, "refused", [{ check: "confirm.state", detail: `session is ${session.state}; a confirm follows accepted evidence, once` }], session.node);
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
  verifyTpmSignature(c, "confirm.signature", ldevid, message, sig);
  if (!c.ok) throw new Refused(403, "refused", c.reasons, session.node);
  // Single use: only one confirm moves the session on.
  if (!(await ctx.store.transitionSession(session.id, "evidenced", "confirmed", session.data, now.getTime()))) {
    throw new Refused(409, "refused", [{ check: "confirm.replayed", detail: "this session was already confirmed or has expired" }], session.node);
  }
  try {
    return await release(ctx, session, data, ldevidCert, ldevidPublic, now);
  } catch (e) {
    // A dependency outage: what this confirm began is undone (releaseInstallCode), and the session is
    // evidenced again, so the machine's retry of this same confirm succeeds once the dependency is back.
    if (outageOf(e)) await ctx.store.transitionSession(session.id, "confirmed", "evidenced", session.data, now.getTime());
    throw e;
  }
}

/** The confirmed session's release: the gates on a fresh read, then admission (intake) or the install code. */
async function release(ctx: ServerContext, session: SessionRecord, data: EvidenceSessionData, ldevidCert: Uint8Array, ldevidPublic: string, now: Date): Promise<ConfirmResponse> {
  // The gates again, on a fresh read: the install code (and admission) is released here, and an operator may
  // have moved the device (e.g. to decommissioning) or changed desired_action since the evidence. Before this,
  // only the node's existence was checked, so a device decommissioned between evidence and confirm still got
  // its install code. A refusal spends the session (the stricter choice); an outage does not.
  const node = await freshGates(ctx, session, data.claims);
  const ref = session.node;

  if (session.mode === "intake") {
    await ctx.admission.admit(node, { macs: data.claims.macs, uuid: data.claims.uuid });
    await ctx.journal.record(ref, { kind: "success", summary: "intake confirmed by the new LDevID; admission requested (provision workflow)" });
    return { mode: "intake" };
  }
  if (session.mode === "provision") {
    // One provision confirm per node at a time (every replica shares the store): two concurrent ones would each
    // create a bootstrap token and store a code, leaving one token valid that no stored record names.
    const lock = `provision:${ref.deviceId}`;
    if (!(await ctx.store.chargeLimit(lock, now.getTime(), 120_000, 1)).allowed) {
      await ctx.store.refundLimit(lock, now.getTime(), 120_000);
      throw new Refused(409, "refused", [{ check: "confirm.concurrent", detail: "another provision confirm of this node is in progress; nothing was released" }], ref, true);
    }
    try {
      return await releaseInstallCode(ctx, session, data, node, ldevidCert, ldevidPublic, now);
    } finally {
      await ctx.store.refundLimit(lock, now.getTime(), 120_000);
    }
  }
  await ctx.journal.record(ref, { kind: "success", summary: `${session.mode} confirmed` });
  return { mode: session.mode };
}

/** provision: render the config, create its bootstrap token, store SHA-256(code) with it, wrap the code to the TPM. */
async function releaseInstallCode(ctx: ServerContext, session: SessionRecord, data: EvidenceSessionData, node: NodeRecord, ldevidCert: Uint8Array, ldevidPublic: string, now: Date): Promise<ConfirmResponse> {
  const ref = session.node;
  const code = ctx.random(32);
  const ek = decodeExact(TPMT_PUBLIC, fromHex(data.firstEkPublic));
  const wrapped = makeCredential(ek, fromHex(session.akName), code);
  const chainPem = `${pem(ldevidCert)}${data.bundlePem ?? ""}`;
  const rendered = await ctx.renderer.render(node, {
    mac: data.claims.bootMac ?? (data.claims.macs[0] as string),
    chainPem,
    ldevidPublic: fromHex(ldevidPublic),
    ldevidPrivate: fromHex(data.ldevidPrivate ?? ""),
    lakPublic: fromHex(data.lakPublic ?? ""),
    lakPrivate: fromHex(data.lakPrivate ?? ""),
  });
  // A worker's token Secret exists before the config can be fetched; if it cannot be created, no install code
  // (fail closed). A re-provision retires the node's previous token. A control plane's Secret is Talos's own:
  // Talos creates `bootstrap-token-<id>` from the control plane's cluster.token (research/talos.md §5), and
  // before the first control plane boots there is no cluster to create it in, so fleetd creates and deletes
  // none (it never owned one: the Secret Talos makes carries no fleetd label).
  const previous = await ctx.store.getBootstrapToken(ref.deviceId);
  // What this confirm created, undone in reverse if a dependency outage stops it before the machine has its
  // answer: no token, stored code or config outlives a confirm the machine never saw (its retry makes new ones).
  const undo: (() => Promise<unknown>)[] = [];
  try {
    if (node.role === "worker") {
      try {
        await ctx.bootstrapTokens.create(ref.name, rendered.bootstrapToken, rendered.tokenExpiresAt);
      } catch (e) {
        if (!outageOf(e)) await ctx.journal.record(ref, { kind: "danger", summary: `provision failed closed: the bootstrap token Secret could not be created (${(e as Error).message}); no install code` });
        throw e;
      }
      undo.push(() => ctx.bootstrapTokens.delete(rendered.bootstrapTokenId));
      if (previous && previous.tokenId !== rendered.bootstrapTokenId) await ctx.bootstrapTokens.delete(previous.tokenId);
    }
    await ctx.store.setBootstrapToken(ref, rendered.bootstrapTokenId, rendered.tokenExpiresAt.getTime());
    undo.push(() => ctx.store.deleteBootstrapToken(ref.deviceId));
    // One install code per node: an earlier session's undelivered code (and its config) is void now.
    await ctx.store.voidInstallCodes(ref.deviceId);
    undo.push(() => ctx.store.voidInstallCodes(ref.deviceId));
    await ctx.store.putInstallCode({
      codeHash: createHash("sha256").update(code).digest("hex"),
      node: ref,
      uuid: data.claims.uuid,
      sourceAddress: data.sourceAddress,
      // sealed to the code: the store never holds the config's secrets in a form it could read (crypto/seal.ts)
      config: sealConfig(code, rendered.config, { deviceId: ref.deviceId, uuid: data.claims.uuid }, ctx.random(12)),
      expiresAt: now.getTime() + ctx.settings.installCodeTtlMs,
    });
    await ctx.inventory.markStaged(ref);
    await ctx.journal.record(ref, { kind: "success", summary: `provision confirmed; install code wrapped to the TPM; Talos config rendered (bootstrap token ${rendered.bootstrapTokenId}); device staged` });
  } catch (e) {
    if (outageOf(e)) {
      // best effort, in reverse: a token Secret an outage keeps from being deleted still expires (and is
      // swept by the CSR gate); the store's undo is local and does not fail with NetBox
      for (const u of undo.reverse()) await u().catch(() => undefined);
    }
    throw e;
  }
  return { mode: "provision", installCode: { idObject: b64(wrapped.idObject), encryptedSecret: b64(wrapped.encryptedSecret) } };
}

function pem(der: Uint8Array): string {
  const body = Buffer.from(der).toString("base64").replace(/(.{64})/g, "$1\n").replace(/\n$/, "");
  return `-----BEGIN CERTIFICATE-----\n${body}\n-----END CERTIFICATE-----\n`;
}

