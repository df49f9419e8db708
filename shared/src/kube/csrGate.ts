/**
 * The kubelet bootstrap CSR gate's judgement (pure: a CertificateSigningRequest object plus what fleetd
 * rendered for the token in, a decision with reasons out; the loop in talos-config-server applies it).
 *
 * Acts only on `kubernetes.io/kube-apiserver-client-kubelet` CSRs whose requester is a bootstrap token
 * (`spec.username: system:bootstrap:<token-id>`, set by the API server from the authenticated identity);
 * kubelet renewals (`system:node:*`), other requesters and other signers are left alone ("ignore"), as are
 * CSRs that already carry an Approved, Denied or Failed condition.
 *
 * Approve only when all hold, else deny with every failed check:
 * - the token id is one fleetd rendered (the state store's token → node record) and has not expired;
 * - `spec.request` is one PEM CERTIFICATE REQUEST, DER, whose self-signature verifies with its own key
 *   (EC P-256/P-384 or RSA ≥ 2048);
 * - subject: exactly one CN, `system:node:<the node the token was rendered for>`; O exactly [`system:nodes`];
 *   no other subject attribute;
 * - no SANs (DNS, IP, email, URI, other), no other requested extension, no other attribute;
 * - usages exactly what kubelet's bootstrap sends (k8s 1.36 pkg/kubelet/certificate/bootstrap/bootstrap.go
 *   `requestNodeCertificate`): {digital signature, client auth}, plus key encipherment only for an RSA key
 *   (kubelet adds it for RSA keys only; it has no meaning for an EC key). Duplicates are refused.
 */
import { z } from "zod";
import { Checks, type Reason } from "../attest/verdict.js";
import { CsrError, parseCsr, type ParsedCsr } from "./parseCsr.js";

export const KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet";
export const BOOTSTRAP_USER_PREFIX = "system:bootstrap:";
export const NODE_USER_PREFIX = "system:node:";
export const NODES_GROUP = "system:nodes";
export const KUBELET_USAGES = ["digital signature", "client auth"] as const;
export const KUBELET_RSA_EXTRA_USAGE = "key encipherment";
const TOKEN_ID = /^[a-z0-9]{6}$/;

/** The fields of a certificates.k8s.io/v1 CertificateSigningRequest the gate reads (checked at the boundary). */
export const CsrObject = z.object({
  metadata: z.object({ name: z.string().min(1), uid: z.string().optional(), resourceVersion: z.string().optional() }),
  spec: z.object({
    signerName: z.string(),
    /** base64 of the PEM text (the JSON form of a []byte). */
    request: z.string(),
    username: z.string().optional(),
    groups: z.array(z.string()).optional(),
    usages: z.array(z.string()).optional(),
  }),
  status: z
    .object({
      conditions: z.array(z.object({ type: z.string(), status: z.string().optional(), reason: z.string().optional(), message: z.string().optional() })).optional(),
      certificate: z.string().optional(),
    })
    .optional(),
});
export type CsrObject = z.infer<typeof CsrObject>;

/** What fleetd rendered for a token id (from the state store), or undefined when it rendered none. */
export interface RenderedToken {
  node: string;
  expiresAt: number;
}

export type CsrDecision =
  | { action: "ignore"; csr: string; why: string }
  | { action: "approve"; csr: string; tokenId: string; node: string; reasons: [] }
  | { action: "deny"; csr: string; tokenId: string; node?: string; reasons: Reason[] };

/** The condition that settles a CSR (Approved, Denied, Failed with status True), if any. */
export function decidedCondition(csr: CsrObject): string | undefined {
  return csr.status?.conditions?.find((c) => ["Approved", "Denied", "Failed"].includes(c.type) && (c.status ?? "True") === "True")?.type;
}

/** Which CSRs the gate owns: returns the bootstrap token id, or why the CSR is left alone. */
export function gateScope(csr: CsrObject): { tokenId: string } | { why: string } {
  if (csr.spec.signerName !== KUBELET_CLIENT_SIGNER) return { why: `signer ${csr.spec.signerName} is not ${KUBELET_CLIENT_SIGNER}` };
  const user = csr.spec.username ?? "";
  if (!user.startsWith(BOOTSTRAP_USER_PREFIX)) return { why: `requested by ${user || "(no username)"}, not a bootstrap token (renewals by system:node:* are kube-controller-manager's)` };
  const decided = decidedCondition(csr);
  if (decided) return { why: `already ${decided}` };
  return { tokenId: user.slice(BOOTSTRAP_USER_PREFIX.length) };
}

/** Judge a CSR the gate owns, given what fleetd rendered for its token (looked up by the caller). */
export function judgeBootstrapCsr(csr: CsrObject, tokenId: string, rendered: RenderedToken | undefined, now: Date): CsrDecision {
  const name = csr.metadata.name;
  const c = new Checks();
  c.check(TOKEN_ID.test(tokenId), "csr.token.id", `requester ${csr.spec.username} does not carry a bootstrap token id ([a-z0-9]{6})`);
  if (!rendered) {
    c.fail("csr.token.unknown", `bootstrap token ${tokenId} was not rendered by fleetd for any node, or was already used`);
  } else {
    c.check(now.getTime() < rendered.expiresAt, "csr.token.expired", `bootstrap token ${tokenId} (node ${rendered.node}) expired at ${new Date(rendered.expiresAt).toISOString()}`);
  }

  let parsed: ParsedCsr | undefined;
  try {
    parsed = parseCsr(Buffer.from(csr.spec.request, "base64"));
  } catch (e) {
    if (!(e instanceof CsrError)) throw e;
    c.fail(`csr.request.${e.code}`, e.message);
  }
  if (parsed) judgeRequest(c, parsed, rendered?.node, csr.spec.usages ?? []);

  const node = rendered?.node;
  if (c.ok && node !== undefined) return { action: "approve", csr: name, tokenId, node, reasons: [] };
  return { action: "deny", csr: name, tokenId, ...(node !== undefined ? { node } : {}), reasons: c.reasons };
}

function judgeRequest(c: Checks, p: ParsedCsr, node: string | undefined, usages: string[]): void {
  c.check(p.signatureValid, "csr.signature", `the request's self-signature (${p.signatureAlgorithm}) does not verify with its own ${p.key.detail} key`);
  const keyOk = p.key.detail === "EC prime256v1" || p.key.detail === "EC secp384r1" || (p.key.kind === "rsa" && Number(p.key.detail.slice(4)) >= 2048);
  c.check(keyOk, "csr.key", `key ${p.key.detail} is not EC P-256/P-384 or RSA ≥ 2048`);

  const cn = p.commonNames;
  if (node !== undefined) {
    const want = `${NODE_USER_PREFIX}${node}`;
    c.check(cn.length === 1 && cn[0] === want, "csr.subject.cn", `subject CN is ${cn.length === 0 ? "absent" : cn.map((v) => JSON.stringify(v)).join(", ")}; the token was rendered for ${JSON.stringify(want)}`);
  } else {
    c.check(cn.length === 1 && (cn[0] ?? "").startsWith(NODE_USER_PREFIX), "csr.subject.cn", `subject CN is ${cn.map((v) => JSON.stringify(v)).join(", ") || "absent"}; expected one system:node:<node>`);
  }
  const o = p.organizations;
  c.check(o.length === 1 && o[0] === NODES_GROUP, "csr.subject.o", `subject O is [${o.map((v) => JSON.stringify(v)).join(", ")}]; expected exactly ["${NODES_GROUP}"]`);
  const other = p.subject.filter((a) => a.oid !== "2.5.4.3" && a.oid !== "2.5.4.10");
  c.check(other.length === 0, "csr.subject.other", `subject carries attributes other than CN and O: ${other.map((a) => a.oid).join(", ")}`);

  const s = p.sans;
  c.check(s.dns.length === 0, "csr.san.dns", `requests DNS names ${s.dns.join(", ")}; a kubelet client certificate has none`);
  c.check(s.ip.length === 0, "csr.san.ip", `requests ${s.ip.length} IP address(es); a kubelet client certificate has none`);
  c.check(s.email.length === 0, "csr.san.email", `requests email addresses ${s.email.join(", ")}; a kubelet client certificate has none`);
  c.check(s.uri.length === 0, "csr.san.uri", `requests URIs ${s.uri.join(", ")}; a kubelet client certificate has none`);
  c.check(s.other === 0, "csr.san.other", `requests ${s.other} other subjectAltName entr(y/ies)`);
  c.check(p.otherExtensions.length === 0, "csr.extensions", `requests extensions ${p.otherExtensions.join(", ")}; kubelet requests none`);
  c.check(p.otherAttributes.length === 0, "csr.attributes", `carries attributes ${p.otherAttributes.join(", ")}; kubelet sends none`);

  const allowed = new Set<string>([...KUBELET_USAGES, ...(p.key.kind === "rsa" ? [KUBELET_RSA_EXTRA_USAGE] : [])]);
  const given = new Set(usages);
  const ok = given.size === usages.length && KUBELET_USAGES.every((u) => given.has(u)) && usages.every((u) => allowed.has(u));
  c.check(ok, "csr.usages", `usages are [${usages.join(", ")}]; expected exactly [${KUBELET_USAGES.join(", ")}]${p.key.kind === "rsa" ? ` (plus ${KUBELET_RSA_EXTRA_USAGE} for an RSA key)` : ""}`);
}
