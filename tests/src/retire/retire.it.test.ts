/**
 * Node retirement against a real control plane (kube-apiserver, kube-controller-manager with the disruption,
 * deployment and replicaset controllers), KWOK running the pods, and a real NetBox:
 *  - a node with a Deployment's pods under a PDB, a DaemonSet pod, bootstrap token Secrets and CSRs is
 *    cordoned, drained through the Eviction API (the PDB refuses the last pod with 429 until its replacement
 *    runs elsewhere), deleted with its records; every step is journalled in NetBox and recorded in the
 *    progress ConfigMap; the device ends `offline` with fleetd's recorded facts cleared;
 *  - a PDB that never lets go stops retirement as blocked after the eviction timeout, naming pod and PDB;
 *    re-running does not repeat the cordon, and once the operator removes the PDB it goes on;
 *  - a retirement process SIGKILLed mid-way and started again finishes without repeating completed steps.
 *  - NetBox down at the last step: the pass fails there (nothing earlier runs again) and completes once NetBox is back.
 * The wipe Workflow and power-off Job are a stand-in (tests/src/retire/platform.ts): real ConfigMaps.
 */
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import { KubeBootstrapTokens } from "@fleetd/platform/kube";
import { patchDevice, netboxJournal } from "@fleetd/platform/netbox";
import {
  deleteClusterRecordsStep, configMapProgress, netboxRetirementInventory, progressConfigMapName, retireNode,
  runRetirementPass, STEP_NAMES, type RetirementDeps, type Step,
} from "@fleetd/platform/retire";
import { openssl } from "../harness/openssl.js";
import { fleetd } from "../netbox/fixture.js";
import { sleep } from "../harness/process.js";
import { configMapTestPlatform } from "./platform.js";
import {
  addNode, APPS_NS, daemonSetPod, deployment, journalOf, MGMT_NS, netboxDevice, pdb, poll, retireIdentity,
  runningPodsOn, startWorld, type World,
} from "./world.js";

let w: World;
const apps = () => w.kube.config.makeApiClient(k8s.AppsV1Api);

before(async () => {
  w = await startWorld();
}, { timeout: 60 * 60_000 });
after(async () => {
  await w?.stop();
});

function depsFor(owner: string, options: RetirementDeps["options"] = {}, workflowState = "running"): RetirementDeps & { platform: ReturnType<typeof configMapTestPlatform> } {
  const platform = configMapTestPlatform(w.kube, MGMT_NS, "completed", workflowState);
  return {
    workload: w.kube,
    progress: configMapProgress(w.kube, MGMT_NS),
    platform,
    inventory: netboxRetirementInventory(w.fleet.admin),
    journal: netboxJournal(w.fleet.admin),
    owner,
    options: { evictionPollMs: 300, platformPollMs: 300, evictionTimeoutMs: 90_000, budgetMs: 180_000, ...options },
  };
}

/** A bootstrap token Secret as the attestation server creates it for `node` (kube/bootstrapToken.ts). */
async function tokenSecret(id: string, node: string): Promise<void> {
  await new KubeBootstrapTokens(w.kube).create(node, { id, secret: "0123456789abcdef" }, new Date(Date.now() + 3_600_000));
}

/** A bootstrap token Secret that is not fleetd's (no managed-by label), with whatever labels and description. */
async function foreignTokenSecret(id: string, labels: Record<string, string>, description: string): Promise<void> {
  await w.kube.core.createNamespacedSecret({ namespace: "kube-system", body: {
    metadata: { name: `bootstrap-token-${id}`, namespace: "kube-system", labels },
    type: "bootstrap.kubernetes.io/token",
    stringData: { "token-id": id, "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true", description },
  } });
}

async function csr(name: string, cn: string): Promise<void> {
  const key = join(w.cp.dir, `${name}.key`);
  openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key]);
  const req = openssl(["req", "-new", "-key", key, "-subj", `/O=system:nodes/CN=${cn}`]);
  await w.kube.certificates.createCertificateSigningRequest({ body: {
    metadata: { name },
    spec: { request: Buffer.from(req.stdout).toString("base64"), signerName: "kubernetes.io/kube-apiserver-client-kubelet", usages: ["digital signature", "client auth"] },
  } });
}

/** A NetBox device `name` being retired (status decommissioning), shaped like worker-1. */
async function decommissioningDevice(name: string): Promise<void> {
  const w1 = await netboxDevice(w, "worker-1");
  const r = await fetch(`${w.fleet.nb.url}/api/dcim/devices/`, { method: "POST", headers: { authorization: w.fleet.nb.authorization, "content-type": "application/json" },
    body: JSON.stringify({ name, device_type: w1.device_type.id, role: w1.role.id, site: w1.site.id, status: "decommissioning" }) });
  assert.equal(r.status, 201, await r.text());
}

const secretNames = async () => (await w.kube.core.listNamespacedSecret({ namespace: "kube-system" })).items.map((s) => s.metadata?.name ?? "");
const csrNames = async () => (await w.kube.certificates.listCertificateSigningRequest()).items.map((c) => c.metadata?.name ?? "");
const nodeExists = async (name: string) => w.kube.core.readNode({ name }).then(() => true, () => false);

test("retirement of a node with running pods and a PDB: cordon, evictions through the PDB, DaemonSet pod skipped, Node/token/CSRs deleted, each step recorded, NetBox offline", async () => {
  const node = "worker-1";
  await addNode(w, node);
  await addNode(w, "spare-1", { cordoned: true }); // where replacements go once it is uncordoned
  await apps().createNamespacedDeployment({ namespace: APPS_NS, body: deployment("web", 2) });
  await w.kube.policy.createNamespacedPodDisruptionBudget({ namespace: APPS_NS, body: pdb("web", 1) });
  await poll("both web pods Running on worker-1", async () => (await runningPodsOn(w.kube, node)).filter((p) => p.metadata?.labels?.["app"] === "web").length === 2);
  await poll("the disruption controller to allow one disruption", async () =>
    (await w.kube.policy.readNamespacedPodDisruptionBudget({ name: "web", namespace: APPS_NS })).status?.disruptionsAllowed === 1);
  const agent = await daemonSetPod(w.kube, node, "agent");
  await poll("the DaemonSet pod Running", async () => (await runningPodsOn(w.kube, node)).some((p) => p.metadata?.name === agent));
  // A mirror pod (what a kubelet publishes for a static pod): the API server's copy cannot be evicted usefully.
  await w.kube.core.createNamespacedPod({ namespace: APPS_NS, body: {
    metadata: { name: `static-${node}`, namespace: APPS_NS, annotations: { "kubernetes.io/config.mirror": "0123abcd", "kubernetes.io/config.source": "file" } },
    spec: { nodeName: node, containers: [{ name: "c", image: "registry.invalid/static:1" }] },
  } });
  await tokenSecret("w1aaaa", node);
  await tokenSecret("w1bbbb", node);
  await tokenSecret("otherz", "spare-1");
  // Not fleetd's, though it names the node in its label and description: left alone.
  await foreignTokenSecret("w1ccc0", { "fleetd.io/node": node }, "fleetd bootstrap token for node worker-1");
  await csr("csr-worker-1", "system:node:worker-1");
  await csr("csr-spare-1", "system:node:spare-1");
  const dev = await netboxDevice(w, node);
  await patchDevice(w.fleet.admin, dev.id, { status: "decommissioning", custom_fields: { ldevid_serial: "0a1b2c", attested_serial: dev.serial } }, null, "test: decommission");

  const deps = depsFor("replica-a", {}, "pending");
  const running = retireNode(deps, node);
  // The PDB allows one disruption: the first web pod goes, the second is refused (429) while its replacement
  // has nowhere to run. Make room once the replacement is pending; the refused eviction then succeeds.
  await poll("a pending replacement web pod", async () =>
    (await w.kube.core.listNamespacedPod({ namespace: APPS_NS, labelSelector: "app=web" })).items.some((p) => !p.spec?.nodeName));
  await sleep(1500);
  await w.kube.core.patchNode({ name: "spare-1", body: { spec: { unschedulable: false } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
  // The Workflow is pending (the machine has not booted HookOS): the Node is kept, else its kubelet would re-register it.
  await poll("delete-node to wait for HookOS", async () => (await deps.progress.read(node))?.record.steps["delete-node"]?.state === "waiting", 120_000);
  assert.equal(await nodeExists(node), true);
  await deps.platform.set(`standin-wipe-${node}`, "running");
  await poll("the wipe step to wait on the Workflow", async () => (await deps.progress.read(node))?.record.steps.wipe?.state === "waiting", 120_000);
  await deps.platform.set(`standin-wipe-${node}`, "success");
  const report = await running;

  assert.equal(report.status, "complete", JSON.stringify(report, null, 1));
  assert.deepEqual(report.completedNow, [...STEP_NAMES]);
  const evict = report.steps.find((s) => s.name === "evict");
  assert.match(evict?.detail ?? "", /evicted now: apps\/web-[^,]+, apps\/web-/);
  const refused = /(\d+) eviction\(s\) refused by a PodDisruptionBudget/.exec(evict?.detail ?? "");
  assert.ok(refused && Number(refused[1]) >= 1, `the PDB refused at least once: ${evict?.detail}`);
  assert.match(evict?.detail ?? "", new RegExp(`skipped: apps/${agent} \\(DaemonSet agent\\), apps/static-${node} \\(mirror pod\\)`));
  // workload cluster: the web pods run on spare-1; the node and its records are gone, the others' stay
  assert.equal((await runningPodsOn(w.kube, "spare-1")).filter((p) => p.metadata?.labels?.["app"] === "web").length, 2);
  assert.equal(await nodeExists(node), false);
  const secrets = await secretNames();
  assert.ok(!secrets.includes("bootstrap-token-w1aaaa") && !secrets.includes("bootstrap-token-w1bbbb"), secrets.join(","));
  assert.ok(secrets.includes("bootstrap-token-otherz"));
  assert.ok(secrets.includes("bootstrap-token-w1ccc0"), "a token Secret that is not fleetd's is never deleted");
  const csrs = await csrNames();
  assert.ok(!csrs.includes("csr-worker-1") && csrs.includes("csr-spare-1"), csrs.join(","));
  // progress ConfigMap: labelled as fleetd's; every step done exactly once
  const cm = await w.kube.core.readNamespacedConfigMap({ name: progressConfigMapName(node), namespace: MGMT_NS });
  assert.equal(cm.metadata?.labels?.["fleetd.io/owner"], "fleetd");
  const rec = (await deps.progress.read(node))?.record;
  for (const s of STEP_NAMES) assert.equal(rec?.steps[s]?.state, "done", s);
  assert.equal(rec?.steps.cordon?.attempts, 1);
  assert.ok(rec?.finishedAt);
  // NetBox: offline, facts cleared, one journal entry per step
  const after = await netboxDevice(w, node);
  assert.equal(after.status, "offline");
  assert.equal(after.cf["ldevid_serial"] ?? null, null);
  assert.equal(after.cf["attested_serial"] ?? null, null);
  const journal = await journalOf(w, node);
  for (const s of STEP_NAMES) {
    assert.equal(journal.filter((j) => j.comments.startsWith(`retirement step ${s} done:`)).length, 1, `journal entry for ${s}\n${journal.map((j) => j.comments).join("\n")}`);
  }
  assert.ok(journal.some((j) => j.comments.startsWith("retirement step delete-node waiting: wipe Workflow standin-wipe-worker-1 is pending: the machine is not in HookOS yet")));
  assert.ok(journal.some((j) => j.comments.startsWith("retirement step wipe waiting: wipe Workflow standin-wipe-worker-1 is running")));
  assert.ok(journal.some((j) => j.comments === `retirement of ${node} complete (9 steps)`));
  // The operator's view: `fleetd retire status`.
  const kubeCfg = { kubernetes: { management: { kubeconfig: w.cp.kubeconfig, namespace: MGMT_NS }, workload: { kubeconfig: w.cp.kubeconfig } } };
  const status = fleetd(["retire", "status", node, "--config", w.fleet.configFile(undefined, kubeCfg)]);
  assert.equal(status.code, 0, status.stderr);
  assert.match(status.stdout, /^worker-1: retirement complete at /);
  for (const s of STEP_NAMES) assert.match(status.stdout, new RegExp(`^${s} +done +${s === "delete-node" || s === "wipe" ? "\\d+" : "1"} +replica-a `, "m"));
  const none = fleetd(["retire", "status", "no-such-node", "--config", w.fleet.configFile(undefined, kubeCfg)]);
  assert.equal(none.code, 1);
  assert.match(none.stderr, /no retirement record for no-such-node/);
  // A second call does nothing: the retirement is complete.
  const again = await retireNode(deps, node);
  assert.equal(again.status, "complete");
  assert.deepEqual(again.completedNow, []);
  assert.equal(await deps.platform.starts(`standin-wipe-${node}`), 1);
  process.stdout.write(`# evict: ${evict?.detail}\n`);
});

test("a PDB that never lets go (run as the documented RBAC): evict stops blocked after its timeout naming pod and PDB; re-running keeps completed steps; removing the PDB lets it go on", async () => {
  const node = "edge-1";
  await addNode(w, node);
  await apps().createNamespacedDeployment({ namespace: APPS_NS, body: deployment("db", 1) });
  await w.kube.policy.createNamespacedPodDisruptionBudget({ namespace: APPS_NS, body: pdb("db", 1) });
  await tokenSecret("edgeaa", node);
  await csr("csr-edge-1", "system:node:edge-1");
  await poll("the db pod Running on edge-1", async () => (await runningPodsOn(w.kube, node)).some((p) => p.metadata?.labels?.["app"] === "db"));
  await poll("the disruption controller to see the db pod healthy", async () =>
    (await w.kube.policy.readNamespacedPodDisruptionBudget({ name: "db", namespace: APPS_NS })).status?.currentHealthy === 1);

  // As a ServiceAccount bound to exactly netbox-script/deploy/{workload/retire-rbac,management/retire-progress-rbac}.yaml: the deployed RBAC suffices.
  const sa = await retireIdentity(w);
  await assert.rejects(sa.core.listNamespacedSecret({ namespace: APPS_NS }), (e: unknown) => (e as { code?: number }).code === 403, "and no more than that");
  const deps = { ...depsFor("replica-a", { evictionTimeoutMs: 3000, budgetMs: 2000 }), workload: sa, progress: configMapProgress(sa, MGMT_NS) };
  const first = await retireNode(deps, node);
  assert.equal(first.status, "blocked", JSON.stringify(first, null, 1));
  assert.match(first.waitingFor ?? "", /1 pod\(s\) still on edge-1 after 3 s: apps\/db-[a-z0-9-]+: eviction refused \(Cannot evict pod as it would violate the pod's disruption budget\./);
  assert.match(first.waitingFor ?? "", /PodDisruptionBudget apps\/db \(disruptionsAllowed 0, currentHealthy 1, desiredHealthy 1\)/);
  const journal = await journalOf(w, node);
  assert.ok(journal.some((j) => j.kind === "danger" && j.comments.startsWith("retirement step evict blocked: 1 pod(s) still on edge-1")), journal.map((j) => j.comments).join("\n"));
  assert.equal((await w.kube.core.readNode({ name: node })).spec?.unschedulable, true);

  const second = await retireNode(deps, node);
  assert.equal(second.status, "blocked");
  const rec = (await deps.progress.read(node))?.record;
  assert.equal(rec?.steps.cordon?.attempts, 1, "cordon not re-run");
  assert.equal(rec?.steps.evict?.attempts, 2);
  assert.equal((await journalOf(w, node)).filter((j) => j.comments.startsWith("retirement step evict blocked")).length, 1, "the same report is journalled once");

  await w.kube.policy.deleteNamespacedPodDisruptionBudget({ name: "db", namespace: APPS_NS }); // the operator's decision
  const third = await retireNode(deps, node);
  assert.equal(third.status, "waiting", JSON.stringify(third, null, 1)); // now waiting on the wipe Workflow
  assert.deepEqual(third.completedNow, ["evict", "netboot", "delete-node", "delete-cluster-records"], JSON.stringify(third, null, 1));
  assert.match(third.waitingFor ?? "", /wipe Workflow standin-wipe-edge-1 is running/);
  assert.equal(await nodeExists(node), false);
  assert.ok(!(await secretNames()).includes("bootstrap-token-edgeaa"));
  assert.ok(!(await csrNames()).includes("csr-edge-1"));
});

const childScript = join(fileURLToPath(import.meta.url), "../child.js");

function runChild(node: string, workflowState = "running"): { proc: ReturnType<typeof spawn>; done: Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> } {
  const proc = spawn(process.execPath, [childScript], {
    env: { ...process.env, FLEETD_RETIRE_KUBECONFIG: w.cp.kubeconfig, FLEETD_RETIRE_NAMESPACE: MGMT_NS, FLEETD_RETIRE_NODE: node,
      FLEETD_RETIRE_OWNER: "replica-child", FLEETD_RETIRE_NETBOX_URL: w.fleet.nb.url, FLEETD_RETIRE_NETBOX_TOKEN: w.fleet.nb.authorization.replace(/^Bearer /, ""),
      FLEETD_RETIRE_WORKFLOW_STATE: workflowState },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  proc.stdout?.on("data", (b: Buffer) => (stdout += b.toString("utf8")));
  proc.stderr?.on("data", (b: Buffer) => (stderr += b.toString("utf8")));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>((res) =>
    proc.on("close", (code, signal) => res({ code, signal, stdout, stderr })));
  return { proc, done };
}

test("SIGKILL mid-retirement, then a restart: it finishes without repeating completed steps", async () => {
  const node = "cp-1";
  await addNode(w, node);
  await apps().createNamespacedDeployment({ namespace: APPS_NS, body: {
    ...deployment("api", 1),
    spec: { ...deployment("api", 1).spec!, template: { ...deployment("api", 1).spec!.template, spec: {
      ...deployment("api", 1).spec!.template.spec!, nodeSelector: { "kubernetes.io/hostname": node } } } },
  } });
  await poll("the api pod Running on cp-1", async () => (await runningPodsOn(w.kube, node)).some((p) => p.metadata?.labels?.["app"] === "api"));
  await tokenSecret("cp1aaa", node);
  const progress = configMapProgress(w.kube, MGMT_NS);
  const platform = configMapTestPlatform(w.kube, MGMT_NS);

  const first = runChild(node);
  // Kill it while it waits on the wipe Workflow (which the test holds at "running").
  await poll("the child to reach the wipe step", async () => (await progress.read(node))?.record.steps.wipe?.state === "waiting", 120_000);
  first.proc.kill("SIGKILL");
  const killed = await first.done;
  assert.equal(killed.signal, "SIGKILL");
  assert.equal(killed.stdout, "", "killed before it could report");
  const before = (await progress.read(node))?.record;
  const doneBefore = STEP_NAMES.filter((s) => before?.steps[s]?.state === "done");
  assert.deepEqual(doneBefore, ["cordon", "evict", "netboot", "delete-node", "delete-cluster-records"]);

  // Objects that a repeated step would destroy: a Node of the same name and a new token Secret for it.
  await w.kube.core.createNode({ body: { metadata: { name: node, labels: { reappeared: "yes" } } } });
  await tokenSecret("cp1new", node);
  await platform.set(`standin-wipe-${node}`, "success");

  const second = runChild(node);
  const res = await second.done;
  assert.equal(res.code, 0, res.stderr.slice(-3000));
  const report = JSON.parse(res.stdout.trim().split("\n").pop() ?? "{}") as { status: string; completedNow: string[] };
  assert.equal(report.status, "complete");
  assert.deepEqual(report.completedNow, ["wipe", "power-off", "spire", "netbox-offline"]);
  // Not repeated: the Node and Secret created after the kill survive; the Workflow was started once.
  assert.equal((await w.kube.core.readNode({ name: node })).metadata?.labels?.["reappeared"], "yes");
  assert.ok((await secretNames()).includes("bootstrap-token-cp1new"));
  assert.ok(!(await secretNames()).includes("bootstrap-token-cp1aaa"));
  assert.equal(await platform.starts(`standin-wipe-${node}`), 1);
  const rec = (await progress.read(node))?.record;
  for (const s of doneBefore) {
    assert.equal(rec?.steps[s]?.attempts, 1, `${s} ran once`);
    assert.equal(rec?.steps[s]?.completedAt, before?.steps[s]?.completedAt, `${s} completion unchanged`);
  }
  const journal = await journalOf(w, node);
  for (const s of STEP_NAMES) assert.equal(journal.filter((j) => j.comments.startsWith(`retirement step ${s} done:`)).length, 1, s);
  assert.equal((await netboxDevice(w, node)).status, "offline");
});

test("two replicas on one node: the compare-and-swap claim lets exactly one run the step; a fresh claim makes others busy; a stale one is taken over", async () => {
  const progress = configMapProgress(w.kube, MGMT_NS);
  const journal: string[] = [];
  // The journal is not under test here: these nodes have no NetBox device.
  const deps = (owner: string, options: RetirementDeps["options"] = {}): RetirementDeps => ({
    ...depsFor(owner, options), journal: { record: async (_n, e) => void journal.push(`${owner}: ${e.summary}`) },
  });
  let runs = 0;
  let release: () => void = () => undefined;
  const gate = new Promise<void>((r) => (release = r));
  const slow: Step = { name: "cordon", summary: "a step the test holds", async run() { runs++; await gate; return { done: true, detail: "ran" }; } };
  const a = runRetirementPass(deps("replica-a"), "cas-1", [slow]);
  const b = runRetirementPass(deps("replica-b"), "cas-1", [slow]);
  await poll("one replica's claim", async () => (await progress.read("cas-1"))?.record.steps.cordon?.state === "claimed");
  const c = await runRetirementPass(deps("replica-c"), "cas-1", [slow]);
  assert.equal(c.status, "busy");
  assert.match(c.waitingFor ?? "", /step cordon is claimed by replica-[ab] since /);
  release();
  const results = await Promise.all([a, b]);
  assert.deepEqual(results.map((r) => r.status).sort(), ["busy", "complete"]);
  assert.equal(runs, 1, "the step ran once");
  assert.equal((await progress.read("cas-1"))?.record.steps.cordon?.attempts, 1);

  // A claim whose holder died (older than claimTtlMs) is taken over.
  const old = new Date(Date.now() - 3_600_000).toISOString();
  await progress.write("cas-2", { node: "cas-2", startedAt: old, steps: { cordon: { state: "claimed", owner: "dead-replica", claimedAt: old, attempts: 1 } } }, undefined);
  const taken = await runRetirementPass(deps("replica-a", { claimTtlMs: 60_000 }), "cas-2", [{ ...slow, run: async () => ({ done: true, detail: "ran after takeover" }) }]);
  assert.equal(taken.status, "complete");
  const rec = (await progress.read("cas-2"))?.record.steps.cordon;
  assert.equal(rec?.owner, "replica-a");
  assert.equal(rec?.attempts, 2);
  // A record that is not fleetd's is refused, not overwritten.
  await w.kube.core.createNamespacedConfigMap({ namespace: MGMT_NS, body: { metadata: { name: progressConfigMapName("cas-3") }, data: { "progress.json": "{}" } } });
  await assert.rejects(runRetirementPass(deps("replica-a"), "cas-3", [slow]), /not labelled as fleetd's; refusing to use it/);
});

test("SIGKILL in the middle of a step (evict, held by a PDB), then a restart: the step is taken up again, the cordon is not repeated", async () => {
  const node = "kill-2";
  await decommissioningDevice(node); // a NetBox device for the journal, like the others
  await addNode(w, node);
  await apps().createNamespacedDeployment({ namespace: APPS_NS, body: {
    ...deployment("batch", 1),
    spec: { ...deployment("batch", 1).spec!, template: { ...deployment("batch", 1).spec!.template, spec: {
      ...deployment("batch", 1).spec!.template.spec!, nodeSelector: { "kubernetes.io/hostname": node } } } },
  } });
  await w.kube.policy.createNamespacedPodDisruptionBudget({ namespace: APPS_NS, body: pdb("batch", 1) });
  await poll("the batch pod Running on kill-2", async () => (await runningPodsOn(w.kube, node)).some((p) => p.metadata?.labels?.["app"] === "batch"));
  await poll("the disruption controller to see it healthy", async () =>
    (await w.kube.policy.readNamespacedPodDisruptionBudget({ name: "batch", namespace: APPS_NS })).status?.currentHealthy === 1);
  const progress = configMapProgress(w.kube, MGMT_NS);

  const first = runChild(node, "pending");
  await poll("the child to hold the evict step", async () => {
    const rec = (await progress.read(node))?.record;
    return rec?.steps.cordon?.state === "done" && rec.steps.evict?.state === "claimed";
  }, 120_000);
  await sleep(1000); // a few refused evictions
  first.proc.kill("SIGKILL");
  assert.equal((await first.done).signal, "SIGKILL");
  const held = (await progress.read(node))?.record;
  assert.equal(held?.steps.evict?.state, "claimed", "killed while the step was running");
  assert.equal(held?.steps.evict?.owner, "replica-child");
  const kept = await runningPodsOn(w.kube, node);
  assert.equal(kept.length, 1, "the PDB kept the pod");
  const original = kept[0]?.metadata?.name ?? "";

  // A repeated cordon would undo this; the PDB goes so that the eviction can succeed. A NoSchedule taint of the
  // test's own keeps the Deployment's replacement (pinned to this node) off it: without it, the uncordoned node takes
  // each replacement and the step chases them until its timeout.
  await w.kube.core.patchNode(
    { name: node, body: { spec: { unschedulable: false, taints: [{ key: "fleetd.test/no-replacement", effect: "NoSchedule" }] } } },
    k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch),
  );
  await w.kube.policy.deleteNamespacedPodDisruptionBudget({ name: "batch", namespace: APPS_NS });
  const platform = configMapTestPlatform(w.kube, MGMT_NS);
  const second = runChild(node, "pending");
  await poll("the restarted child to wait for HookOS at delete-node", async () => (await progress.read(node))?.record.steps["delete-node"]?.state === "waiting", 120_000);
  const mid = (await progress.read(node))?.record;
  assert.equal(mid?.steps.cordon?.attempts, 1, "cordon not re-run");
  assert.equal(mid?.steps.cordon?.completedAt, held?.steps.cordon?.completedAt);
  assert.equal(mid?.steps.evict?.attempts, 2, "the interrupted step was taken up again");
  assert.equal((await w.kube.core.readNode({ name: node })).spec?.unschedulable ?? false, false, "the Node is as the test left it: no second cordon");
  // (the replacement waits Pending for a node without the test's taint; the original is gone)
  assert.ok(!(await w.kube.core.listNamespacedPod({ namespace: APPS_NS })).items.some((p) => p.metadata?.name === original), `${original} was evicted`);
  await platform.set(`standin-wipe-${node}`, "success");
  const res = await second.done;
  assert.equal(res.code, 0, res.stderr.slice(-3000));
  const report = JSON.parse(res.stdout.trim().split("\n").pop() ?? "{}") as { status: string; completedNow: string[] };
  assert.equal(report.status, "complete");
  assert.deepEqual(report.completedNow, STEP_NAMES.slice(1));
  const journal = await journalOf(w, node);
  for (const s of STEP_NAMES) assert.equal(journal.filter((j) => j.comments.startsWith(`retirement step ${s} done:`)).length, 1, s);
});

test("delete-cluster-records for nodes named like the words of a token's description (node, token, for, fleetd, kubelet, bootstrap) deletes only that node's tokens and CSRs, each with a UID precondition", async () => {
  const words = ["node", "token", "for", "fleetd", "kubelet", "bootstrap"];
  const ids = ["wdnode", "wdtokn", "wdfor0", "wdflee", "wdkube", "wdboot"];
  for (const [i, n] of words.entries()) await tokenSecret(ids[i]!, n);
  await tokenSecret("wdwk02", "worker-2");
  await csr("csr-word-node", "system:node:node");
  await csr("csr-word-worker-2", "system:node:worker-2");
  const deps = depsFor("replica-words");
  const fleetdTokens = async () => (await new KubeBootstrapTokens(w.kube).list()).map((t) => t.tokenId).filter((id) => id.startsWith("wd")).sort();
  for (const [i, n] of words.entries()) {
    const r = await deleteClusterRecordsStep.run({ node: n, deps, earlier: {}, own: {} });
    assert.equal(r.done, true);
    assert.match(r.done ? r.detail ?? "" : "", new RegExp(`deleted 1 bootstrap token Secret\\(s\\) in kube-system \\(bootstrap-token-${ids[i]}\\)`), n);
    assert.deepEqual(await fleetdTokens(), [...ids.slice(i + 1), "wdwk02"].sort(), `retiring ${n} deleted only its own token`);
  }
  const csrs = await csrNames();
  assert.ok(!csrs.includes("csr-word-node") && csrs.includes("csr-word-worker-2"), csrs.join(","));
  // A delete carries the selected object's UID: another object of that name now is left alone.
  const tokens = new KubeBootstrapTokens(w.kube);
  assert.equal(await tokens.delete("wdwk02", { uid: "00000000-0000-0000-0000-000000000000" }), false);
  assert.equal(await tokens.delete("wdwk02", { node: "worker" }), false, "the node annotation must match exactly");
  assert.deepEqual(await fleetdTokens(), ["wdwk02"]);
});

test("NetBox down at the last step (netbox-offline): the pass stops there with nothing repeated, and the retirement completes when NetBox is back — each step journalled once", async () => {
  const node = "nbdown-1";
  await decommissioningDevice(node);
  await addNode(w, node);
  const deps = depsFor("replica-a", {}, "success");
  const real = deps.inventory;
  let stopped = false;
  let before: NonNullable<Awaited<ReturnType<typeof deps.progress.read>>>["record"]["steps"] = {};
  // NetBox's web server stops the moment the step begins: its read, its write and the runner's journal all fail.
  deps.inventory = { async markOffline(n) {
    if (!stopped) {
      stopped = true;
      await w.fleet.nb.stopWeb();
    }
    return real.markOffline(n);
  } };
  try {
    await assert.rejects(retireNode(deps, node), "the pass cannot journal while NetBox is down: it fails, to be run again");
    const mid = (await deps.progress.read(node))?.record;
    assert.equal(mid?.steps["netbox-offline"]?.state, "waiting");
    assert.match(mid?.steps["netbox-offline"]?.waitingFor ?? "", /^error: /);
    before = mid?.steps ?? {};
  } finally {
    await w.fleet.nb.startWeb();
  }
  const report = await retireNode(deps, node);
  assert.equal(report.status, "complete", JSON.stringify(report, null, 1));
  assert.deepEqual(report.completedNow, ["netbox-offline"]);
  const rec = (await deps.progress.read(node))?.record;
  for (const s of STEP_NAMES.filter((x) => x !== "netbox-offline")) {
    assert.equal(rec?.steps[s]?.attempts, before[s]?.attempts, `${s} not run again`);
    assert.equal(rec?.steps[s]?.completedAt, before[s]?.completedAt, `${s} completion unchanged`);
  }
  assert.equal(rec?.steps["netbox-offline"]?.attempts, 2);
  assert.equal((await netboxDevice(w, node)).status, "offline");
  const journal = await journalOf(w, node);
  for (const s of STEP_NAMES) assert.equal(journal.filter((j) => j.comments.startsWith(`retirement step ${s} done:`)).length, 1, s);
  assert.equal(journal.filter((j) => j.comments === `retirement of ${node} complete (9 steps)`).length, 1);
});
