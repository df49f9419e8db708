/**
 * The kubelet's TLS bootstrap, as the lab OS does it: the same CSR flow a kubelet runs at its first start
 * (k8s 1.36 pkg/kubelet/certificate/bootstrap/bootstrap.go `LoadClientCert` → `requestNodeCertificate`,
 * k8s.io/client-go/util/certificate/csr `RequestCertificate` / `WaitForCertificate`), not a kubelet binary: the
 * lab OS has no container runtime, and none is built here.
 *
 * From a Talos machine config (the one the node fetched once): the cluster endpoint (`cluster.controlPlane.endpoint`),
 * the cluster's Kubernetes CA (`cluster.ca.crt`), the per-node bootstrap token (`cluster.token`) and the node name
 * (`machine.network.hostname`, which Talos gives the kubelet as its node name). Then, as the kubelet:
 *  1. a fresh EC P-256 key (kubelet's `keyutil.MakeEllipticPrivateKeyPEM`), a PKCS#10 request with subject
 *     `O=system:nodes, CN=system:node:<node>`, no SANs, no extensions, signed ECDSA-SHA256;
 *  2. a `CertificateSigningRequest` (generateName `csr-`, signerName `kubernetes.io/kube-apiserver-client-kubelet`,
 *     usages digital signature + client auth) posted with the bootstrap token as bearer;
 *  3. wait for it to be Approved (or Denied / Failed) and for `status.certificate`;
 *  4. with the issued certificate and the key: a SelfSubjectReview (`authentication.k8s.io/v1`), which says who the
 *     API server takes the client for — `system:node:<node>` in `system:nodes` when the bootstrap worked.
 * The key and the certificate are written to `--out` (kubelet: /var/lib/kubelet/pki/kubelet-client-current.pem).
 *
 * Prints one line per step ("kubelet bootstrap: …") and, last, one JSON line `{"result": …}` for a test; never the
 * token's secret or the key. Exit 0: issued and proven; 2: denied or failed by the cluster; 1: anything else.
 *
 * Shipped to the lab OS as one ES module (bundled by tests/src/vm/hookos.ts `kubeletBootstrapBundle`), run by the
 * lab OS's Node.js 24: `node kubelet-bootstrap.mjs --config FILE [--node NAME] [--out DIR] [--timeout-seconds N]`.
 */
import { createPublicKey, generateKeyPairSync, sign, X509Certificate, type KeyObject } from "node:crypto";
import { mkdirSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { parseAllDocuments } from "yaml";
import { z } from "zod";

// The same values as @fleetd/platform/kube's (the unit test checks): that entry point would bring the Kubernetes
// client into this small bundle.
export const KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet";
export const KUBELET_USAGES = ["digital signature", "client auth"] as const;

// --- DER, only what a PKCS#10 request (RFC 2986) with an EC key needs ---
function derLength(n: number): Uint8Array {
  if (n < 0x80) return Uint8Array.of(n);
  const bytes: number[] = [];
  for (let v = n; v > 0; v >>= 8) bytes.unshift(v & 0xff);
  return Uint8Array.of(0x80 | bytes.length, ...bytes);
}
function tlv(tag: number, ...content: Uint8Array[]): Uint8Array {
  const body = Buffer.concat(content);
  return Buffer.concat([Uint8Array.of(tag), derLength(body.length), body]);
}
const seq = (...c: Uint8Array[]) => tlv(0x30, ...c);
const set = (...c: Uint8Array[]) => tlv(0x31, ...c);
function oid(dotted: string): Uint8Array {
  const [a = 0, b = 0, ...rest] = dotted.split(".").map(Number);
  const out = [40 * a + b];
  for (const n of rest) {
    const groups: number[] = [];
    for (let v = n; ; v = Math.floor(v / 128)) {
      groups.unshift(v % 128);
      if (v < 128) break;
    }
    out.push(...groups.map((g, i) => (i < groups.length - 1 ? g | 0x80 : g)));
  }
  return tlv(0x06, Uint8Array.from(out));
}
const utf8 = (s: string) => tlv(0x0c, Buffer.from(s, "utf8"));
const OID_O = "2.5.4.10";
const OID_CN = "2.5.4.3";
const OID_ECDSA_SHA256 = "1.2.840.10045.4.3.2";

/**
 * A PKCS#10 CertificationRequest for `subject` (RDNs in order, one attribute each; Go's pkix.Name puts O before
 * CN, as kubelet's request has it) over `key`'s public key, with no attributes, signed ECDSA with SHA-256.
 */
export function certificationRequest(subject: readonly (readonly [string, string])[], key: KeyObject): Uint8Array {
  const name = seq(...subject.map(([type, value]) => set(seq(oid(type), utf8(value)))));
  const spki = new Uint8Array(createPublicKey(key).export({ type: "spki", format: "der" }));
  const info = seq(tlv(0x02, Uint8Array.of(0)), name, spki, tlv(0xa0)); // version 0, no attributes
  const signature = sign("sha256", info, { key, dsaEncoding: "der" });
  return seq(info, seq(oid(OID_ECDSA_SHA256)), tlv(0x03, Uint8Array.of(0), signature));
}

const pem = (label: string, der: Uint8Array) => `-----BEGIN ${label}-----\n${Buffer.from(der).toString("base64").replace(/(.{64})/g, "$1\n").replace(/\n$/, "")}\n-----END ${label}-----\n`;

/** What the kubelet's bootstrap takes from the Talos machine config (its v1alpha1 document). */
const TalosConfig = z.object({
  machine: z.object({ network: z.object({ hostname: z.string().min(1) }) }),
  cluster: z.object({
    controlPlane: z.object({ endpoint: z.url() }),
    ca: z.object({ crt: z.string().min(1) }),
    token: z.string().regex(/^[a-z0-9]{6}\.[a-z0-9]{16}$/, "cluster.token is not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})"),
  }),
});

export interface BootstrapInputs {
  /** https://host:port of the API server. */
  endpoint: string;
  /** The cluster CA (PEM). */
  caPem: string;
  /** `<id>.<secret>` */
  token: string;
  node: string;
}

/** The bootstrap's inputs from a Talos machine config's text (the first document with machine and cluster). */
export function inputsFromTalosConfig(text: string): BootstrapInputs {
  const docs = parseAllDocuments(text).map((d) => d.toJS() as unknown);
  const doc = docs.find((d) => typeof d === "object" && d !== null && "machine" in d && "cluster" in d);
  if (!doc) throw new Error("the config has no document with machine and cluster (v1alpha1)");
  const c = TalosConfig.safeParse(doc);
  if (!c.success) throw new Error(`the config: ${c.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  return {
    endpoint: c.data.cluster.controlPlane.endpoint.replace(/\/+$/, ""),
    caPem: Buffer.from(c.data.cluster.ca.crt, "base64").toString("utf8"),
    token: c.data.cluster.token,
    node: c.data.machine.network.hostname,
  };
}

interface Call {
  method: "GET" | "POST";
  path: string;
  body?: unknown;
  /** Bearer token, or a client certificate and key (PEM). */
  auth: { bearer: string } | { cert: string; key: string };
}

/** One HTTPS request to the API server (its certificate verified against the cluster CA); JSON in and out. */
function call(endpoint: string, caPem: string, c: Call): Promise<{ status: number; body: unknown }> {
  const u = new URL(endpoint);
  const payload = c.body === undefined ? undefined : Buffer.from(JSON.stringify(c.body));
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port || 443,
        path: c.path,
        method: c.method,
        ca: caPem,
        timeout: 15_000,
        headers: {
          accept: "application/json",
          ...(payload ? { "content-type": "application/json", "content-length": String(payload.length) } : {}),
          ...("bearer" in c.auth ? { authorization: `Bearer ${c.auth.bearer}` } : {}),
        },
        ...("cert" in c.auth ? { cert: c.auth.cert, key: c.auth.key } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (b: Buffer) => chunks.push(b));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            // not JSON: kept as text
          }
          resolve({ status: res.statusCode ?? 0, body });
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${c.method} ${c.path}: no answer in 15 s`)));
    req.on("error", reject);
    req.end(payload);
  });
}

const Csr = z.object({
  metadata: z.object({ name: z.string() }),
  spec: z.object({ username: z.string().optional(), signerName: z.string() }),
  status: z
    .object({
      conditions: z.array(z.object({ type: z.string(), status: z.string().optional(), reason: z.string().optional(), message: z.string().optional() })).optional(),
      certificate: z.string().optional(),
    })
    .optional(),
});
const SelfSubjectReview = z.object({ status: z.object({ userInfo: z.object({ username: z.string(), groups: z.array(z.string()).optional() }) }) });

/** What the bootstrap came to (the JSON line the script prints last). */
export interface BootstrapResult {
  node: string;
  csr?: string;
  /** The CSR's requester, as the API server recorded it (`system:bootstrap:<token id>`). */
  requester?: string;
  outcome: "issued" | "denied" | "failed" | "error";
  /** The deciding condition's reason and message. */
  reason?: string;
  message?: string;
  certificate?: { subject: string; issuer: string; notAfter: string; sha256: string };
  /** Who the API server took the issued certificate for (SelfSubjectReview). */
  authenticatedAs?: { username: string; groups: string[] };
  error?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const describe = (r: { status: number; body: unknown }) => `HTTP ${r.status} ${typeof r.body === "string" ? r.body.slice(0, 300) : JSON.stringify(r.body).slice(0, 300)}`;

/** The kubelet's bootstrap with `inputs`; `say` gets one line per step. Never throws: errors are a result. */
export async function kubeletBootstrap(inputs: BootstrapInputs, o: { out?: string; timeoutMs?: number; say?: (line: string) => void } = {}): Promise<BootstrapResult> {
  const say = o.say ?? (() => undefined);
  const deadline = Date.now() + (o.timeoutMs ?? 180_000);
  const { endpoint, caPem, token, node } = inputs;
  const result: BootstrapResult = { node, outcome: "error" };
  try {
    const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const der = certificationRequest([[OID_O, "system:nodes"], [OID_CN, `system:node:${node}`]], privateKey);
    const bearer = { bearer: token };
    say(`node ${node}: EC P-256 key made, CSR O=system:nodes CN=system:node:${node}; posting it to ${endpoint} with bootstrap token ${token.split(".")[0]}`);
    const body = {
      apiVersion: "certificates.k8s.io/v1",
      kind: "CertificateSigningRequest",
      metadata: { generateName: "csr-" },
      spec: { request: Buffer.from(pem("CERTIFICATE REQUEST", der)).toString("base64"), signerName: KUBELET_CLIENT_SIGNER, usages: [...KUBELET_USAGES] },
    };
    // The API server learns of a new token Secret through an informer: a 401 right after it was made is retried.
    let created: z.infer<typeof Csr> | undefined;
    for (;;) {
      const r = await call(endpoint, caPem, { method: "POST", path: "/apis/certificates.k8s.io/v1/certificatesigningrequests", body, auth: bearer });
      if (r.status === 201) {
        created = Csr.parse(r.body);
        break;
      }
      if (r.status !== 401 || Date.now() > deadline) throw new Error(`creating the CSR: ${describe(r)}`);
      await sleep(1000);
    }
    result.csr = created.metadata.name;
    if (created.spec.username) result.requester = created.spec.username;
    say(`CSR ${created.metadata.name} created, requester ${created.spec.username ?? "?"}, signer ${created.spec.signerName}`);

    // Wait for a decision and the certificate (kubelet watches; polling the one object does the same here).
    for (;;) {
      const r = await call(endpoint, caPem, { method: "GET", path: `/apis/certificates.k8s.io/v1/certificatesigningrequests/${created.metadata.name}`, auth: bearer });
      if (r.status !== 200) throw new Error(`reading CSR ${created.metadata.name}: ${describe(r)}`);
      const csr = Csr.parse(r.body);
      const settled = csr.status?.conditions?.find((c) => ["Approved", "Denied", "Failed"].includes(c.type) && (c.status ?? "True") === "True");
      if (settled && settled.type !== "Approved") {
        result.outcome = settled.type === "Denied" ? "denied" : "failed";
        if (settled.reason) result.reason = settled.reason;
        if (settled.message) result.message = settled.message;
        say(`CSR ${csr.metadata.name} ${settled.type}: ${settled.reason ?? ""} ${settled.message ?? ""}`.trimEnd());
        return result;
      }
      if (settled && csr.status?.certificate) {
        if (settled.reason) result.reason = settled.reason;
        if (settled.message) result.message = settled.message;
        say(`CSR ${csr.metadata.name} Approved: ${settled.reason ?? ""} ${settled.message ?? ""}`.trimEnd());
        const certPem = Buffer.from(csr.status.certificate, "base64").toString("utf8");
        const cert = new X509Certificate(certPem);
        if (!cert.checkPrivateKey(privateKey)) throw new Error("the issued certificate is not for the key this bootstrap made");
        result.certificate = { subject: cert.subject.replace(/\n/g, ","), issuer: cert.issuer.replace(/\n/g, ","), notAfter: new Date(cert.validTo).toISOString(), sha256: cert.fingerprint256.replaceAll(":", "").toLowerCase() };
        say(`certificate issued: subject ${result.certificate.subject}, issuer ${result.certificate.issuer}, notAfter ${result.certificate.notAfter}, sha256 ${result.certificate.sha256}`);
        const keyPem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
        if (o.out) {
          mkdirSync(o.out, { recursive: true, mode: 0o700 });
          writeFileSync(join(o.out, "kubelet-client-current.pem"), certPem + keyPem, { mode: 0o600 });
          say(`certificate and key written to ${join(o.out, "kubelet-client-current.pem")}`);
        }
        // The proof: the API server authenticates the client certificate as the node.
        const who = await call(endpoint, caPem, { method: "POST", path: "/apis/authentication.k8s.io/v1/selfsubjectreviews", body: { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" }, auth: { cert: certPem, key: keyPem } });
        if (who.status !== 201 && who.status !== 200) throw new Error(`SelfSubjectReview with the issued certificate: ${describe(who)}`);
        const u = SelfSubjectReview.parse(who.body).status.userInfo;
        result.authenticatedAs = { username: u.username, groups: u.groups ?? [] };
        say(`authenticated with the issued certificate as ${u.username} groups ${(u.groups ?? []).join(",")}`);
        result.outcome = "issued";
        return result;
      }
      if (Date.now() > deadline) throw new Error(`CSR ${csr.metadata.name}: ${settled ? "approved but no certificate issued" : "not decided"} in time`);
      await sleep(1000);
    }
  } catch (e) {
    result.error = (e as Error).message;
    say(`error: ${result.error}`);
    return result;
  }
}

async function main(): Promise<number> {
  const { values } = parseArgs({ options: { config: { type: "string" }, node: { type: "string" }, out: { type: "string" }, "timeout-seconds": { type: "string" } }, strict: true });
  if (!values.config) {
    console.error("usage: kubelet-bootstrap --config TALOS_CONFIG [--node NAME] [--out DIR] [--timeout-seconds N]");
    return 1;
  }
  let inputs: BootstrapInputs;
  try {
    inputs = inputsFromTalosConfig(readFileSync(values.config, "utf8"));
  } catch (e) {
    console.log(`kubelet bootstrap: error: ${(e as Error).message}`);
    console.log(JSON.stringify({ result: { node: values.node ?? "", outcome: "error", error: (e as Error).message } }));
    return 1;
  }
  if (values.node) inputs = { ...inputs, node: values.node };
  const r = await kubeletBootstrap(inputs, {
    ...(values.out ? { out: values.out } : {}),
    timeoutMs: Number(values["timeout-seconds"] ?? 180) * 1000,
    say: (l) => console.log(`kubelet bootstrap: ${l}`),
  });
  console.log(JSON.stringify({ result: r }));
  return r.outcome === "issued" ? 0 : r.outcome === "error" ? 1 : 2;
}

/** The line `main` prints last, parsed. */
export function bootstrapResultOf(stdout: string): BootstrapResult | undefined {
  const line = stdout.split("\n").reverse().find((l) => l.startsWith('{"result":'));
  return line ? (JSON.parse(line) as { result: BootstrapResult }).result : undefined;
}

// Run as a program (the bundle, or `node dist/src/vm/kubeletBootstrap.js`), not when imported by a test.
if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) process.exitCode = await main();
