/**
 * Two netbox-script replicas against one NetBox, electing a leader on a Lease of one real kube-apiserver: both
 * accept the webhook hints (each durably in its own queue), only the leader's worker runs, so one
 * `desired_action` yields one dispatch (one decision, one recorded intent, one Tinkerbell Workflow in the
 * management cluster with the real CRDs) even with the hint queued on both.
 * When the leader stops, the other takes over and works off what it had queued: the request was already
 * cleared in NetBox, so nothing is dispatched a second time. Those two replicas keep their queues apart (no
 * `handler.ha`: each its own SQLite store, the elector given by the test); a second pair configured with
 * `handler.ha` shares one queue and one intent record in Kubernetes: a hint the follower accepted is run by the
 * leader, and both see the same intents.
 */
import { nodeRef } from "../harness/nodeRef.js";
import { strict as assert } from "node:assert";
import { mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pino } from "pino";
import { startHandler, toHandlerConfig, type Handler } from "@fleetd/netbox-script";
import { loadKube, LeaderElector } from "@fleetd/platform/kube";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { installTinkerbellCrds } from "../harness/tinkerbellCrds.js";
import { kubernetesSection } from "../tinkerbell/fixtures.js";
import { NetBoxInventory } from "@fleetd/platform/netbox";
import { waitFor } from "../harness/ports.js";
import { fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { Decisions, device, handlerNodesText, requestAction } from "../netbox/handlerFixture.js";

const NS = "fleetd";
const TINK_NS = "tinkerbell";
let caFile = "";
const workflows = async () =>
  ((await loadKube(cp.kubeconfig).custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: TINK_NS, plural: "workflows", labelSelector: "fleetd.io/node=edge-1" })) as { items: { metadata: { name: string } }[] }).items;
let cp: ControlPlane;
let f: Fleet;
const decisions = new Decisions();
const byReplica = new Map<string, number>();
let a: Handler;
let b: Handler;
let nodesFile = "";

async function start(id: string, port: number, nodesFile: string, shared = false): Promise<Handler> {
  const stateDir = mkdtempSync(join(f.dir, `state-${id}-`));
  const lease = shared ? "fleetd-netbox-script-shared" : "fleetd-netbox-script";
  const elector = new LeaderElector({ kube: loadKube(cp.kubeconfig), namespace: NS, name: lease, identity: id, leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 0.5 });
  const cfg = toHandlerConfig(f.config(f.handler.token, {
    handler: {
      listen: { host: "127.0.0.1", port }, stateDir, nodesFile, reconcileIntervalSeconds: 3600,
      ...(shared ? { ha: { kubeconfig: cp.kubeconfig, namespace: NS, identity: id, lease } } : {}),
    },
    features: { controlPlanes: false },
    kubernetes: kubernetesSection(cp.kubeconfig, TINK_NS, caFile),
  } as never));
  return startHandler(cfg, {
    logger: pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" }),
    elector,
    onDecision: (e) => {
      byReplica.set(id, (byReplica.get(id) ?? 0) + 1);
      decisions.push(e);
    },
  });
}

const dispatches = () => decisions.events.filter((e) => e.decision.outcome === "dispatch");
const isLeader = (h: Handler) => h.elector?.isLeader() === true;

before(async () => {
  [cp, f] = await Promise.all([startControlPlane(), startFleet()]);
  await loadKube(cp.kubeconfig).core.createNamespace({ body: { metadata: { name: NS } } });
  // both replicas drive the same management cluster: real Tinkerbell CRDs, so a double dispatch would show as
  // a second Workflow
  await installTinkerbellCrds(cp);
  await loadKube(cp.kubeconfig).core.createNamespace({ body: { metadata: { name: TINK_NS } } });
  caFile = join(f.dir, "ha-server-ca.pem");
  writeFileSync(caFile, cp.caPem);
  assert.equal(fleetd(["netbox", "setup", "--config", f.configFile(f.nb.authorization.replace(/^Bearer /, ""))]).code, 0);
  nodesFile = join(f.dir, "handler-nodes.yaml");
  writeFileSync(nodesFile, handlerNodesText());
  const apply = fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]);
  assert.equal(apply.code, 0, apply.stderr);
  // what a passing attestation records: the proven MAC the Workflow names
  await new NetBoxInventory(f.client(f.handler.token), { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } })
    .recordAttestation(await nodeRef(f.admin, "edge-1"), { verdict: "pass", at: new Date(), macs: ["0C:C4:7A:AA:00:31"] });
  // a receives NetBox's webhook; b listens elsewhere (a second replica behind another address)
  a = await start("handler-a", f.handlerPort, nodesFile);
  b = await start("handler-b", 0, nodesFile);
  await waitFor("a leader", 30_000, async () => isLeader(a) || isLeader(b));
}, { timeout: 20 * 60_000 });

after(async () => {
  await a?.stop();
  await b?.stop();
  await f?.nb.stop();
  await cp?.stop();
});

test("one desired_action, the hint queued on both replicas: one dispatch, one intent; the follower decides nothing", async () => {
  assert.notEqual(isLeader(a), isLeader(b), "exactly one leader");
  const leader = isLeader(a) ? a : b;
  const follower = leader === a ? b : a;
  const w1 = await device(f, "edge-1");
  await requestAction(f, f.alice.token, "edge-1", "provision"); // NetBox's webhook goes to a
  // the hint on both sides: each replica's reconcile queues the device (the follower's worker does not run)
  await Promise.all([a.reconcile(), b.reconcile()]);
  await decisions.wait(0, (e) => e.deviceId === w1.id && e.decision.outcome === "dispatch", "provision edge-1");
  // let the leader work off everything it has for the device, then look again
  await waitFor("the leader's queue drained", 30_000, async () => !(await leader.queue.hasPendingFor(w1.id)));
  await leader.reconcile();
  await waitFor("the leader's queue drained again", 30_000, async () => !(await leader.queue.hasPendingFor(w1.id)));
  assert.equal(dispatches().length, 1, JSON.stringify(decisions.events.map((e) => [e.job.source, e.decision.outcome])));
  assert.equal((await a.intents.all()).length + (await b.intents.all()).length, 1, "one intent recorded across the replicas");
  assert.equal((await follower.intents.all()).length, 0);
  assert.equal(byReplica.get(follower === a ? "handler-a" : "handler-b") ?? 0, 0, "the follower decided nothing");
  assert.ok(await follower.queue.hasPendingFor(w1.id), "the follower kept its hint (durable; run if it leads)");
  assert.equal((await device(f, "edge-1")).cf["desired_action"], null, "the request was cleared");
  assert.equal((await workflows()).length, 1, "one Workflow in the management cluster");
});

test("the leader stops: the other leads, works off its queued hint, and dispatches nothing twice", async () => {
  const leader = isLeader(a) ? a : b;
  const follower = leader === a ? b : a;
  const w1 = await device(f, "edge-1");
  const mark = decisions.events.length;
  await leader.stop();
  await waitFor("the follower leads", 30_000, async () => isLeader(follower));
  await waitFor("the follower worked off its hint", 30_000, async () => !(await follower.queue.hasPendingFor(w1.id)));
  const after = decisions.events.slice(mark);
  assert.ok(after.length >= 1, "the new leader decided its queued hint");
  assert.ok(after.every((e) => e.decision.outcome !== "dispatch"), JSON.stringify(after.map((e) => e.decision.outcome)));
  assert.equal(dispatches().length, 1);
  assert.equal((await follower.intents.all()).length, 0);
  assert.equal((await workflows()).length, 1, "still one Workflow");
});

test("with handler.ha the replicas share one queue and one intent record: a hint queued on the follower is run by the leader", async () => {
  await a.stop().catch(() => undefined);
  await b.stop();
  const c = await start("handler-c", 0, nodesFile, true);
  const d = await start("handler-d", 0, nodesFile, true);
  try {
    await waitFor("a leader of the shared pair", 30_000, async () => isLeader(c) || isLeader(d));
    const leader = isLeader(c) ? c : d;
    const follower = leader === c ? d : c;
    const w1 = await device(f, "edge-1");
    const mark = decisions.events.length;
    const job = await follower.queue.enqueue({ id: "rc:shared-1", deviceId: w1.id, source: "reconcile", receivedAt: new Date().toISOString(), hintEvent: null });
    const e = await decisions.wait(mark, (x) => x.job.id === job.id, "the shared job");
    assert.equal(e.decision.outcome, "ignore", "nothing requested any more: the hint decides nothing by itself");
    assert.equal(byReplica.get(follower === c ? "handler-c" : "handler-d") ?? 0, 0, "the follower decided nothing");
    await waitFor("the shared queue drained", 30_000, async () => (await follower.queue.pending()).length === 0);
    // a request found by the follower's reconcile (nobody listens for NetBox's webhook now): dispatched by the
    // leader, its intent seen by both
    const mark2 = decisions.events.length;
    await requestAction(f, f.alice.token, "edge-1", "provision");
    assert.deepEqual(await follower.reconcile(), [w1.id]);
    const dispatched = await decisions.wait(mark2, (x) => x.deviceId === w1.id && x.decision.outcome === "dispatch", "provision edge-1 (shared)");
    assert.equal(dispatched.job.source, "reconcile");
    assert.equal(byReplica.get(follower === c ? "handler-c" : "handler-d") ?? 0, 0, "the follower decided nothing");
    const seen = await follower.intents.all();
    assert.deepEqual(seen.filter((i) => i.deviceId === w1.id).map((i) => i.action), ["provision"], "the follower sees the leader's intent");
    assert.deepEqual(seen, await leader.intents.all(), "one intent record");
  } finally {
    await c.stop();
    await d.stop();
  }
});
