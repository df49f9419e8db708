/**
 * The provision confirm and the workload cluster's bootstrap tokens, end to end: the attestation world (NetBox,
 * swtpm, SoftHSM2, the server) with a real control plane as the workload cluster. A provision creates the
 * node's `bootstrap-token-<id>` Secret before any config can be fetched (that such a Secret authenticates the
 * token is shown in tests/src/kube/csrGate.it.test.ts); a re-provision replaces it (the old Secret is deleted);
 * when the Secret cannot be created, the provision fails closed: no install code. A control plane (cp-1, rendered
 * from the site's secrets bundle) provisions where no cluster exists yet: Talos creates its token's Secret.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import { KubeBootstrapTokens, TOKEN_NAMESPACE, kubeFromConfig, kubeStatus, type Kube } from "@fleetd/platform/kube";
import { listDevices, readJournal } from "@fleetd/platform/netbox";
import type { BootstrapTokens } from "@fleetd/platform/fleet";
import { secretsBundleFixture, siteForBundle, writeSecretsBundle } from "@fleetd/testkit/talosConfig";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { talosGo, TALOS_VERSION } from "../talos/goTools.js";
import { runHonest } from "./machine.js";
import { NODE, startWorld, type World } from "./world.js";

let cp: ControlPlane;
let admin: Kube;
let w: World;
let bundleDir = "";
const CONTROL_PLANE = "cp-1";
/** What the server creates tokens with; a test swaps it for one without rights. */
let tokens: BootstrapTokens;

before(async () => {
  cp = await startControlPlane();
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  admin = kubeFromConfig(kc);
  tokens = new KubeBootstrapTokens(admin);
  // cp-1 (the example rack's control plane) renders with the site's secrets bundle
  bundleDir = mkdtempSync(join(tmpdir(), "fleetd-bundle-"));
  const bundle = secretsBundleFixture();
  w = await startWorld({
    talosVersion: TALOS_VERSION,
    bootstrapTokens: { create: (...a) => tokens.create(...a), delete: (id) => tokens.delete(id) },
    machines: { [CONTROL_PLANE]: {} },
    talosSite: siteForBundle(TALOS_VERSION, bundle, writeSecretsBundle(join(bundleDir, "secrets.yaml"), bundle)),
  });
}, { timeout: 60 * 60_000 });
after(async () => {
  await w?.stop();
  await cp?.stop();
  if (bundleDir) rmSync(bundleDir, { recursive: true, force: true });
});

async function secretFor(tokenId: string): Promise<k8s.V1Secret | undefined> {
  try {
    return await admin.core.readNamespacedSecret({ namespace: TOKEN_NAMESPACE, name: `bootstrap-token-${tokenId}` });
  } catch (e) {
    if (kubeStatus(e) === 404) return undefined;
    throw e;
  }
}

let firstToken = "";

test("provision creates the node's token Secret (expiring, authentication only, labelled) and records the token", async () => {
  assert.equal((await runHonest(w, "intake")).mode, "intake");
  const codesBefore = w.installCodesIssued();
  assert.equal((await runHonest(w, "provision")).mode, "provision");
  assert.equal(w.installCodesIssued(), codesBefore + 1);
  const rec = await w.store.getBootstrapToken(await w.deviceId(NODE));
  assert.ok(rec, "the store records the node's token");
  firstToken = rec.tokenId;
  const s = await secretFor(rec.tokenId);
  assert.ok(s, "the Secret exists");
  const field = (k: string) => Buffer.from(s.data?.[k] ?? "", "base64").toString();
  assert.equal(s.type, "bootstrap.kubernetes.io/token");
  assert.equal(field("token-id"), rec.tokenId);
  assert.match(field("token-secret"), /^[a-z0-9]{16}$/);
  assert.equal(Date.parse(field("expiration")), Math.floor(rec.expiresAt / 1000) * 1000, "expiration = the rendered token's expiry");
  assert.equal(field("usage-bootstrap-authentication"), "true");
  assert.equal(field("usage-bootstrap-signing"), "");
  assert.equal(s.metadata?.labels?.["fleetd.io/owner"], "fleetd");
  assert.equal(s.metadata?.annotations?.["fleetd.io/node"], NODE);
  assert.match(field("description"), new RegExp(NODE));
});

test("a re-provision creates a new token and deletes the old Secret", async () => {
  assert.equal((await runHonest(w, "provision")).mode, "provision");
  const rec = await w.store.getBootstrapToken(await w.deviceId(NODE));
  assert.ok(rec && rec.tokenId !== firstToken, "a new token");
  assert.ok(await secretFor(rec.tokenId), "the new Secret exists");
  assert.equal(await secretFor(firstToken), undefined, "the old Secret is gone");
  assert.equal(await w.store.nodeForBootstrapToken(firstToken), undefined);
});

test("when the Secret cannot be created (no rights in the cluster), the provision fails closed: no install code", async () => {
  await admin.core.createNamespace({ body: { metadata: { name: "norights" } } });
  await admin.core.createNamespacedServiceAccount({ namespace: "norights", body: { metadata: { name: "sa" } } });
  const tr = await admin.core.createNamespacedServiceAccountToken({ namespace: "norights", name: "sa", body: { spec: { audiences: [], expirationSeconds: 600 } } });
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: cp.server, caData: Buffer.from(cp.caPem).toString("base64") }],
    users: [{ name: "u", token: tr.status?.token ?? "" }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  const before = await w.store.getBootstrapToken(await w.deviceId(NODE));
  const codesBefore = w.installCodesIssued();
  tokens = new KubeBootstrapTokens(kubeFromConfig(kc));
  try {
    await assert.rejects(runHonest(w, "provision"));
  } finally {
    tokens = new KubeBootstrapTokens(admin);
  }
  assert.equal(w.installCodesIssued(), codesBefore, "no install code was stored");
  const [d] = await listDevices(w.admin, { name: NODE });
  assert.ok(d);
  const journal = (await readJournal(w.admin, d.id)).map((j) => j.comments).join("\n");
  assert.match(journal, /provision failed closed: the bootstrap token Secret could not be created \(creating bootstrap token [a-z0-9]{6} for node worker-1: API status 403\)/);
  assert.deepEqual(await w.store.getBootstrapToken(await w.deviceId(NODE)), before, "the recorded token is unchanged");
  assert.ok(before && (await secretFor(before.tokenId)), "the previous token's Secret is untouched");
});

test("a control plane provisions with no cluster to create a Secret in: Talos makes its token's Secret itself, fleetd creates none", async () => {
  // The first control plane boots before there is a cluster: no API server answers the token client.
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "none", server: "https://127.0.0.1:9", caData: Buffer.from(cp.caPem).toString("base64") }],
    users: [{ name: "u", token: "unused" }],
    contexts: [{ name: "x", cluster: "none", user: "u" }],
    currentContext: "x",
  });
  const m = w.machines[CONTROL_PLANE];
  assert.ok(m);
  tokens = new KubeBootstrapTokens(kubeFromConfig(kc));
  let code: string | undefined;
  try {
    assert.equal((await runHonest(w, "intake", {}, w.transport, m)).mode, "intake");
    const r = await runHonest(w, "provision", {}, w.transport, m);
    assert.equal(r.mode, "provision");
    code = r.installCode;
  } finally {
    tokens = new KubeBootstrapTokens(admin);
  }
  assert.match(code ?? "", /^[0-9a-f]{64}$/, "an install code was released");
  const rec = await w.store.getBootstrapToken(await w.deviceId(CONTROL_PLANE));
  assert.ok(rec, "the store records the control plane's token (the CSR gate judges its kubelet by it)");
  assert.equal(await secretFor(rec.tokenId), undefined, "fleetd created no Secret for it");
  const res = await fetch(`${w.baseUrl}/talos/config?uuid=${m.claims().uuid}&code=${code}`);
  assert.equal(res.status, 200);
  const yaml = await res.text();
  assert.match(yaml, /type: controlplane/);
  // Talos's own machinery accepts what the machine fetched as a control plane of that bundle (metal mode)
  const file = join(bundleDir, "fetched-cp-1.yaml");
  writeFileSync(file, yaml);
  const v = talosGo("validate-config", ["--strict", "--type", "controlplane", "--secrets", join(bundleDir, "secrets.yaml"), "--dump", file], true);
  const verdict = JSON.parse(v.stdout) as { valid: boolean; errors: string[] };
  assert.ok(verdict.valid, verdict.errors.join("\n"));
  assert.match(yaml, new RegExp(`token: ${rec.tokenId}\\.[a-z0-9]{16}`), "its cluster.token is the recorded token, from which Talos makes the Secret");
});
