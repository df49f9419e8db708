/**
 * The Kubernetes-backed AttestationStore passes the same contract as SQLite (shared/testkit/src/stateContract.ts),
 * against a real kube-apiserver: each contract case gets a fresh namespace. Plus what only this backend has:
 * objects labelled as fleetd's, named from hashes, the record a Secret; and two store instances (two replicas)
 * racing on one install code through the API server: one wins. netbox-script's HandlerStore contract runs here too.
 */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { kubeFromConfig, loadKube, type Kube } from "@fleetd/platform/kube";
import { handlerStoreContract, storeContract } from "@fleetd/testkit/stateContract";
import { KubeAttestationStore, KubeHandlerStore, objectName } from "@fleetd/platform/state";
import { SharedBundleState } from "@fleetd/talos-config-server/ha/sharedBundle";
import { CaUnavailable } from "@fleetd/talos-config-server/ha/leaderIssuer";
import { addCa, emptyBundleState, recordIssuance, createCaCertificate } from "@fleetd/platform/pki";
import { newSoftwareSigner } from "@fleetd/testkit/softwareSigner";
import { listPending, stateSource } from "@fleetd/cli";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";

let cp: ControlPlane;
let kube: Kube;
let n = 0;

before(async () => {
  cp = await startControlPlane();
  kube = loadKube(cp.kubeconfig);
}, { timeout: 60 * 60_000 });
after(async () => {
  await cp?.stop();
});

async function freshNamespace(): Promise<string> {
  const name = `fleetd-store-${process.pid}-${++n}`;
  await kube.core.createNamespace({ body: { metadata: { name } } });
  return name;
}

storeContract("kubernetes (Secrets)", async () => new KubeAttestationStore({ kube, namespace: await freshNamespace() }));
// each instance its own client: two replicas on one namespace
handlerStoreContract("kubernetes (Secrets)", async () => {
  const namespace = await freshNamespace();
  return async () => new KubeHandlerStore({ kube: kubeFromConfig(kube.config), namespace });
});

test("kubernetes store: records are fleetd-labelled Secrets named by hash; nothing secret in names or labels", async () => {
  const namespace = await freshNamespace();
  const s = new KubeAttestationStore({ kube, namespace });
  await s.putInstallCode({ codeHash: "ab".repeat(32), node: { deviceId: 7, name: "worker-1" }, uuid: "u", sourceAddress: "a", config: "machine: {token: s3cret}", expiresAt: Date.now() + 60_000 });
  const list = await kube.core.listNamespacedSecret({ namespace, labelSelector: "fleetd.io/owner=fleetd" });
  assert.equal(list.items.length, 1);
  const secret = list.items[0];
  assert.equal(secret?.metadata?.name, objectName("install-code", "ab".repeat(32)));
  assert.match(secret?.metadata?.name ?? "", /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  assert.equal(secret?.metadata?.labels?.["fleetd.io/kind"], "install-code");
  assert.equal(secret?.type, "fleetd.io/attestation-state");
  assert.doesNotMatch(JSON.stringify(secret?.metadata ?? {}), /worker-1|s3cret/);
});

test("kubernetes store: two replicas (two clients) racing on one install code and one session: one winner each", async () => {
  const namespace = await freshNamespace();
  const a = new KubeAttestationStore({ kube, namespace });
  const b = new KubeAttestationStore({ kube: kubeFromConfig(kube.config), namespace });
  await a.putInstallCode({ codeHash: "cd".repeat(32), node: { deviceId: 8, name: "n" }, uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: Date.now() + 60_000 });
  const now = Date.now();
  const claims = await Promise.all([...Array.from({ length: 6 }, (_, i) => a.claimInstallCode("cd".repeat(32), `A${i}`, now, 60_000)), ...Array.from({ length: 6 }, (_, i) => b.claimInstallCode("cd".repeat(32), `B${i}`, now, 60_000))]);
  assert.equal(claims.filter(Boolean).length, 1);
  await a.createSession({ id: "x", node: { deviceId: 8, name: "n" }, mode: "provision", nonce: "", claimsHash: "", akName: "", akPublic: "", secretHashes: [], ekBindings: [], data: {}, state: "challenged", createdAt: now, expiresAt: now + 60_000 });
  const moves = await Promise.all([a, b, a, b, a, b].map((s) => s.transitionSession("x", "challenged", "evidenced", {}, now)));
  assert.equal(moves.filter(Boolean).length, 1);
});

test("shared CA bundle records: a new signer merges the file with them; a replica whose write was overtaken cannot save (fencing)", async () => {
  const namespace = await freshNamespace();
  const ca = await createCaCertificate({ signer: newSoftwareSigner(), commonName: "fencing CA", notBefore: new Date(Date.now() - 3600_000), lifetimeDays: 365 });
  const file = addCa(emptyBundleState(), ca.pem, new Date(Date.now() - 3600_000));
  const fp = file.cas[0]?.fingerprint ?? "";
  const old = new SharedBundleState(kube, namespace, "old");
  const loaded = await old.load(file);
  const issued = recordIssuance(loaded, { issuerFingerprint: fp, at: new Date(), notAfter: new Date(Date.now() + 86_400_000) });
  await old.save(issued);
  // a new leader starts from the operator's file (no records) and gets the old leader's records
  const next = new SharedBundleState(kubeFromConfig(kube.config), namespace, "next");
  const merged = await next.load(file);
  assert.equal(merged.cas[0]?.lastNotAfter?.getTime(), issued.cas[0]?.lastNotAfter?.getTime());
  // the old leader, not knowing it lost the Lease, tries to record another issuance: refused, nothing released
  const again = recordIssuance(issued, { issuerFingerprint: fp, at: new Date(), notAfter: new Date(Date.now() + 2 * 86_400_000) });
  await assert.rejects(old.save(again), (e: unknown) => e instanceof CaUnavailable && e.code === "not-leader");
  await next.save(again);
});

test("fleetd pending reads the Kubernetes-backed state when the configuration has server.ha", async () => {
  const namespace = await freshNamespace();
  await new KubeAttestationStore({ kube, namespace }).recordPendingEk({ binding: "ab".repeat(32), serial: "STRANGER-7", macs: ["02:00:00:00:00:07"], sourceAddress: "10.0.0.7" }, Date.now(), 1000);
  const file = join(mkdtempSync(join(tmpdir(), "fleetd-pending-")), "fleetd.yaml");
  writeFileSync(file, stringify({ server: { ha: { kubeconfig: cp.kubeconfig, namespace, identity: "x" } } }));
  const src = stateSource(file, {});
  assert.deepEqual(src, { kind: "kubernetes", kubeconfig: cp.kubeconfig, namespace });
  const rows = await listPending(src);
  assert.deepEqual(rows.map((r) => [r.ekBinding, r.serial, r.count]), [["ab".repeat(32), "STRANGER-7", 1]]);
});
