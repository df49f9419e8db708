/**
 * The kubelet bootstrap CSR gate against a real control plane (etcd + kube-apiserver + kube-controller-manager
 * 1.36 with its own CSR approver on) and Talos's bootstrap bindings (so kcm's approver would approve any
 * well-formed kubelet CSR from a bootstrap token). The gate runs as a ServiceAccount bound to exactly the RBAC
 * `fleetd kube setup` applies, with a token from the TokenRequest API; CSRs are made by openssl from EC P-256
 * keys, as kubelet makes them, and submitted with the bootstrap token as bearer.
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { generateKeyPairSync, randomBytes, X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import * as k8s from "@kubernetes/client-node";
import pino from "pino";
import { KubeBootstrapTokens, TOKEN_NAMESPACE, kubeFromConfig, kubeStatus, type Kube, KUBELET_CLIENT_SIGNER } from "@fleetd/platform/kube";
import type { Journal, JournalEntry, NodeRef } from "@fleetd/platform/fleet";
import { SqliteAttestationStore } from "@fleetd/platform/state";
import { APPROVED_REASON, DENIED_REASON, startCsrGate, type CsrGate } from "@fleetd/talos-config-server/csrGate";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { openssl } from "../harness/openssl.js";
import { sleep } from "../harness/process.js";
import { pollValue } from "../harness/ports.js";

const CLI = fileURLToPath(new URL("../../../shared/cli/dist/main.js", import.meta.url));
const POLICY_MESSAGE = /fleetd: kubelet client CSRs not requested by the node itself are approved only by the fleetd CSR gate \(system:serviceaccount:fleetd:talos-config-server\)/;

class MemoryJournal implements Journal {
  readonly entries: { node: string | undefined; entry: JournalEntry }[] = [];
  async record(node: NodeRef | string | undefined, entry: JournalEntry): Promise<void> {
    this.entries.push({ node: typeof node === "object" ? node.name : node, entry });
  }
  about(csr: string) {
    return this.entries.filter((e) => e.entry.summary.includes(`CSR ${csr} `));
  }
}

let cp: ControlPlane;
let admin: Kube;
let gateKube: Kube;
let gate: CsrGate;
let store: SqliteAttestationStore;
const journal = new MemoryJournal();
const work = mkdtempSync(join(tmpdir(), "fleetd-csr-gate-"));
let setupOutput: string[] = [];

function clientFor(user: k8s.User): Kube {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: cp.server, caData: Buffer.from(cp.caPem).toString("base64") }],
    users: [user],
    contexts: [{ name: "x", cluster: "c", user: user.name }],
    currentContext: "x",
  });
  return kubeFromConfig(kc);
}

/** A ServiceAccount's identity, from a TokenRequest. */
async function asServiceAccount(namespace: string, name: string): Promise<Kube> {
  const tr = await admin.core.createNamespacedServiceAccountToken({ namespace, name, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  return clientFor({ name: `${namespace}-${name}`, token: tr.status?.token ?? "" });
}

function randomToken(): { id: string; secret: string } {
  const a = "abcdefghijklmnopqrstuvwxyz0123456789";
  const pick = (n: number) => Array.from(randomBytes(n), (b) => a[b % a.length]).join("");
  return { id: pick(6), secret: pick(16) };
}

const poll = <T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> => pollValue(what, probe, { timeoutMs });

let keyCount = 0;
/** A PEM CSR from a fresh EC P-256 key (as kubelet makes them), via openssl; returns the key file too. */
function makeCsr(subject: string, addext: string[] = []): { pem: string; keyFile: string } {
  const keyFile = join(work, `k${keyCount++}.pem`);
  writeFileSync(keyFile, generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey.export({ type: "pkcs8", format: "pem" }), { mode: 0o600 });
  const r = openssl(["req", "-new", "-key", keyFile, "-subj", subject, ...addext.flatMap((x) => ["-addext", x])]);
  assert.equal(r.status, 0, r.stderr);
  return { pem: r.stdout, keyFile };
}

async function submit(as: Kube, name: string, pem: string, usages = ["digital signature", "client auth"], signerName = KUBELET_CLIENT_SIGNER): Promise<k8s.V1CertificateSigningRequest> {
  // the bootstrap authenticator sees a new token Secret through an informer: retry 401 briefly
  return poll(`CSR ${name} to be accepted`, async () => {
    try {
      return await as.certificates.createCertificateSigningRequest({ body: { metadata: { name }, spec: { request: Buffer.from(pem).toString("base64"), signerName, usages } } });
    } catch (e) {
      if (kubeStatus(e) === 401) return undefined;
      throw e;
    }
  }, 30_000);
}

const read = (name: string) => admin.certificates.readCertificateSigningRequest({ name });
const cond = (csr: k8s.V1CertificateSigningRequest, type: string) => csr.status?.conditions?.find((c) => c.type === type);

/** Device IDs for the node names of this suite (no NetBox here: the store keys state by device ID). */
const deviceIds = new Map<string, number>();
const deviceIdOf = (node: string): number => {
  if (!deviceIds.has(node)) deviceIds.set(node, deviceIds.size + 1);
  return deviceIds.get(node) as number;
};

/** A fleetd token for `node`: its Secret created by the gate's identity, and the store's record. */
async function fleetdToken(node: string, ttlMs = 3600_000): Promise<{ id: string; secret: string; bearer: Kube }> {
  const t = randomToken();
  const exp = new Date(Date.now() + ttlMs);
  await new KubeBootstrapTokens(gateKube).create(node, t, exp);
  await store.setBootstrapToken({ deviceId: deviceIdOf(node), name: node }, t.id, exp.getTime());
  return { ...t, bearer: clientFor({ name: `boot-${t.id}`, token: `${t.id}.${t.secret}` }) };
}

/** A bootstrap token fleetd did not make (as an operator or Talos would): valid for authentication. */
async function foreignToken(): Promise<{ id: string; bearer: Kube }> {
  const t = randomToken();
  await admin.core.createNamespacedSecret({
    namespace: TOKEN_NAMESPACE,
    body: {
      metadata: { name: `bootstrap-token-${t.id}` },
      type: "bootstrap.kubernetes.io/token",
      stringData: { "token-id": t.id, "token-secret": t.secret, "usage-bootstrap-authentication": "true", "auth-extra-groups": "system:bootstrappers:nodes" },
    },
  });
  return { id: t.id, bearer: clientFor({ name: `boot-${t.id}`, token: `${t.id}.${t.secret}` }) };
}

function crb(name: string, role: string, groups: string[]): k8s.V1ClusterRoleBinding {
  return {
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
    subjects: groups.map((g) => ({ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: g })),
  };
}

function approvalBody(csr: k8s.V1CertificateSigningRequest, reason: string): k8s.V1CertificateSigningRequest {
  return { ...csr, status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), { type: "Approved", status: "True", reason, message: reason, lastUpdateTime: new Date() }] } };
}

function cli(args: string[]): { status: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8", timeout: 60_000 });
  return { status: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

before(async () => {
  cp = await startControlPlane();
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  admin = kubeFromConfig(kc);
  store = new SqliteAttestationStore(join(work, "state.db"));

  await admin.core.createNamespace({ body: { metadata: { name: "fleetd" } } });
  await admin.core.createNamespacedServiceAccount({ namespace: "fleetd", body: { metadata: { name: "talos-config-server" } } });
  for (const pass of [1, 2]) {
    const r = cli(["kube", "setup", "--kubeconfig", cp.kubeconfig]);
    assert.equal(r.status, 0, r.stderr);
    if (pass === 2) setupOutput = r.stdout.trim().split("\n");
  }
  gateKube = await asServiceAccount("fleetd", "talos-config-server");

  // Talos's control plane: bootstrap tokens may create CSRs ...
  await admin.rbac.createClusterRoleBinding({ body: crb("system-bootstrap-node-bootstrapper", "system:node-bootstrapper", ["system:bootstrappers:nodes", "system:nodes"]) });
  // ... and, before the auto-approve bindings exist, the policy must be in force (policies load asynchronously):
  // probe with a dry-run approval by the admin until it is refused.
  const probeToken = await foreignToken();
  const probe = await submit(probeToken.bearer, "probe", makeCsr("/O=not-nodes/CN=probe").pem);
  await poll("the approval policy to be in force", async () => {
    try {
      await admin.certificates.replaceCertificateSigningRequestApproval({ name: "probe", dryRun: "All", body: approvalBody(probe, "Probe") });
      return undefined;
    } catch (e) {
      return kubeStatus(e) !== undefined && kubeStatus(e)! >= 400 && kubeStatus(e)! < 500 ? true : undefined;
    }
  }, 60_000);
  // ... and the bindings that let kube-controller-manager's approver auto-approve (Talos's and the generic one).
  await admin.rbac.createClusterRoleBinding({ body: crb("system-bootstrap-approve-node-client-csr", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", ["system:bootstrappers:nodes"]) });
  await admin.rbac.createClusterRoleBinding({ body: crb("fleetd-it-bootstrappers-nodeclient", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", ["system:bootstrappers"]) });
  await admin.rbac.createClusterRoleBinding({ body: crb("system-bootstrap-node-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", ["system:nodes"]) });

  gate = startCsrGate({ watch: false, kube: gateKube, store, journal, log: pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" }), intervalMs: 3600_000, tokenGraceMs: 0 });
}, { timeout: 60 * 60_000 });

after(async () => {
  await gate?.stop();
  await store?.close();
  await cp?.stop();
  rmSync(work, { recursive: true, force: true });
});

test("fleetd kube setup applies the RBAC and the approval policy, idempotently (the second run replaces)", async () => {
  assert.deepEqual(setupOutput.map((l) => l.split(/\s+/)[0]), ["replaced", "replaced", "replaced", "replaced", "replaced", "replaced"]);
  const p = await admin.admission.readValidatingAdmissionPolicy({ name: "fleetd-kubelet-bootstrap-csr-approval" });
  assert.equal(p.spec?.failurePolicy, "Fail");
  // the policy compiled: no type-checking warnings reported in its status
  assert.deepEqual(p.status?.typeChecking?.expressionWarnings ?? [], []);
  const b = await admin.admission.readValidatingAdmissionPolicyBinding({ name: "fleetd-kubelet-bootstrap-csr-approval" });
  assert.deepEqual(b.spec?.validationActions, ["Deny"]);
});

test("the right CSR is approved by fleetd and signed by the cluster CA; the token is spent and its Secret deleted", async () => {
  const t = await fleetdToken("worker-1");
  const secret = await admin.core.readNamespacedSecret({ namespace: TOKEN_NAMESPACE, name: `bootstrap-token-${t.id}` });
  const field = (k: string) => Buffer.from(secret.data?.[k] ?? "", "base64").toString();
  assert.equal(secret.type, "bootstrap.kubernetes.io/token");
  assert.equal(field("usage-bootstrap-authentication"), "true");
  assert.equal(field("usage-bootstrap-signing"), "");
  assert.match(field("expiration"), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  assert.equal(secret.metadata?.labels?.["fleetd.io/node"], "worker-1");

  const { pem, keyFile } = makeCsr("/O=system:nodes/CN=system:node:worker-1");
  const created = await submit(t.bearer, "good", pem);
  assert.equal(created.spec.username, `system:bootstrap:${t.id}`);
  const r = await gate.sync();
  assert.ok(r.approved.includes("good"), JSON.stringify(r));
  const approved = await read("good");
  assert.equal(cond(approved, "Approved")?.reason, APPROVED_REASON);
  const certB64 = await poll("kube-controller-manager to sign the approved CSR", async () => (await read("good")).status?.certificate);
  const cert = new X509Certificate(Buffer.from(certB64, "base64"));
  assert.ok(cert.verify(new X509Certificate(cp.caPem).publicKey), "issued by the cluster CA");
  assert.match(cert.subject, /CN=system:node:worker-1/);
  writeFileSync(join(work, "worker-1.crt"), Buffer.from(certB64, "base64"));
  writeFileSync(join(work, "worker-1.key.path"), keyFile);

  assert.equal(await store.nodeForBootstrapToken(t.id), undefined, "the store's token record is spent");
  const j = journal.about("good");
  assert.equal(j.length, 1);
  assert.equal(j[0]?.node, "worker-1");
  assert.equal(j[0]?.entry.kind, "success");

  // the certificate is out: the next pass deletes the token Secret (grace 0 here)
  const r2 = await gate.sync();
  assert.ok(r2.tokensDeleted.includes(t.id), JSON.stringify(r2));
  await assert.rejects(admin.core.readNamespacedSecret({ namespace: TOKEN_NAMESPACE, name: `bootstrap-token-${t.id}` }), (e) => kubeStatus(e) === 404);
  assert.ok(journal.entries.some((e) => e.node === "worker-1" && e.entry.summary.includes(`bootstrap token ${t.id} deleted`)));
});

test("an approved token's Secret stays for the grace period after issue (the kubelet still reads its CSR); an expired one goes", async () => {
  let clock = Date.now();
  const slow = startCsrGate({ watch: false, kube: gateKube, store, journal, log: pino({ level: "silent" }), intervalMs: 3600_000, tokenGraceMs: 3600_000, now: () => new Date(clock) });
  try {
    const used = await fleetdToken("worker-5", 3 * 3600_000);
    const unused = await fleetdToken("worker-6", 3 * 3600_000);
    await submit(used.bearer, "graceful", makeCsr("/O=system:nodes/CN=system:node:worker-5").pem);
    assert.ok((await slow.sync()).approved.includes("graceful"));
    await poll("the certificate", async () => (await read("graceful")).status?.certificate);
    const soon = await slow.sync();
    assert.deepEqual(soon.tokensDeleted, [], "within the grace period nothing is deleted");
    // the kubelet can still read its CSR with the token
    assert.ok((await used.bearer.certificates.readCertificateSigningRequest({ name: "graceful" })).status?.certificate);
    clock += 3600_000 + 1000;
    assert.deepEqual((await slow.sync()).tokensDeleted, [used.id], "after the grace period the used token goes, the unused one stays");
    clock += 2 * 3600_000;
    assert.deepEqual((await slow.sync()).tokensDeleted, [unused.id], "an expired fleetd token goes");
    assert.ok(journal.entries.some((e) => e.node === "worker-6" && /expired/.test(e.entry.summary)));
  } finally {
    await slow.stop();
  }
});

test("another node's name, extra usages, SANs, a wrong O, a foreign token: each denied with its reason and journalled", async () => {
  const t = await fleetdToken("worker-2");
  const foreign = await foreignToken();
  const cases: { name: string; as: Kube; subject: string; addext?: string[]; usages?: string[]; check: string; node: string | undefined }[] = [
    { name: "other-node", as: t.bearer, subject: "/O=system:nodes/CN=system:node:worker-3", check: "csr.subject.cn", node: "worker-2" },
    { name: "extra-usage", as: t.bearer, subject: "/O=system:nodes/CN=system:node:worker-2", usages: ["digital signature", "client auth", "server auth"], check: "csr.usages", node: "worker-2" },
    { name: "with-sans", as: t.bearer, subject: "/O=system:nodes/CN=system:node:worker-2", addext: ["subjectAltName=DNS:worker-2.example,IP:10.0.0.2"], check: "csr.san.dns", node: "worker-2" },
    { name: "wrong-o", as: t.bearer, subject: "/O=system:masters/CN=system:node:worker-2", check: "csr.subject.o", node: "worker-2" },
    { name: "foreign-token", as: foreign.bearer, subject: "/O=system:nodes/CN=system:node:worker-2", check: "csr.token.unknown", node: undefined },
  ];
  for (const c of cases) await submit(c.as, c.name, makeCsr(c.subject, c.addext).pem, c.usages);
  const r = await gate.sync();
  for (const c of cases) {
    assert.ok(r.denied.includes(c.name), `${c.name} denied in ${JSON.stringify(r)}`);
    const csr = await read(c.name);
    const denied = cond(csr, "Denied");
    assert.equal(denied?.reason, DENIED_REASON, c.name);
    assert.match(denied?.message ?? "", new RegExp(c.check.replace(/\./g, "\\.")), c.name);
    assert.equal(cond(csr, "Approved"), undefined, `${c.name} is not approved by anyone`);
    assert.equal(csr.status?.certificate, undefined, `${c.name} is not signed`);
    const j = journal.about(c.name);
    assert.equal(j.length, 1, c.name);
    assert.equal(j[0]?.node, c.node, c.name);
    assert.equal(j[0]?.entry.kind, "danger");
    assert.ok(j[0]?.entry.reasons?.some((x) => x.check === c.check), `${c.name}: journal reasons ${JSON.stringify(j[0]?.entry.reasons)}`);
  }
  // the SAN case names the IP too
  assert.match(cond(await read("with-sans"), "Denied")?.message ?? "", /csr\.san\.ip/);
  // denials do not spend the token: worker-2 may still send the right CSR
  assert.equal((await store.nodeForBootstrapToken(t.id))?.name, "worker-2");
  // a CSR that already has a condition is not judged again
  const again = await gate.sync();
  for (const c of cases) assert.ok(!again.denied.includes(c.name) && !again.approved.includes(c.name));
});

test("creation order, not the name: a leaked token's CSR named to sort first, created after the kubelet's, is denied; the kubelet's is approved", async () => {
  const t = await fleetdToken("worker-17");
  const kubelet = await submit(t.bearer, "node-csr-zz-worker-17", makeCsr("/O=system:nodes/CN=system:node:worker-17").pem);
  await sleep(1100); // a later creationTimestamp (one-second resolution)
  const squatter = await submit(t.bearer, "aaa-squatter-worker-17", makeCsr("/O=system:nodes/CN=system:node:worker-17").pem);
  assert.ok(new Date(squatter.metadata!.creationTimestamp!).getTime() > new Date(kubelet.metadata!.creationTimestamp!).getTime());
  const r = await gate.sync();
  assert.ok(r.approved.includes("node-csr-zz-worker-17"), JSON.stringify(r));
  assert.ok(r.denied.includes("aaa-squatter-worker-17"), JSON.stringify(r));
  assert.match(cond(await read("aaa-squatter-worker-17"), "Denied")?.message ?? "", /csr\.token\.unknown/, "the token was spent by the kubelet's CSR");
});

test("two CSRs of one token created in the same second: neither is approved (contested), the token is not spent", async () => {
  const t = await fleetdToken("worker-18");
  let pair: k8s.V1CertificateSigningRequest[] = [];
  for (let attempt = 0; attempt < 5; attempt++) {
    while (Date.now() % 1000 > 300) await sleep(20); // early in a second, so both land in it
    pair = await Promise.all(["a", "b"].map((x) => submit(t.bearer, `same-second-${attempt}-${x}`, makeCsr("/O=system:nodes/CN=system:node:worker-18").pem)));
    if (String(pair[0]!.metadata!.creationTimestamp) === String(pair[1]!.metadata!.creationTimestamp)) break;
    await gate.sync(); // straddled a second: the earlier is approved — start over with a new token
    pair = [];
    Object.assign(t, await fleetdToken("worker-18"));
  }
  assert.equal(pair.length, 2, "two CSRs in one second");
  const r = await gate.sync();
  for (const c of pair) {
    assert.ok(r.denied.includes(c.metadata!.name!), JSON.stringify(r));
    assert.match(cond(await read(c.metadata!.name!), "Denied")?.message ?? "", /csr\.token\.contested/);
  }
  assert.equal((await store.nodeForBootstrapToken(t.id))?.name, "worker-18", "the token is not spent");
});

test("a token holder flooding the gate with bad CSRs: each is denied, only the first five are journalled, the fifth says so", async () => {
  const t = await fleetdToken("worker-20");
  const names = Array.from({ length: 8 }, (_, i) => `flood-${i}`);
  for (const n of names) await submit(t.bearer, n, makeCsr("/O=system:nodes/CN=system:node:worker-21").pem);
  const r = await gate.sync();
  for (const n of names) assert.ok(r.denied.includes(n), n);
  const entries = journal.entries.filter((e) => /kubelet bootstrap CSR flood-\d /.test(e.entry.summary));
  assert.equal(entries.length, 5, entries.map((e) => e.entry.summary).join("\n"));
  assert.match(entries[4]!.entry.summary, new RegExp(`further denials for bootstrap token ${t.id} are not journalled for 60 min`));
  for (const n of names) assert.equal(cond(await read(n), "Denied")?.reason, DENIED_REASON, `${n} is denied on the CSR even when not journalled`);
});

test("a renewal by system:node:x and a CSR for another signer are left alone (kcm approves the renewal)", async () => {
  const certPem = readFileSync(join(work, "worker-1.crt"), "utf8");
  const keyPem = readFileSync(readFileSync(join(work, "worker-1.key.path"), "utf8"), "utf8");
  const node = clientFor({ name: "worker-1", certData: Buffer.from(certPem).toString("base64"), keyData: Buffer.from(keyPem).toString("base64") });
  const renewal = await submit(node, "renewal", makeCsr("/O=system:nodes/CN=system:node:worker-1").pem);
  assert.equal(renewal.spec.username, "system:node:worker-1");
  const other = await submit(admin, "other-signer", makeCsr("/CN=some-client").pem, ["digital signature", "client auth"], "kubernetes.io/kube-apiserver-client");
  assert.ok(other.spec.username);
  const r = await gate.sync();
  for (const n of ["renewal", "other-signer"]) assert.ok(!r.approved.includes(n) && !r.denied.includes(n), n);
  // kube-controller-manager's approver handles the renewal (the policy lets a node's own request pass)
  const approved = await poll("kcm to approve the renewal", async () => cond(await read("renewal"), "Approved"));
  assert.equal(approved.reason, "AutoApproved");
  const o = await read("other-signer");
  assert.equal(o.status?.conditions?.some((c) => c.reason === APPROVED_REASON || c.reason === DENIED_REASON) ?? false, false);
  assert.ok(!journal.entries.some((e) => /renewal|other-signer/.test(e.entry.summary)));
});

test("an approval by anyone but fleetd's service account is refused by the admission policy", async () => {
  const t = await fleetdToken("worker-4");
  const csr = await submit(t.bearer, "victim", makeCsr("/O=system:nodes/CN=system:node:worker-4").pem);
  // an operator's account with every approval right RBAC can give
  await admin.core.createNamespace({ body: { metadata: { name: "ops" } } });
  await admin.core.createNamespacedServiceAccount({ namespace: "ops", body: { metadata: { name: "approver" } } });
  await admin.rbac.createClusterRole({
    body: {
      metadata: { name: "ops-csr-approver" },
      rules: [
        { apiGroups: ["certificates.k8s.io"], resources: ["certificatesigningrequests", "certificatesigningrequests/approval"], verbs: ["get", "list", "update"] },
        { apiGroups: ["certificates.k8s.io"], resources: ["signers"], resourceNames: [KUBELET_CLIENT_SIGNER], verbs: ["approve"] },
      ],
    },
  });
  await admin.rbac.createClusterRoleBinding({
    body: { metadata: { name: "ops-csr-approver" }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "ops-csr-approver" }, subjects: [{ kind: "ServiceAccount", namespace: "ops", name: "approver" }] },
  });
  const identities: [string, Kube][] = [
    ["kube-controller-manager's approver (certificate-controller)", await asServiceAccount("kube-system", "certificate-controller")],
    ["an operator's service account with approve rights", await asServiceAccount("ops", "approver")],
    ["the cluster admin (system:masters)", admin],
  ];
  for (const [who, kube] of identities) {
    const current = await read("victim");
    await assert.rejects(
      kube.certificates.replaceCertificateSigningRequestApproval({ name: "victim", body: approvalBody(current, "NotFleetd") }),
      (e: unknown) => {
        const status = kubeStatus(e);
        assert.equal(status, 403, `${who}: status ${status}`);
        assert.match(String((e as { body?: unknown }).body ?? (e as Error).message), POLICY_MESSAGE, who);
        return true;
      },
      who,
    );
    assert.equal(cond(await read("victim"), "Approved"), undefined, `${who} did not approve`);
  }
  assert.ok(csr.metadata?.name);
  // fleetd's gate may
  const r = await gate.sync();
  assert.ok(r.approved.includes("victim"), JSON.stringify(r));
  assert.equal(cond(await read("victim"), "Approved")?.reason, APPROVED_REASON);
});

test("a kubelet client CSR from a requester that is neither a bootstrap token nor the node itself is never approved: kcm's approver and admins are refused", async () => {
  // An identity allowed to create nodeclient CSRs (a controller's service account, say): kcm's approver would
  // approve its system:node:<any> CSR under `nodeclient`.
  await admin.core.createNamespace({ body: { metadata: { name: "svc" } } });
  await admin.core.createNamespacedServiceAccount({ namespace: "svc", body: { metadata: { name: "requester" } } });
  await admin.rbac.createClusterRoleBinding({
    body: { metadata: { name: "svc-requester-nodeclient" }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient" }, subjects: [{ kind: "ServiceAccount", namespace: "svc", name: "requester" }] },
  });
  await admin.rbac.createClusterRoleBinding({
    body: { metadata: { name: "svc-requester-bootstrapper" }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "system:node-bootstrapper" }, subjects: [{ kind: "ServiceAccount", namespace: "svc", name: "requester" }] },
  });
  const requester = await asServiceAccount("svc", "requester");
  const csr = await submit(requester, "svc-for-worker-19", makeCsr("/O=system:nodes/CN=system:node:worker-19").pem);
  assert.equal(csr.spec.username, "system:serviceaccount:svc:requester");
  // kcm's approver tries (its sync loop runs every few seconds) and is refused; the CSR stays unapproved.
  await poll("kcm's approver to be refused for svc-for-worker-19", async () => (new RegExp(`${POLICY_MESSAGE.source}; system:serviceaccount:kube-system:certificate-controller may not approve svc-for-worker-19`).test(cp.logs()) ? true : undefined), 60_000);
  assert.equal(cond(await read("svc-for-worker-19"), "Approved"), undefined, "kcm did not approve it");
  // ... and the cluster admin is refused too.
  await assert.rejects(
    admin.certificates.replaceCertificateSigningRequestApproval({ name: "svc-for-worker-19", body: approvalBody(await read("svc-for-worker-19"), "Admin") }),
    (e: unknown) => kubeStatus(e) === 403 && POLICY_MESSAGE.test(String((e as { body?: unknown }).body ?? (e as Error).message)),
  );
  // The gate does not approve it either: its requester holds no fleetd token.
  const r = await gate.sync();
  assert.ok(!r.approved.includes("svc-for-worker-19"), JSON.stringify(r));
  assert.equal(cond(await read("svc-for-worker-19"), "Approved"), undefined);
});

test("kube-controller-manager's approver approved no bootstrap CSR (every approval of one is fleetd's), though it tried", async () => {
  const all = await admin.certificates.listCertificateSigningRequest();
  const bootstrap = all.items.filter((c) => c.spec.username?.startsWith("system:bootstrap:"));
  assert.ok(bootstrap.length >= 8, `${bootstrap.length} bootstrap CSRs`);
  for (const c of bootstrap) {
    const a = cond(c, "Approved");
    if (a) assert.equal(a.reason, APPROVED_REASON, `${c.metadata?.name} approved by ${a.reason}`);
  }
  // kcm's approver did try, and was refused (its sync errors carry the policy's message)
  assert.match(cp.logs(), POLICY_MESSAGE);
});

test("two replicas: the gate runs only on the Lease holder, one approval per CSR; the other takes over when it steps down", async () => {
  const { LeaderElector, runWhileLeader } = await import("@fleetd/platform/kube");
  const replicas = ["replica-a", "replica-b"].map((identity) => {
    const elector = new LeaderElector({ kube: admin, namespace: "fleetd", name: "fleetd-config-server-it", identity, leaseDurationSeconds: 4, renewDeadlineSeconds: 3, retryPeriodSeconds: 1 });
    const own = new MemoryJournal();
    let starts = 0;
    let running: CsrGate | undefined;
    const detach = runWhileLeader(elector, {
      start() {
        starts++;
        running = startCsrGate({ watch: false, kube: gateKube, store, journal: own, log: pino({ level: "silent" }), intervalMs: 200, tokenGraceMs: 3600_000 });
      },
      async stop() {
        const g = running;
        running = undefined;
        await g?.stop();
      },
    });
    elector.start();
    return { identity, elector, journal: own, detach, starts: () => starts };
  });
  const approvals = (csr: string) => replicas.flatMap((r) => r.journal.about(csr).filter((e) => e.entry.kind === "success").map(() => r.identity));
  try {
    const t = await fleetdToken("worker-7");
    await submit(t.bearer, "ha-one", makeCsr("/O=system:nodes/CN=system:node:worker-7").pem);
    await poll("a replica's gate to approve ha-one", async () => cond(await read("ha-one"), "Approved"));
    await sleep(1500); // several more passes of any gate that runs
    const leader = replicas.find((r) => r.elector.isLeader());
    assert.ok(leader, "one replica leads");
    assert.deepEqual(approvals("ha-one"), [leader.identity], "approved once, by the leader's gate");
    assert.equal(replicas.reduce((n, r) => n + r.starts(), 0), 1, "only one gate ever started");
    assert.equal((await read("ha-one")).status?.conditions?.filter((c) => c.type === "Approved").length, 1);

    // the leader steps down (as on SIGTERM): the other replica's gate takes over and approves the next CSR once
    await leader.detach();
    await leader.elector.stop();
    const other = replicas.find((r) => r !== leader)!;
    await poll("the other replica to lead", async () => (other.elector.isLeader() ? true : undefined), 30_000);
    const t2 = await fleetdToken("worker-8");
    await submit(t2.bearer, "ha-two", makeCsr("/O=system:nodes/CN=system:node:worker-8").pem);
    await poll("the new leader's gate to approve ha-two", async () => cond(await read("ha-two"), "Approved"));
    await sleep(1000);
    assert.deepEqual(approvals("ha-two"), [other.identity]);
    assert.equal((await read("ha-two")).status?.conditions?.filter((c) => c.type === "Approved").length, 1);
  } finally {
    for (const r of replicas) {
      await r.detach();
      await r.elector.stop();
    }
  }
});

test("even without a Lease, two gates racing on one CSR approve it once (the approval carries the resourceVersion read)", async () => {
  const mk = () => new MemoryJournal();
  const [ja, jb] = [mk(), mk()];
  const a = startCsrGate({ watch: false, kube: gateKube, store, journal: ja, log: pino({ level: "silent" }), intervalMs: 3600_000, tokenGraceMs: 3600_000 });
  const b = startCsrGate({ watch: false, kube: gateKube, store, journal: jb, log: pino({ level: "silent" }), intervalMs: 3600_000, tokenGraceMs: 3600_000 });
  try {
    await Promise.all([a.sync(), b.sync()]); // each gate's first pass (run at start) is over before the CSR exists
    const t = await fleetdToken("worker-9");
    await submit(t.bearer, "race", makeCsr("/O=system:nodes/CN=system:node:worker-9").pem);
    const [ra, rb] = await Promise.all([a.sync(), b.sync()]);
    const winners = [ra, rb].filter((r) => r.approved.includes("race")).length;
    assert.equal(winners, 1, `one gate approved: ${JSON.stringify([ra, rb])}; conditions: ${JSON.stringify((await read("race")).status?.conditions)}`);
    assert.equal((await read("race")).status?.conditions?.filter((c) => c.type === "Approved").length, 1);
    assert.equal([...ja.about("race"), ...jb.about("race")].filter((e) => e.entry.kind === "success").length, 1, "one approval journalled");
  } finally {
    await a.stop();
    await b.stop();
  }
});

test("the watch: a new CSR is decided on its creation event, long before the resync (interval 1 h here)", async () => {
  const watching = startCsrGate({ kube: gateKube, store, journal, log: pino({ level: "silent" }), intervalMs: 3600_000, tokenGraceMs: 3600_000 });
  try {
    await watching.sync(); // the start-up pass is behind us: what follows is the watch's doing
    const t = await fleetdToken("worker-watch");
    const { pem } = makeCsr("/O=system:nodes/CN=system:node:worker-watch");
    const started = Date.now();
    await submit(t.bearer, "watched", pem);
    const reason = await pollValue("the watching gate to approve CSR watched", async () => cond(await read("watched"), "Approved")?.reason, { timeoutMs: 30_000, intervalMs: 20 });
    const ms = Date.now() - started;
    assert.equal(reason, APPROVED_REASON);
    assert.equal(await store.nodeForBootstrapToken(t.id), undefined, "the token is spent");
    console.log(`[csr-gate] a new CSR was decided ${ms} ms after it was created (by the watch; the resync interval is 1 h)`);
  } finally {
    await watching.stop();
  }
});
