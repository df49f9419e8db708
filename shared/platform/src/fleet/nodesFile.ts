/**
 * `nodes.yaml`: the operator's declaration of the fleet. Parsed with `yaml` (keeping source positions) and
 * judged by a zod schema, so every error names the YAML line: `nodes.yaml:14: nodes.node-b.address.cidr: ...`.
 * Names, serials, addresses, switch ports and EK bindings are unique across the file.
 */
import { isIP } from "node:net";
import { LineCounter, parseDocument, isMap, isNode, isScalar, isSeq, type Document } from "yaml";
import { z } from "zod";
import { own, safeLine } from "@fleetd/verify/text";
import { BMC_TYPES } from "./node.js";
import { ipv4CidrSchema, ipv4InSubnet, ipv4Mask, ipv4Schema, ipv4ToInt, isIpv4, parseIpv4Cidr } from "./ipv4.js";

export const MAX_NODES_FILE_BYTES = 1024 * 1024;
/** Mapping pairs and sequence items in the whole document (a node takes about 25). */
export const MAX_NODES_FILE_ENTRIES = 100_000;
/** Nodes, switches and models each. */
export const MAX_NODES = 5000;
/** Problems reported for one file (the first ones by line; a count of the rest). */
export const MAX_NODES_FILE_ISSUES = 50;

/** RFC 1123 DNS label, lowercase. */
const DnsLabel = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, "must be a DNS label (a-z, 0-9, '-', at most 63 characters)");
const Slug = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,99}$/, "must be a slug (a-z, 0-9, '-', '_')");
const Text = (max: number) => z.string().min(1, "must not be empty").max(max).regex(/^[\x20-\x7e]+$/, "must be printable ASCII");

/** An EK binding: lowercase hex SHA-256 of the EK's canonical SubjectPublicKeyInfo (see `fleetd verify ek`). */
export const EkBindingHash = z.string().regex(/^[0-9a-f]{64}$/, "must be 64 lowercase hex characters (SHA-256 of the EK's canonical SPKI)");
export const EkBinding = z.strictObject({
  alg: z.enum(["rsa", "ecc"]),
  sha256: EkBindingHash,
  /** false: this TPM has no EK certificate; the binding alone vouches for it. */
  chain: z.boolean().default(true),
});
export type EkBinding = z.infer<typeof EkBinding>;

const Address = z
  .strictObject({
    /** IPv4 address with prefix length, e.g. 10.0.10.11/24 (ipv4.ts: dotted quad, no leading zeros, prefix 0–32) */
    cidr: ipv4CidrSchema("must be an IPv4 address with a prefix length, e.g. 10.0.10.11/24"),
    gateway: ipv4Schema("must be an IPv4 address"),
  })
  .superRefine((a, ctx) => {
    const c = parseIpv4Cidr(a.cidr);
    if (!c) return; // the field's own issue says why
    if (c.prefix < 1 || c.prefix > 30) return void ctx.addIssue({ code: "custom", path: ["cidr"], message: "prefix length must be 1..30" });
    if (!isIpv4(a.gateway)) return;
    const mask = ipv4Mask(c.prefix);
    const host = (ipv4ToInt(c.address) & ~mask) >>> 0;
    if (host === 0 || host === (~mask >>> 0)) ctx.addIssue({ code: "custom", path: ["cidr"], message: `${a.cidr} is the network or broadcast address` });
    if (!ipv4InSubnet(c, a.gateway)) ctx.addIssue({ code: "custom", path: ["gateway"], message: `${a.gateway} is not in ${a.cidr}` });
    if (a.gateway === c.address) ctx.addIssue({ code: "custom", path: ["gateway"], message: "gateway equals the node's address" });
  });

/** BMC credentials are never in the file: only a reference the BMC tooling resolves (env:, file:, vault:, secret:). */
const CredentialsRef = z.string().regex(/^(env|file|vault|secret):[^\s]{1,250}$/, "must be a reference such as vault:kv/bmc/node-a, secret:ns/name, env:VAR or file:/path — never the credentials themselves");
const Bmc = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("none") }),
  z.strictObject({
    type: z.enum(BMC_TYPES),
    address: z.string().refine((a) => isIP(a) !== 0 || /^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/i.test(a), "must be an IP address or a host name"),
    credentials: CredentialsRef,
  }),
]);

export const NodeEntry = z
  .strictObject({
    serial: Text(50),
    /** Key into `models`. */
    model: Slug,
    /** Policy profile name. */
    class: z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, "must be a policy profile name (a-z, 0-9, '.', '_', '-')"),
    role: z.enum(["worker", "control-plane"]),
    /** The boot interface's name in NetBox. */
    interface: Text(64).default("eth0"),
    switch: z.strictObject({ device: DnsLabel, port: Text(64) }),
    /**
     * `required` (default): intake, provision and attest release nothing unless NetBox records the boot
     * interface's cable and LLDP agrees with it. `waived`: a missing cable is accepted for this node (a recorded
     * cable is still checked). Written to NetBox and trusted only as the apply account wrote it.
     */
    switchPortCheck: z.enum(["required", "waived"]).default("required"),
    address: Address,
    installDisk: z.string().regex(/^\/dev\/[A-Za-z0-9/._-]{1,200}$/, "must be a /dev path, e.g. /dev/nvme0n1"),
    bmc: Bmc,
    tpm: z.enum(["2.0", "1.2", "none"]),
    ek: z.array(EkBinding).max(2).optional(),
  })
  .superRefine((n, ctx) => {
    if (n.tpm === "2.0" && (!n.ek || n.ek.length === 0)) {
      ctx.addIssue({ code: "custom", path: ["ek"], message: "a TPM 2.0 node needs at least one approved EK binding" });
    }
    if (n.tpm === "none" && n.ek && n.ek.length > 0) ctx.addIssue({ code: "custom", path: ["ek"], message: "a node without a TPM cannot have EK bindings" });
    if (n.ek && n.ek.length === 2 && n.ek[0]?.alg === n.ek[1]?.alg) {
      ctx.addIssue({ code: "custom", path: ["ek", 1, "alg"], message: `two ${n.ek[0]?.alg} bindings: a TPM has one EK per algorithm` });
    }
  });
export type NodeEntry = z.infer<typeof NodeEntry>;

const Role = z.strictObject({ name: Text(100), slug: Slug, color: z.string().regex(/^[0-9a-f]{6}$/, "must be 6 lowercase hex digits").default("9e9e9e") });

export const NodesFile = z
  .strictObject({
    version: z.literal(1),
    site: z.strictObject({ name: Text(100), slug: Slug }),
    roles: z
      .strictObject({ worker: Role, "control-plane": Role, switch: Role })
      .default({
        worker: { name: "fleetd worker", slug: "fleetd-worker", color: "2196f3" },
        "control-plane": { name: "fleetd control plane", slug: "fleetd-control-plane", color: "9c27b0" },
        switch: { name: "fleetd switch", slug: "fleetd-switch", color: "607d8b" },
      }),
    models: z.record(Slug, z.strictObject({ manufacturer: Text(100), model: Text(100) })),
    switches: z.record(DnsLabel, z.strictObject({ model: Slug })),
    nodes: z.record(DnsLabel, NodeEntry),
  })
  .superRefine((f, ctx) => {
    const seen = new Map<string, string>();
    const unique = (kind: string, value: string, path: (string | number)[]): void => {
      const key = `${kind}\0${value}`;
      const prev = seen.get(key);
      if (prev !== undefined) ctx.addIssue({ code: "custom", path, message: `${kind} ${value} is also used by ${prev}` });
      else seen.set(key, path.slice(0, 2).join("."));
    };
    for (const [name, sw] of Object.entries(f.switches)) {
      if (!own(f.models, sw.model)) ctx.addIssue({ code: "custom", path: ["switches", name, "model"], message: `model ${sw.model} is not in models` });
      if (own(f.nodes, name)) ctx.addIssue({ code: "custom", path: ["switches", name], message: `${name} is both a switch and a node` });
    }
    for (const [name, n] of Object.entries(f.nodes)) {
      if (!own(f.models, n.model)) ctx.addIssue({ code: "custom", path: ["nodes", name, "model"], message: `model ${n.model} is not in models` });
      if (!own(f.switches, n.switch.device)) ctx.addIssue({ code: "custom", path: ["nodes", name, "switch", "device"], message: `switch ${n.switch.device} is not in switches` });
      unique("serial", n.serial, ["nodes", name, "serial"]);
      unique("address", n.address.cidr.split("/")[0] as string, ["nodes", name, "address", "cidr"]);
      unique("switch port", `${n.switch.device}/${n.switch.port}`, ["nodes", name, "switch", "port"]);
      (n.ek ?? []).forEach((b, i) => unique("EK binding", b.sha256, ["nodes", name, "ek", i, "sha256"]));
    }
  });
export type NodesFile = z.infer<typeof NodesFile>;

/**
 * The entry of the node named `name`, or undefined. Own properties only: a name such as `constructor`,
 * `__proto__` or `toString` (any NetBox user can name a device so) is not a node just because every object
 * inherits it.
 */
export function nodeEntry(file: NodesFile, name: string): NodeEntry | undefined {
  return own(file.nodes, name);
}

export interface NodesFileIssue {
  path: string;
  line: number | undefined;
  message: string;
}

export class NodesFileError extends Error {
  override readonly name = "NodesFileError";
  readonly code = "nodes-file-invalid";
  constructor(
    readonly file: string,
    readonly issues: NodesFileIssue[],
  ) {
    // Paths and messages quote the file (key names, values): one clipped, escaped line each.
    super(issues.map((i) => safeLine(`${file}${i.line !== undefined ? `:${i.line}` : ""}: ${i.path ? i.path + ": " : ""}${i.message}`, 400)).join("\n"));
  }
}

function lineOf(doc: Document, lc: LineCounter, path: PropertyKey[]): number | undefined {
  // The deepest node that exists on the path (a missing key is reported at its parent).
  for (let n = path.length; n >= 0; n--) {
    const node = doc.getIn(path.slice(0, n) as unknown[], true);
    if (isNode(node) && node.range) return lc.linePos(node.range[0]).line;
  }
  return undefined;
}

/** At most MAX_NODES_FILE_ISSUES issues, then one line saying how many more there were. */
function capped(issues: NodesFileIssue[], total = issues.length): NodesFileIssue[] {
  if (total <= MAX_NODES_FILE_ISSUES) return issues;
  return [...issues.slice(0, MAX_NODES_FILE_ISSUES), { path: "", line: undefined, message: `… and ${total - MAX_NODES_FILE_ISSUES} more problems (the first ${MAX_NODES_FILE_ISSUES} are listed)` }];
}

/**
 * One walk of the parsed document: at most MAX_NODES_FILE_ENTRIES pairs and items in all (refused at the first
 * one over), mapping keys plain scalars, unique within their mapping (a set per mapping).
 */
function checkShape(doc: Document, lc: LineCounter): NodesFileIssue[] {
  const issues: NodesFileIssue[] = [];
  const line = (n: unknown): number | undefined => (isNode(n) && n.range ? lc.linePos(n.range[0]).line : undefined);
  let entries = 0;
  const stack: unknown[] = [doc.contents];
  while (stack.length > 0 && issues.length < MAX_NODES_FILE_ISSUES) {
    const n = stack.pop();
    if (isSeq(n)) {
      entries += n.items.length;
      for (const item of n.items) stack.push(item);
    } else if (isMap(n)) {
      entries += n.items.length;
      const seen = new Set<string>();
      for (const pair of n.items) {
        if (!isScalar(pair.key)) {
          issues.push({ path: "", line: line(pair.key) ?? line(n), message: "mapping keys must be plain names" });
          continue;
        }
        const k = String(pair.key.value);
        if (seen.has(k)) issues.push({ path: "", line: line(pair.key), message: `Map keys must be unique: ${k} repeats` });
        seen.add(k);
        stack.push(pair.value);
      }
    }
    if (entries > MAX_NODES_FILE_ENTRIES) return [{ path: "", line: undefined, message: `more than ${MAX_NODES_FILE_ENTRIES} entries (mapping pairs and list items): not a nodes file fleetd reads` }];
  }
  return issues;
}

/** Paths of every own key named `__proto__` in a parsed YAML value (the nodes file nests a few levels only). */
function protoKeyPaths(v: unknown, path: (string | number)[] = [], out: (string | number)[][] = []): (string | number)[][] {
  if (path.length > 16 || out.length >= 20 || v === null || typeof v !== "object") return out;
  if (Array.isArray(v)) {
    v.forEach((x, i) => protoKeyPaths(x, [...path, i], out));
    return out;
  }
  for (const k of Object.keys(v)) {
    if (k === "__proto__") out.push([...path, k]);
    else protoKeyPaths((v as Record<string, unknown>)[k], [...path, k], out);
  }
  return out;
}

/** Parses and validates a nodes file; throws NodesFileError listing every problem with its line. */
export function parseNodesFile(text: string, file = "nodes.yaml"): NodesFile {
  if (Buffer.byteLength(text) > MAX_NODES_FILE_BYTES) {
    throw new NodesFileError(file, [{ path: "", line: undefined, message: `file is larger than ${MAX_NODES_FILE_BYTES} bytes` }]);
  }
  const lc = new LineCounter();
  // Unique keys are checked below with a set per mapping (the parser's own check scans every earlier key).
  const doc = parseDocument(text, { lineCounter: lc, uniqueKeys: false, prettyErrors: false, strict: true });
  if (doc.errors.length > 0) {
    throw new NodesFileError(file, capped(doc.errors.map((e) => ({ path: "", line: lc.linePos(e.pos[0]).line, message: e.message.split("\n")[0] ?? e.message }))));
  }
  const shape = checkShape(doc, lc);
  if (shape.length > 0) throw new NodesFileError(file, capped(shape));
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    throw new NodesFileError(file, [{ path: "", line: undefined, message: (e as Error).message }]);
  }
  // zod drops a key named __proto__ without a word (the yaml parser keeps it as an own key): refuse it here.
  const protoKeys = protoKeyPaths(raw);
  if (protoKeys.length > 0) {
    throw new NodesFileError(file, protoKeys.map((p) => ({ path: p.map(String).join("."), line: lineOf(doc, lc, p), message: "__proto__ is not a valid name" })));
  }
  for (const section of ["nodes", "switches", "models"] as const) {
    const v = raw !== null && typeof raw === "object" ? (raw as Record<string, unknown>)[section] : undefined;
    const n = v !== null && typeof v === "object" ? Object.keys(v).length : 0;
    if (n > MAX_NODES) throw new NodesFileError(file, [{ path: section, line: lineOf(doc, lc, [section]), message: `${n} entries: at most ${MAX_NODES}` }]);
  }
  const res = NodesFile.safeParse(raw);
  if (!res.success) {
    // Lines are looked up for the reported issues only (each lookup walks the document).
    const issues = res.error.issues.slice(0, MAX_NODES_FILE_ISSUES).map((i) => ({
      path: i.path.map(String).join("."),
      line: lineOf(doc, lc, i.path),
      message: i.code === "invalid_key" ? `${String(i.path[i.path.length - 1])} is not a valid name (a DNS label or slug: a-z, 0-9, '-')` : i.message,
    }));
    issues.sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
    throw new NodesFileError(file, capped(issues, res.error.issues.length));
  }
  return res.data;
}
