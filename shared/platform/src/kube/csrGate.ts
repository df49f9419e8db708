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
 *   (kubelet adds it for RSA keys only; it has no meaning for an EC key). Duplicates are refused;
 * - no other undecided CSR of the same token was created in the same second (`csr.token.contested`).
 *
 * Order (`judgementOrder`): CSRs are judged in creation order — the API server's `creationTimestamp`, which
 * the requester cannot choose — never by name, so a holder of a leaked token gains nothing by naming a CSR to
 * sort before the kubelet's. The requested public key cannot decide instead: the kubelet makes its key on the
 * node, and nothing fleetd verified names it beforehand. A token is single-use, so the first well-formed CSR
 * wins; since `creationTimestamp` has one-second resolution, CSRs of one token created in the same second are
 * indistinguishable and are all denied (the token is not spent: the kubelet's next CSR can still succeed). A
 * leaked token used before the kubelet's CSR still wins — which is why tokens are single-use, short-lived and
 * delivered only in the one-time config.
 *
 * Journal budget (`JournalBudget`): a token holder can create CSRs as fast as the API server takes them, and
 * each denial is journalled; per token, only the first few denials in a window are, the last of them saying
 * that further ones are only logged and counted.
 */
import { z } from "zod";
import { Checks, type Reason } from "@fleetd/verify/attest";
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

/**
 * Judge a CSR the gate owns, given what fleetd rendered for its token (looked up by the caller) and the other
 * CSRs of the same token created in the same second (`judgementOrder`), if any.
 */
export function judgeBootstrapCsr(csr: CsrObject, tokenId: string, rendered: RenderedToken | undefined, now: Date, contestedWith: readonly string[] = []): CsrDecision {
  const name = csr.metadata.name;
  const c = new Checks();
  c.check(contestedWith.length === 0, "csr.token.contested", `bootstrap token ${tokenId} also requested ${contestedWith.join(", ")} in the same second; which one the kubelet made cannot be told, so neither is approved`);
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

/** The metadata the order needs (client-node gives creationTimestamp as a Date; JSON as RFC 3339 text). */
interface Created {
  metadata?: { name?: string; creationTimestamp?: Date | string };
  spec?: { signerName?: string; username?: string };
  status?: CsrObject["status"];
}

const createdMs = (c: Created): number => {
  const t = c.metadata?.creationTimestamp;
  const ms = t instanceof Date ? t.getTime() : typeof t === "string" ? Date.parse(t) : Number.NaN;
  return Number.isNaN(ms) ? Number.POSITIVE_INFINITY : ms; // no timestamp: judged last
};

/**
 * CSRs in the order the gate judges them: creation time, then name only to make the order total (a tie within
 * one token is contested, below). `contested` maps each CSR the gate owns to the other
 * undecided CSRs of the same token created in the same second.
 */
export function judgementOrder<T extends Created>(items: readonly T[]): { order: T[]; contested: Map<string, string[]> } {
  const order = [...items].sort((a, b) => createdMs(a) - createdMs(b) || (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""));
  const byTokenSecond = new Map<string, string[]>();
  for (const c of order) {
    const parsed = CsrObject.safeParse(c);
    if (!parsed.success) continue;
    const scope = gateScope(parsed.data);
    if ("why" in scope) continue;
    const key = `${scope.tokenId}\0${Math.floor(createdMs(c) / 1000)}`;
    byTokenSecond.set(key, [...(byTokenSecond.get(key) ?? []), parsed.data.metadata.name]);
  }
  const contested = new Map<string, string[]>();
  for (const names of byTokenSecond.values()) {
    if (names.length < 2) continue;
    for (const n of names) contested.set(n, names.filter((x) => x !== n));
  }
  return { order, contested };
}

/**
 * How many denials per bootstrap token are journalled in a window: the first `perWindow`, the last of them
 * marked as such ("last"); the rest are only logged and counted ("quiet") until the window has passed. Keys are
 * bootstrap token ids (an API-server-authenticated identity); at most `maxKeys` are tracked, the oldest
 * forgotten first.
 */
export class JournalBudget {
  private readonly seen = new Map<string, { since: number; count: number }>();
  constructor(
    readonly perWindow = 5,
    readonly windowMs = 3_600_000,
    private readonly maxKeys = 10_000,
  ) {}

  take(key: string, nowMs: number): "journal" | "last" | "quiet" {
    let e = this.seen.get(key);
    if (!e || nowMs - e.since >= this.windowMs) {
      this.seen.delete(key);
      e = { since: nowMs, count: 0 };
      this.seen.set(key, e);
      if (this.seen.size > this.maxKeys) this.seen.delete(this.seen.keys().next().value as string);
    }
    e.count++;
    if (e.count < this.perWindow) return "journal";
    return e.count === this.perWindow ? "last" : "quiet";
  }
}
