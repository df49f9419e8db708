/**
 * Step 2 — evidence, then step 3 — every gate, then issuance (attestation-protocol.md "Messages" 2–3).
 * The session is claimed first (its nonce is single use even if a check fails), every check runs, the inventory
 * is read again, and only when all of that holds are the MAC recorded and the LDevID and LAK certificates issued.
 */
import { createHash } from "node:crypto";
import { AK_POLICY, checkKeyAttributes, LDEVID_POLICY } from "../../attest/checkKeyAttributes.js";
import type { PcrValues } from "../../attest/pcrs.js";
import { Checks, type Reason } from "../../attest/verdict.js";
import { verifyCertify } from "../../attest/verifyCertify.js";
import { verifyQuote } from "../../attest/verifyQuote.js";
import { decodeExact } from "../../codec/codec.js";
import { ctEqual, fromHex, hex } from "../../crypto/hash.js";
import { CURVES, isCurve, TPM_ALG } from "../../tpm/constants.js";
import { TPMT_PUBLIC, type TPMT_PUBLIC as Public } from "../../tpm/structures.js";
import { certifyExtraData, quoteExtraData } from "../bindings.js";
import type { Claims, Evidence, EvidenceResponse } from "../messages.js";
import { Refused, type ServerContext } from "./context.js";
import type { NodeRecord } from "./deps.js";

const BANKS = { sha1: TPM_ALG.SHA1, sha256: TPM_ALG.SHA256, sha384: TPM_ALG.SHA384, sha512: TPM_ALG.SHA512 } as const;
const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");

export interface EvidenceSessionData {
  claims: Claims;
  sourceAddress: string;
  firstEkPublic: string;
  ldevidPublic?: string;
  lakPublic?: string;
  ldevidCertificate?: string;
  lakCertificate?: string;
  bundlePem?: string;
  ldevidPrivate?: string;
  lakPrivate?: string;
}

export async function evidence(ctx: ServerContext, ev: Evidence): Promise<EvidenceResponse> {
  const now = ctx.now();
  const session = await ctx.store.getSession(ev.sessionId);
  if (!session) throw new Refused(404, "expired", [{ check: "session.unknown", detail: "no such session (expired, used, or never issued)" }]);
  const data = session.data as unknown as EvidenceSessionData;
  // Claim the session: the nonce is spent whatever happens next.
  if (!(await ctx.store.transitionSession(session.id, "challenged", "evidenced", session.data, now.getTime()))) {
    throw new Refused(409, "refused", [{ check: "nonce.reused", detail: "this session's nonce was already used or has expired" }], session.node);
  }
  const c = new Checks();
  const nonce = fromHex(session.nonce);
  const ak = decodeExact(TPMT_PUBLIC, fromHex(session.akPublic));

  // Credential activation: every approved EK answered with its own secret.
  c.check(ev.secrets.length === session.secretHashes.length, "activation.count", `${ev.secrets.length} secrets for ${session.secretHashes.length} approved EKs`);
  session.secretHashes.forEach((h, i) => {
    const s = ev.secrets[i];
    const ok = s !== undefined && ctEqual(new Uint8Array(createHash("sha256").update(s).digest()), fromHex(h));
    c.check(ok, "activation.secret", `the secret for approved EK ${session.ekBindings[i] ?? i} was not recovered: the AK is not in the TPM holding that EK`);
  });

  // The quote, bound to this session's nonce and claims.
  const pcrs: PcrValues = new Map();
  for (const p of ev.quote.pcrs) {
    const bank = pcrs.get(BANKS[p.bank]) ?? new Map<number, Uint8Array>();
    pcrs.set(BANKS[p.bank], bank);
    // One value per (bank, PCR): a second one would silently replace the first (the schema cannot say this).
    c.check(!bank.has(p.pcr), "quote.pcrDuplicate", `${p.bank}:${p.pcr} is given more than once`, { pcr: p.pcr });
    bank.set(p.pcr, fromHex(p.value));
  }
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
  if (!c.ok || !ldevid || !lak) {
    await ctx.inventory.recordAttestation(session.node, { verdict: "fail", at: now });
    throw new Refused(403, "refused", c.reasons, session.node);
  }

  // Every gate, on a fresh read of the inventory, before anything is signed.
  const node = await ctx.inventory.reread(session.node);
  const gates = checkGates(ctx, node, session.node, session.mode, session.ekBindings, data.claims);
  if (gates.length > 0) throw new Refused(403, "refused", gates, session.node);
  const current = node as NodeRecord;

  const generation = await ctx.store.nextGeneration(current.name);
  const issued = await ctx.issuer.issue({ node: current.name, generation, ldevid, lak });
  for (const [kind, cert] of [["ldevid", issued.ldevid], ["lak", issued.lak]] as const) {
    await ctx.store.recordIssued({ serial: cert.serialHex, node: current.name, kind, generation, notAfter: cert.notAfter.getTime(), issuedAt: now.getTime() });
  }
  await ctx.inventory.recordAttestation(current.name, {
    verdict: "pass",
    at: now,
    macs: data.claims.macs,
    serial: data.claims.serial,
    uuid: data.claims.uuid,
    ldevid: { serial: issued.ldevid.serialHex, notAfter: issued.ldevid.notAfter },
  });
  const next: EvidenceSessionData = {
    ...data,
    ldevidPublic: hex(ev.ldevid.public),
    lakPublic: hex(ev.lak.public),
    ldevidPrivate: hex(ev.ldevid.private),
    lakPrivate: hex(ev.lak.private),
    ldevidCertificate: hex(issued.ldevid.der),
    lakCertificate: hex(issued.lak.der),
    bundlePem: issued.bundlePem,
  };
  await ctx.store.transitionSession(session.id, "evidenced", "evidenced", next as unknown as Record<string, unknown>, now.getTime());
  await ctx.journal.record(current.name, {
    kind: "success",
    summary: `${session.mode}: TPM evidence passed (EKs ${session.ekBindings.map((b) => b.slice(0, 12)).join(", ")}, profile ${ctx.settings.provisioningProfile}); LDevID g${generation} serial ${issued.ldevid.serialHex} issued`,
  });
  return { verdict: "pass", ldevidCertificate: b64(issued.ldevid.der), lakCertificate: b64(issued.lak.der), caBundle: issued.bundlePem };
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

/** The gates before anything is released (status, desired_action, EK set and its attribution, switch port); [] when all hold. */
export function checkGates(ctx: ServerContext, node: NodeRecord | undefined, name: string, mode: Claims["mode"], bindings: string[], claims: Claims): Reason[] {
  const c = new Checks();
  if (!node) return [{ check: "gate.node", detail: `${name} is no longer in the inventory` }];
  const allowed = ctx.settings.gates[mode];
  c.check(allowed.includes(node.status), "gate.status", `status ${node.status} does not allow ${mode} (allowed: ${allowed.join(", ")})`);
  c.check(node.desiredAction === null || node.desiredAction === mode, "gate.desiredAction", `desired_action is now ${node.desiredAction}, not ${mode}`);
  const now = node.ekBindings.map((b) => b.binding).sort().join(",");
  c.check(now === [...bindings].sort().join(","), "gate.ekSet", "the node's approved EK set changed since the challenge");
  c.check(node.ekBindingsAttributed, "gate.ekAttribution", "the EK bindings were changed by someone other than the inventory apply account");
  if (node.switchPort) {
    c.check(claims.lldp !== null, "gate.switchPort", `no LLDP seen on the boot interface; expected ${node.switchPort.device} ${node.switchPort.port}`);
    if (claims.lldp) {
      const ok = sameName(claims.lldp.chassisId, node.switchPort.device) && sameName(claims.lldp.portId, node.switchPort.port);
      c.check(ok, "gate.switchPort", `LLDP says ${claims.lldp.chassisId} ${claims.lldp.portId}; NetBox cables it to ${node.switchPort.device} ${node.switchPort.port}`);
    }
  }
  c.check(true, "gate", "");
  return c.reasons;
}

function sameName(a: string, b: string): boolean {
  return a.trim().toLowerCase() === b.trim().toLowerCase();
}
