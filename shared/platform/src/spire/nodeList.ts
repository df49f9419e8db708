/**
 * `spire-nodes.json`: the nodes fleetd vouches for to SPIRE, and the SPIRE node entries rendered from it. Pure
 * (node:crypto for fingerprints and digests, zod at the edge): netbox-script renders and publishes the list
 * (`renderNodeList`), spire-plugin reads it (`parseNodeList`) and renders the entries (`nodeEntries`).
 *
 * Eligibility (`nodeListEligibility`): NetBox status `active`; a current LDevID (recorded by the attestation
 * account, notAfter in the future); the installed OS passed a runtime attestation (`runtime.verdict === "pass"`:
 * the HookOS verdict alone is not enough). A control plane whose runtime verdict is `fail` stays listed iff the
 * site keeps failed control planes (`keepFailedControlPlanes`, default true) and it passed once (`lastPassAt`);
 * a failed worker is quarantined: not listed. A device whose name the change log does not attribute to the apply
 * account is not listed (its SPIFFE ID would be someone else's choice).
 *
 * The list is canonical: nodes sorted by name, keys in a fixed order, no timestamps of its own, so the same fleet
 * renders the same bytes (and digest) on every pass — republishing it changes nothing.
 *
 * CA fingerprints: the SHA-1 of every root (self-signed certificate) of fleetd's CA bundle — SPIRE's
 * `tpm_devid:ca:fingerprint:<sha1>` selector. SPIRE aliases a node only when ALL of an entry's selectors are
 * among the agent's, and an agent's chain ends in one root, so an entry carries one fingerprint: during a CA
 * rollover (two roots in the bundle) every node gets one entry per root, each with its CN, and the agent matches
 * the one its LDevID chains to; when the old root leaves the bundle its entries go at the next sync.
 */
import { createHash, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { z } from "zod";
import type { Node } from "../fleet/node.js";
import { certificatesFromPem } from "../pki/pem.js";
import { formatSpiffeId, serverId } from "./spiffeId.js";
import type { EntrySpec } from "./wire.js";

export const NODE_LIST_API_VERSION = "fleetd.io/spire-nodes/v1";
/** Most nodes a list may hold (a site of 10,000 nodes is the design size). */
export const NODE_LIST_MAX_NODES = 100_000;
/** Largest list accepted, bytes (10,000 nodes are about 2.5 MB). */
export const NODE_LIST_MAX_BYTES = 32 * 1024 * 1024;
/** Most roots (CA fingerprints) per list: one, two during a rollover. */
export const NODE_LIST_MAX_ROOTS = 4;

const NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const SHA1_HEX = /^[0-9a-f]{40}$/;
const TRUST_DOMAIN = /^[a-z0-9._-]{1,255}$/;
/** An LDevID subject CN as SPIRE puts it in a selector: printable, no ':' at the start, at most 64 characters (X.520 ub-common-name). */
const CN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const Iso = z.iso.datetime({ offset: true });

export const NodeListNode = z.strictObject({
  name: z.string().regex(NAME, "a node name (DNS label)"),
  spiffeId: z.string().max(2048),
  /** The current LDevID's subject CN (`<name>.g<generation>`). */
  cn: z.string().regex(CN, "an LDevID subject CN (letters, digits, '.', '_', '-'; at most 64)"),
  /** When the runtime verdict that makes it eligible was given. */
  verdictAt: Iso,
  verdict: z.enum(["pass", "fail"]),
  /** NetBox role: a control plane may be listed with a failed verdict (keepFailedControlPlanes). */
  role: z.enum(["worker", "control-plane"]),
  /** notAfter of the current LDevID. */
  ldevidNotAfter: Iso,
});
export type NodeListNode = z.infer<typeof NodeListNode>;

export const NodeList = z
  .strictObject({
    apiVersion: z.literal(NODE_LIST_API_VERSION),
    trustDomain: z.string().regex(TRUST_DOMAIN, "a SPIFFE trust domain"),
    /** SHA-1 (lowercase hex) of each root of fleetd's CA bundle, sorted. */
    caFingerprints: z.array(z.string().regex(SHA1_HEX, "a SHA-1 fingerprint (40 lowercase hex)")).min(1).max(NODE_LIST_MAX_ROOTS),
    nodes: z.array(NodeListNode).max(NODE_LIST_MAX_NODES),
  })
  .superRefine((l, ctx) => {
    if (new Set(l.caFingerprints).size !== l.caFingerprints.length) ctx.addIssue({ code: "custom", path: ["caFingerprints"], message: "a fingerprint is listed twice" });
    for (let i = 0; i < l.nodes.length; i++) {
      const n = l.nodes[i] as NodeListNode;
      if (i > 0 && !((l.nodes[i - 1] as NodeListNode).name < n.name)) ctx.addIssue({ code: "custom", path: ["nodes", i, "name"], message: "nodes must be sorted by name, each once" });
      if (n.spiffeId !== nodeSpiffeId(l.trustDomain, n.name)) ctx.addIssue({ code: "custom", path: ["nodes", i, "spiffeId"], message: `must be ${nodeSpiffeId(l.trustDomain, n.name)}` });
      if (!isLdevidCnOf(n.name, n.cn)) ctx.addIssue({ code: "custom", path: ["nodes", i, "cn"], message: `must be ${n.name}.g<generation> (an LDevID fleetd issued to this node)` });
    }
  });
export type NodeList = z.infer<typeof NodeList>;

/**
 * Whether `cn` is an LDevID CN fleetd issues to node `name`: `<name>.g<generation>`, generation a positive integer
 * without leading zeros (pki/names.ts). A list whose entry for node A names node B's CN would let B's TPM take A's
 * SPIFFE ID: whoever can write the list can only ever point a node at its own LDevIDs.
 */
export function isLdevidCnOf(name: string, cn: string): boolean {
  const prefix = `${name}.g`;
  return cn.startsWith(prefix) && /^[1-9][0-9]{0,15}$/.test(cn.slice(prefix.length));
}

export const NODE_LIST_ERROR_CODES = ["node-list-too-large", "node-list-not-json", "node-list-invalid", "node-list-wrong-trust-domain", "node-list-unknown-root"] as const;
export type NodeListErrorCode = (typeof NODE_LIST_ERROR_CODES)[number];

export class NodeListError extends Error {
  override readonly name = "NodeListError";
  constructor(
    readonly code: NodeListErrorCode,
    detail: string,
  ) {
    super(`spire-nodes.json: ${detail}`);
  }
}

/** `spiffe://<td>/node/<name>`. */
export function nodeSpiffeId(trustDomain: string, name: string): string {
  return formatSpiffeId({ trustDomain, path: `/node/${name}` });
}

/**
 * Canonical JSON: object keys sorted by code unit, no whitespace, one newline at the end. The list's bytes (and
 * so its digest) depend only on its content.
 */
export function canonicalJson(v: unknown): string {
  const walk = (x: unknown): unknown => {
    if (Array.isArray(x)) return x.map(walk);
    if (x !== null && typeof x === "object") {
      const o = x as Record<string, unknown>;
      return Object.fromEntries(
        Object.keys(o)
          .filter((k) => o[k] !== undefined)
          .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
          .map((k) => [k, walk(o[k])]),
      );
    }
    return x;
  };
  return `${JSON.stringify(walk(v))}\n`;
}

/** SHA-256 of the canonical bytes, `sha256:<hex>`: what the sync reports as applied and retirement waits for. */
export function nodeListDigest(list: NodeList): string {
  return `sha256:${createHash("sha256").update(canonicalJson(list)).digest("hex")}`;
}

/**
 * The roots of a CA bundle (PEM or DER certificates): its self-signed certificates, as SHA-1 of their DER
 * (lowercase hex), sorted. A bundle without a root is refused (SPIRE verifies chains to the bundle's anchors;
 * fleetd pins the root).
 */
export function rootFingerprints(bundle: readonly Uint8Array[]): string[] {
  const out = new Set<string>();
  for (const der of bundle) {
    const x = new X509Certificate(Buffer.from(der));
    if (x.subject === x.issuer && x.checkIssued(x) && x.verify(x.publicKey)) out.add(createHash("sha1").update(der).digest("hex"));
  }
  if (out.size === 0) throw new NodeListError("node-list-invalid", "the CA bundle holds no root (self-signed) certificate");
  if (out.size > NODE_LIST_MAX_ROOTS) throw new NodeListError("node-list-invalid", `the CA bundle holds ${out.size} roots, at most ${NODE_LIST_MAX_ROOTS} are accepted`);
  return [...out].sort();
}

/** `rootFingerprints` of a PEM bundle file (fleetd's CA bundle; spire-server's `devid_ca_path`), read now. */
export function rootFingerprintsOfFile(path: string): string[] {
  return rootFingerprints(certificatesFromPem(readFileSync(path, "utf8"), path));
}

export interface EligibilityOptions {
  now: Date;
  /** A control plane whose runtime verdict failed stays listed if it passed once (site setting; default true). */
  keepFailedControlPlanes: boolean;
}

export type Eligibility = { eligible: true } | { eligible: false; why: string };

/** Whether `node` belongs in the list, and why not. */
export function nodeListEligibility(node: Pick<Node, "name" | "status" | "role" | "ldevid" | "runtime" | "unattributed">, o: EligibilityOptions): Eligibility {
  if (node.status !== "active") return { eligible: false, why: `status ${node.status}` };
  if (!NAME.test(node.name)) return { eligible: false, why: "the name is not a DNS label" };
  if (node.unattributed.some((u) => u.field === "name")) return { eligible: false, why: "the device name is not the one the apply account wrote" };
  if (!node.ldevid) return { eligible: false, why: "no LDevID recorded by the attestation account" };
  if (!(node.ldevid.notAfter.getTime() > o.now.getTime())) return { eligible: false, why: `its LDevID expired at ${node.ldevid.notAfter.toISOString()}` };
  if (!CN.test(node.ldevid.cn)) return { eligible: false, why: "the recorded LDevID CN is not usable as a selector" };
  if (!isLdevidCnOf(node.name, node.ldevid.cn)) return { eligible: false, why: `the recorded LDevID CN is not ${node.name}.g<generation>` };
  const r = node.runtime;
  if (!r) return { eligible: false, why: "its installed OS has not passed a runtime attestation" };
  if (r.verdict === "pass") return { eligible: true };
  if (node.role === "control-plane" && o.keepFailedControlPlanes && r.lastPassAt !== undefined) return { eligible: true };
  if (node.role === "control-plane") return { eligible: false, why: o.keepFailedControlPlanes ? "runtime verdict fail and it never passed" : "runtime verdict fail (failed control planes are not kept)" };
  return { eligible: false, why: "runtime verdict fail: quarantined" };
}

export interface RenderOptions extends EligibilityOptions {
  trustDomain: string;
  /** `rootFingerprints(bundle)`. */
  caFingerprints: readonly string[];
}

/**
 * The list for a fleet: eligible nodes, sorted by name. Two devices of one name: neither is listed (fail closed;
 * reported in `excluded`). Throws NodeListError when the result would not validate (a caller bug or a bad CA).
 */
export function renderNodeList(nodes: readonly Pick<Node, "name" | "status" | "role" | "ldevid" | "runtime" | "unattributed">[], o: RenderOptions): { list: NodeList; excluded: { name: string; why: string }[] } {
  const excluded: { name: string; why: string }[] = [];
  const byName = new Map<string, NodeListNode | null>();
  for (const n of nodes) {
    const e = nodeListEligibility(n, o);
    if (!e.eligible) {
      excluded.push({ name: n.name, why: e.why });
      continue;
    }
    const ld = n.ldevid as NonNullable<Node["ldevid"]>;
    const rt = n.runtime as NonNullable<Node["runtime"]>;
    if (byName.has(n.name)) {
      byName.set(n.name, null);
      excluded.push({ name: n.name, why: "two devices have this name" });
      continue;
    }
    byName.set(n.name, {
      name: n.name,
      spiffeId: nodeSpiffeId(o.trustDomain, n.name),
      cn: ld.cn,
      verdict: rt.verdict,
      verdictAt: rt.at.toISOString(),
      role: n.role,
      ldevidNotAfter: ld.notAfter.toISOString(),
    });
  }
  const listed = [...byName.values()].filter((x): x is NodeListNode => x !== null).sort((a, b) => (a.name < b.name ? -1 : 1));
  const list = { apiVersion: NODE_LIST_API_VERSION, trustDomain: o.trustDomain, caFingerprints: [...o.caFingerprints].sort(), nodes: listed } as const;
  const r = NodeList.safeParse(list);
  if (!r.success) throw new NodeListError("node-list-invalid", issues(r.error));
  excluded.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { list: r.data, excluded };
}

const issues = (e: z.ZodError): string =>
  e.issues
    .slice(0, 5)
    .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
    .join("; ");

/**
 * Reads a list: size first (before parsing), then JSON, then the schema, then the trust domain the reader
 * serves, then (when given) that every CA fingerprint is one of the reader's trusted roots — spire-plugin passes
 * the roots of spire-server's own `devid_ca_path`, so a list cannot name a root SPIRE's attestor would not accept.
 * Every refusal is a NodeListError naming the first problems.
 */
export function parseNodeList(bytes: Uint8Array | string, expectTrustDomain: string, maxBytes = NODE_LIST_MAX_BYTES, trustedRoots?: readonly string[]): NodeList {
  const size = typeof bytes === "string" ? Buffer.byteLength(bytes) : bytes.byteLength;
  if (size > maxBytes) throw new NodeListError("node-list-too-large", `${size} bytes, at most ${maxBytes} are read`);
  let raw: unknown;
  try {
    raw = JSON.parse(typeof bytes === "string" ? bytes : Buffer.from(bytes).toString("utf8"));
  } catch (e) {
    throw new NodeListError("node-list-not-json", (e as Error).message);
  }
  const r = NodeList.safeParse(raw);
  if (!r.success) throw new NodeListError("node-list-invalid", issues(r.error));
  if (r.data.trustDomain !== expectTrustDomain) throw new NodeListError("node-list-wrong-trust-domain", `it is for trust domain ${r.data.trustDomain}, this server's is ${expectTrustDomain}`);
  if (trustedRoots) {
    const unknown = r.data.caFingerprints.filter((fp) => !trustedRoots.includes(fp));
    if (unknown.length > 0) throw new NodeListError("node-list-unknown-root", `CA fingerprint(s) ${unknown.join(", ")} are not roots of this server's LDevID CA bundle (trusted: ${[...trustedRoots].join(", ") || "none"})`);
  }
  return r.data;
}

/** The canonical bytes of a list (what is written). */
export function serializeNodeList(list: NodeList): string {
  return canonicalJson(list);
}

// ---- SPIRE node entries ----

/** Every entry fleetd's sync owns has an ID with this prefix (SPIRE accepts client-chosen IDs since 1.8.0). */
export const NODE_ENTRY_ID_PREFIX = "fleetd.node.";

/** `fleetd.node.<name>.<root SHA-1>`: one entry per node and root, the same ID on every run. */
export function nodeEntryId(name: string, caFingerprint: string): string {
  return `${NODE_ENTRY_ID_PREFIX}${name}.${caFingerprint}`;
}

/** The node name and root of a fleetd entry ID, or undefined for anyone else's. */
export function parseNodeEntryId(id: string): { name: string; caFingerprint: string } | undefined {
  if (!id.startsWith(NODE_ENTRY_ID_PREFIX)) return undefined;
  const rest = id.slice(NODE_ENTRY_ID_PREFIX.length);
  const dot = rest.lastIndexOf(".");
  if (dot < 1) return undefined;
  const name = rest.slice(0, dot);
  const caFingerprint = rest.slice(dot + 1);
  if (!NAME.test(name) || !SHA1_HEX.test(caFingerprint)) return undefined;
  return { name, caFingerprint };
}

/** A node entry as fleetd declares it (every field it manages set). */
export type NodeEntrySpec = Required<Pick<EntrySpec, "id" | "spiffeId" | "parentId" | "selectors">> & EntrySpec;

/** The SPIRE node alias entries of a list: per node, one per root, parent `spiffe://<td>/spire/server`. */
export function nodeEntries(list: NodeList): NodeEntrySpec[] {
  const parent = serverId(list.trustDomain);
  const out: NodeEntrySpec[] = [];
  for (const n of list.nodes) {
    for (const fp of list.caFingerprints) {
      out.push({
        id: nodeEntryId(n.name, fp),
        spiffeId: n.spiffeId,
        parentId: parent,
        selectors: [
          { type: "tpm_devid", value: `subject:cn:${n.cn}` },
          { type: "tpm_devid", value: `ca:fingerprint:${fp}` },
        ],
      });
    }
  }
  return out;
}
