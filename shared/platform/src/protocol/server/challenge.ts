/**
 * Step 1 — challenge (attestation-protocol.md "Messages" 1). Find the node by the EKs the machine presents,
 * prove nothing yet, but make sure every approved EK is here and chains to its manufacturer, then wrap one
 * independent secret per approved EK to Name(AK) and open a session with a single-use nonce.
 */
import { createHash } from "node:crypto";
import { checkKeyAttributes, AK_POLICY, Checks, type Reason } from "@fleetd/verify/attest";
import { ParseError } from "@fleetd/verify/codec";
import { hex } from "@fleetd/verify/crypto";
import { makeCredential } from "@fleetd/verify/credential";
import { ekBindingFromTpmPublic, readCertificate, ekPublicMatchesCertificate, identifyEkTemplate, verifyEkCertificate } from "@fleetd/verify/ek";
import { readPublicArea, objectName, type TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { claimsHash } from "../bindings.js";
import type { ChallengeRequest, ChallengeResponse } from "../messages.js";
import { Refused, type ServerContext } from "./context.js";
import type { Node } from "../../fleet/node.js";
import { answersOf, replay } from "./step.js";

interface PresentedEk {
  public: TPMT_PUBLIC;
  publicBytes: Uint8Array;
  binding: string;
  certificate?: Uint8Array;
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const sha256hex = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

function parsePublic(bytes: Uint8Array, what: string): { pub: TPMT_PUBLIC; tpmtBytes: Uint8Array } {
  try {
    return readPublicArea(bytes);
  } catch (e) {
    if (e instanceof ParseError) throw new Refused(400, "bad-request", [{ check: `${what}.parse`, detail: e.message }]);
    throw e;
  }
}

export async function challenge(ctx: ServerContext, req: ChallengeRequest, sourceAddress: string, request: string): Promise<ChallengeResponse> {
  const now = ctx.now();
  // Parse everything presented before looking anything up.
  const eks: PresentedEk[] = req.eks.map((e, i) => {
    const { pub, tpmtBytes } = parsePublic(e.public, `eks[${i}].public`);
    let binding: string;
    try {
      binding = ekBindingFromTpmPublic(pub);
    } catch (err) {
      throw new Refused(400, "bad-request", [{ check: `eks[${i}].key`, detail: (err as Error).message }]);
    }
    return { public: pub, publicBytes: tpmtBytes, binding, ...(e.certificate ? { certificate: e.certificate } : {}) };
  });
  const ak = parsePublic(req.akPublic, "akPublic");
  const akName = objectName(ak.tpmtBytes);

  // Find the node by binding. Bindings are unique across the inventory, so the first match is the node; other
  // presented EKs matter only if the node approves them (secrets are wrapped to approved EKs alone).
  let approved: PresentedEk[] = [];
  const decided = await decideOnIndex(ctx, eks.map((e) => e.binding), async (node) => {
    const c = new Checks();
    approved = [];
    // Until the activation secrets come back, the caller has shown nothing but public EK material: the reasons it
    // is told name no inventory value (name, serial, UUID, TPM family); the journal gets them as `internal`.
    const check = (ok: boolean, name: string, detail: string, internal: string) => c.check(ok, name, detail, { internal });
    check(node.tpm === "2.0", "node.tpm", "the node approving this EK is not recorded with a TPM 2.0; attestation needs TPM 2.0", `recorded TPM: ${node.tpm}`);
    for (const u of node.unattributed) {
      check(false, `attribution.${u.code}`, "a node field this attestation relies on was not written by the account that owns it; an operator must re-apply the inventory", u.reason);
    }

    // Every approved EK must be presented; with chain, its certificate must chain to the manufacturer store.
    for (const a of node.ekBindings) {
      const ek = eks.find((e) => e.binding === a.binding);
      if (!c.check(ek !== undefined, "ek.missing", `approved ${a.alg} EK ${a.binding} was not presented`)) continue;
      if (!ek) continue;
      approved.push(ek);
      const tmpl = identifyEkTemplate(ek.public);
      c.check(tmpl.ok, "ek.template", tmpl.ok ? "" : `EK ${a.binding} does not match a known EK template (${tmpl.detail})`);
      if (!a.chain) continue;
      if (!c.check(ek.certificate !== undefined, "ek.certificate", `EK ${a.binding} has no certificate but the node requires a manufacturer chain`)) continue;
      try {
        const cert = readCertificate(ek.certificate as Uint8Array).cert;
        const match = ekPublicMatchesCertificate(ek.public, cert);
        c.check(match.ok, "ek.certificateKey", match.ok ? "" : `EK ${a.binding}: ${match.detail}`);
        const v = verifyEkCertificate(cert, ctx.ekRoots, { allowExpired: ctx.settings.allowExpiredEkCertificates, at: now });
        for (const r of v.reasons) c.fail(`ek.chain.${r.check}`, `EK ${a.binding}: ${r.detail}`);
      } catch (e) {
        c.fail("ek.certificate", `EK ${a.binding}: ${(e as Error).message}`);
      }
    }

    // Claims the inventory can check now. The UUID recorded at the first pass is required from then on (compared
    // in both byte orders: SMBIOS stores the first three fields little-endian and tools disagree on how to print
    // them); the claimed values are the caller's own and may be echoed, the recorded ones may not.
    check(req.claims.serial === node.serial, "claims.serial", `the claimed serial ${req.claims.serial} is not the node's`, `recorded serial: ${node.serial}`);
    if (node.uuid) {
      check(uuidEqual(req.claims.uuid, node.uuid), "claims.uuid", `the claimed UUID ${req.claims.uuid} is not the one recorded at the node's first attestation`, `recorded UUID: ${node.uuid}`);
    }
    checkKeyAttributes(c, "ak", ak.pub, AK_POLICY);
    if (!c.ok) return c.reasons;
    // The mode and Workflow are the machine's claims: Tinkerbell must hold that Workflow for this node and mode.
    return ctx.workflows.check(node, req.claims);
  });
  if (!decided) {
    let full = false;
    for (const ek of eks) {
      const kept = await ctx.store.recordPendingEk({ binding: ek.binding, serial: req.claims.serial, macs: req.claims.macs, sourceAddress }, now.getTime(), ctx.settings.maxPendingEks);
      full ||= !kept;
    }
    throw new Refused(403, "pending", [
      full
        ? { check: "ek.unknown", detail: "no node approves the presented EKs, and the pending list is full: an operator must clear it (`fleetd pending`) before this machine is listed" }
        : { check: "ek.unknown", detail: `no node approves EK ${eks.map((e) => e.binding).join(", ")}; listed as pending for an operator` },
    ]);
  }
  const node: Node = decided.node;
  const ref = { deviceId: node.deviceId, name: node.name };
  if (decided.reasons.length > 0) throw new Refused(403, "refused", decided.reasons, ref);

  // A fresh AK: an AK Name seen before is refused (recorded atomically, so two sessions cannot share one).
  if (!(await ctx.store.recordAkName(hex(akName), node.deviceId, now.getTime()))) {
    // The same challenge again (the machine did not see the answer): the session it opened, as it was answered.
    const prior = await ctx.store.sessionByAkName(hex(akName));
    const kept = prior?.state === "challenged" ? replay<ChallengeResponse>(answersOf(prior).challenge, request, prior.node) : undefined;
    if (kept) return kept;
    throw new Refused(403, "refused", [{ check: "ak.reused", detail: `AK ${hex(akName)} was used before; every attestation needs a fresh AK` }], ref);
  }

  const sessionId = hex(ctx.random(16));
  const nonce = ctx.random(32);
  const secrets = approved.map(() => ctx.random(32));
  const credentials = approved.map((ek, i) => {
    const cred = makeCredential(ek.public, akName, secrets[i] as Uint8Array);
    return { ekBinding: ek.binding, idObject: b64(cred.idObject), encryptedSecret: b64(cred.encryptedSecret) };
  });
  const expiresAt = now.getTime() + ctx.settings.sessionTtlMs;
  const response: ChallengeResponse = { sessionId, nonce: b64(nonce), expiresAt: new Date(expiresAt).toISOString(), credentials };
  await ctx.store.createSession({
    id: sessionId,
    node: ref,
    mode: req.claims.mode,
    nonce: hex(nonce),
    claimsHash: hex(claimsHash(req.claims)),
    akName: hex(akName),
    akPublic: hex(ak.tpmtBytes),
    secretHashes: secrets.map(sha256hex),
    ekBindings: approved.map((e) => e.binding),
    data: {
      claims: req.claims,
      sourceAddress,
      firstEkPublic: hex((approved[0] as PresentedEk).publicBytes),
      // What the gates re-check of this challenge's decision (evidence.ts challengedWith).
      ekChained: node.ekBindings.filter((a) => a.chain).map((a) => a.binding),
      answers: { challenge: { request, response } },
    },
    state: "challenged",
    createdAt: now.getTime(),
    expiresAt,
  });
  return response;
}

/**
 * The node approving one of `bindings` (the first found) and the reasons `judge` refuses it for ([]: none),
 * decided on the EK-binding index — no NetBox request when the index holds a read of the node — and, when that
 * finds a reason to refuse, once more on the node as NetBox holds it now: a refusal is never made on what the
 * index held. A pass on the index's node is safe because the gates read the device again before anything is
 * signed or released, and check everything the challenge relied on (evidence.ts checkGates).
 * undefined: no node approves any of them.
 */
export async function decideOnIndex(ctx: ServerContext, bindings: readonly string[], judge: (node: Node) => Promise<Reason[]>): Promise<{ node: Node; reasons: Reason[] } | undefined> {
  const find = async (fresh: boolean) => {
    for (const b of bindings) {
      const n = await ctx.inventory.findByEkBinding(b, { fresh });
      if (n) return n;
    }
    return undefined;
  };
  const indexed = await find(false);
  if (!indexed) return undefined;
  const reasons = await judge(indexed);
  if (reasons.length === 0) return { node: indexed, reasons };
  const now = await find(true);
  return now ? { node: now, reasons: await judge(now) } : undefined;
}

export function uuidEqual(a: string, b: string): boolean {
  const norm = (u: string) => u.toLowerCase().replace(/-/g, "");
  const swap = (h: string) => {
    const le = (s: string) => (s.match(/../g) ?? []).reverse().join("");
    return le(h.slice(0, 8)) + le(h.slice(8, 12)) + le(h.slice(12, 16)) + h.slice(16);
  };
  const x = norm(a);
  const y = norm(b);
  return x === y || swap(x) === y;
}
