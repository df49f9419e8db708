/**
 * The real Kubernetes control plane harness (etcd + kube-apiserver + kube-controller-manager on loopback):
 * the admin can write objects; a bootstrap token Secret makes a bearer token authenticate as
 * system:bootstrap:<id>; that user can submit a kubelet client CSR, which stays unsigned until an admin
 * approves it and is then signed by kube-controller-manager with the cluster CA.
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { openssl } from "../harness/openssl.js";
import { sleep } from "../harness/process.js";
import { pollValue } from "../harness/ports.js";

let cp: ControlPlane;
let admin: k8s.KubeConfig;
const work = mkdtempSync(join(tmpdir(), "fleetd-kube-test-"));

before(async () => {
  const t0 = Date.now();
  cp = await startControlPlane();
  admin = new k8s.KubeConfig();
  admin.loadFromFile(cp.kubeconfig);
  process.stdout.write(`# Kubernetes ${cp.version} at ${cp.server}, ready in ${Date.now() - t0} ms\n`);
}, { timeout: 60 * 60_000 }); // a cold build of the binaries can take long on 2 cores
after(async () => {
  await cp?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** A token `[a-z0-9]{6}.[a-z0-9]{16}`, as kubeadm and Talos make them. */
function bootstrapToken(): { id: string; secret: string } {
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  const pick = (n: number) => Array.from(randomBytes(n), (b) => alphabet[b % alphabet.length]).join("");
  return { id: pick(6), secret: pick(16) };
}

function tokenClient(token: string): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: cp.server, caData: Buffer.from(cp.caPem).toString("base64") }],
    users: [{ name: "u", token }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  return kc;
}

/** A raw HTTPS request with a bearer token (and no client certificate), for the status code alone. */
function statusWithToken(token: string, path: string): Promise<number> {
  const url = new URL(path, cp.server);
  return new Promise((res, rej) => {
    const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: "GET", ca: cp.caPem,
      headers: { authorization: `Bearer ${token}` }, timeout: 5000 }, (r) => {
      r.resume();
      r.on("end", () => res(r.statusCode ?? 0));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", rej);
    req.end();
  });
}

const poll = <T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> =>
  pollValue(what, probe, { timeoutMs, context: () => cp.logs().slice(-4000) });

test("the admin creates a namespace and a ConfigMap and reads it back", async () => {
  const core = admin.makeApiClient(k8s.CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: "fleetd-it" } } });
  await core.createNamespacedConfigMap({ namespace: "fleetd-it", body: { metadata: { name: "cm" }, data: { k: "v" } } });
  const cm = await core.readNamespacedConfigMap({ namespace: "fleetd-it", name: "cm" });
  assert.deepEqual(cm.data, { k: "v" });
  const ns = await core.readNamespace({ name: "fleetd-it" });
  assert.equal(ns.status?.phase, "Active");
});

test("a bootstrap token authenticates as system:bootstrap:<id>; its kubelet CSR is signed only after approval", async () => {
  const core = admin.makeApiClient(k8s.CoreV1Api);
  const rbac = admin.makeApiClient(k8s.RbacAuthorizationV1Api);
  const certsAdmin = admin.makeApiClient(k8s.CertificatesV1Api);
  const tok = bootstrapToken();
  const token = `${tok.id}.${tok.secret}`;

  // Before the Secret exists the token is not accepted (anonymous auth is off: 401).
  assert.equal(await statusWithToken(token, "/api"), 401);

  await core.createNamespacedSecret({
    namespace: "kube-system",
    body: {
      metadata: { name: `bootstrap-token-${tok.id}` },
      type: "bootstrap.kubernetes.io/token",
      stringData: {
        "token-id": tok.id,
        "token-secret": tok.secret,
        "usage-bootstrap-authentication": "true",
        "auth-extra-groups": "system:bootstrappers:nodes",
      },
    },
  });
  // What Talos's control plane creates: node bootstrappers may create CSRs.
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: "fleetd-it-node-bootstrapper" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "system:node-bootstrapper" },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: "system:bootstrappers:nodes" }],
    },
  });

  const boot = tokenClient(token);
  const review = await poll("the bootstrap token to authenticate", async () =>
    (await boot.makeApiClient(k8s.AuthenticationV1Api).createSelfSubjectReview({
      body: { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" },
    })).status?.userInfo);
  assert.equal(review.username, `system:bootstrap:${tok.id}`);
  assert.deepEqual([...(review.groups ?? [])].sort(), ["system:authenticated", "system:bootstrappers", "system:bootstrappers:nodes"]);

  // A wrong secret for the same id is refused.
  const wrong = `${tok.id}.${tok.secret.slice(0, -1)}${tok.secret.endsWith("a") ? "b" : "a"}`;
  assert.equal(await statusWithToken(wrong, "/api"), 401);
  // The bootstrap user may not read Secrets.
  assert.equal(await statusWithToken(token, "/api/v1/namespaces/kube-system/secrets"), 403);

  // The kubelet's CSR: CN=system:node:<name>, O=system:nodes, signer kube-apiserver-client-kubelet.
  const node = "fleetd-it-worker-1";
  openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", join(work, "node.key")]);
  const req = openssl(["req", "-new", "-key", join(work, "node.key"), "-subj", `/O=system:nodes/CN=system:node:${node}`]);
  assert.equal(req.status, 0, req.stderr);
  const csrName = `node-csr-${tok.id}`;
  const bootCerts = boot.makeApiClient(k8s.CertificatesV1Api);
  const created = await bootCerts.createCertificateSigningRequest({
    body: {
      metadata: { name: csrName },
      spec: {
        request: Buffer.from(req.stdout).toString("base64"),
        signerName: "kubernetes.io/kube-apiserver-client-kubelet",
        usages: ["digital signature", "client auth"],
      },
    },
  });
  assert.equal(created.spec.username, `system:bootstrap:${tok.id}`);

  // Not approved (nobody granted the auto-approval role), so not signed.
  await sleep(3000);
  const pending = await certsAdmin.readCertificateSigningRequest({ name: csrName });
  assert.equal(pending.status?.certificate, undefined);
  assert.equal((pending.status?.conditions ?? []).length, 0);

  await certsAdmin.replaceCertificateSigningRequestApproval({
    name: csrName,
    body: {
      ...pending,
      status: { conditions: [{ type: "Approved", status: "True", reason: "FleetdTest", message: "approved by the test", lastUpdateTime: new Date() }] },
    },
  });
  const certB64 = await poll("kube-controller-manager to sign the approved CSR", async () =>
    (await certsAdmin.readCertificateSigningRequest({ name: csrName })).status?.certificate);

  const certFile = join(work, "node.crt");
  writeFileSync(certFile, Buffer.from(certB64, "base64"));
  writeFileSync(join(work, "ca.crt"), cp.caPem);
  const verify = openssl(["verify", "-CAfile", join(work, "ca.crt"), "-purpose", "sslclient", certFile]);
  assert.equal(verify.status, 0, verify.stderr + verify.stdout);
  const subject = openssl(["x509", "-in", certFile, "-noout", "-subject", "-nameopt", "RFC2253"]);
  assert.equal(subject.stdout.trim(), `subject=CN=system:node:${node},O=system:nodes`);
  // The issued certificate carries the node's key.
  const certPub = openssl(["x509", "-in", certFile, "-noout", "-pubkey"]).stdout;
  const keyPub = openssl(["pkey", "-in", join(work, "node.key"), "-pubout"]).stdout;
  assert.equal(certPub, keyPub);
  assert.ok(readFileSync(certFile, "utf8").startsWith("-----BEGIN CERTIFICATE-----"));
});

test("kube-controller-manager's garbage collector deletes a dependent once its owner is gone", async () => {
  const core = admin.makeApiClient(k8s.CoreV1Api);
  const namespace = "fleetd-it-gc";
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  const owner = await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: "owner" } } });
  const ownerUid = owner.metadata?.uid;
  assert.ok(ownerUid);
  await core.createNamespacedConfigMap({
    namespace,
    body: { metadata: { name: "dependent", ownerReferences: [{ apiVersion: "v1", kind: "ConfigMap", name: "owner", uid: ownerUid }] } },
  });
  await core.deleteNamespacedConfigMap({ namespace, name: "owner" });
  await poll("the dependent ConfigMap to be collected", async () => {
    const list = await core.listNamespacedConfigMap({ namespace });
    return list.items.some((c) => c.metadata?.name === "dependent") ? undefined : true;
  });
});

test("kube-controller-manager's disruption controller reports a PodDisruptionBudget's status", async () => {
  const policy = admin.makeApiClient(k8s.PolicyV1Api);
  const namespace = "fleetd-it";
  const created = await policy.createNamespacedPodDisruptionBudget({
    namespace,
    body: { metadata: { name: "pdb" }, spec: { minAvailable: 1, selector: { matchLabels: { app: "none" } } } },
  });
  assert.equal(created.status?.observedGeneration, undefined);
  const status = await poll("the disruption controller to observe the PDB", async () => {
    const s = (await policy.readNamespacedPodDisruptionBudget({ namespace, name: "pdb" })).status;
    return s?.observedGeneration === created.metadata?.generation ? s : undefined;
  });
  // No pod matches: nothing is healthy, so no disruption is allowed.
  assert.equal(status.expectedPods, 0);
  assert.equal(status.disruptionsAllowed, 0);
});
