/**
 * netbox-script as a process (`node netbox-script/dist/main.js --config FILE`), killed (SIGKILL, by a failpoint)
 * at exact points of a dispatch and restarted on its state directory, and dispatching through a NetBox outage —
 * against a real NetBox 4.7 (its RQ worker delivers the webhooks) and a real kube-apiserver with Tinkerbell's
 * CRDs. Each time: one Workflow for the request, one intent, desired_action cleared once, each journal entry once.
 *
 * Points: after the take (desired_action cleared in NetBox, no Workflow yet: the restart resumes the taken
 * request); after the effect (the Workflow exists, nothing recorded: the restart finds the same Workflow, it is
 * not made twice). Outage: NetBox's web server stopped while a taken request waits to be resumed; the job is
 * retried with backoff and completes once NetBox is back.
 */
import { strict as assert } from "node:assert";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { stringify } from "yaml";
import { loadKube, type Kube } from "@fleetd/platform/kube";
import { SqliteHandlerStore } from "@fleetd/platform/state";
import { NetBoxInventory, readJournal } from "@fleetd/platform/netbox";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { ManagedProcess } from "../harness/managedProcess.js";
import { pollValue, waitFor } from "../harness/ports.js";
import { nodeRef } from "../harness/nodeRef.js";
import { installTinkerbellCrds } from "../harness/tinkerbellCrds.js";
import { fleetd, repoRoot, startFleet, type Fleet } from "../netbox/fixture.js";
import { device, handlerNodesText, requestAction } from "../netbox/handlerFixture.js";
import { kubernetesSection } from "./fixtures.js";

const MAIN = join(repoRoot, "netbox-script/dist/main.js");
const NS = "tinkerbell";
let f: Fleet;
let cp: ControlPlane;
let kube: Kube;
let configFile: string;
let stateDir: string;
let proc: ManagedProcess | undefined;
let n = 0;

type Obj = { metadata: { name: string; labels?: Record<string, string> } };
const workflows = async (node: string) =>
  ((await kube.custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", labelSelector: `fleetd.io/node=${node}` })) as { items: Obj[] }).items;

before(async () => {
  [f, cp] = await Promise.all([startFleet(), startControlPlane()]);
  await installTinkerbellCrds(cp);
  kube = loadKube(cp.kubeconfig);
  await kube.core.createNamespace({ body: { metadata: { name: NS } } });
  await kube.core.createNamespace({ body: { metadata: { name: "fleetd" } } });
  assert.equal(fleetd(["netbox", "setup", "--config", f.configFile(f.nb.authorization.replace(/^Bearer /, ""))]).code, 0);
  const nodesFile = join(f.dir, "restart-nodes.yaml");
  writeFileSync(nodesFile, handlerNodesText());
  const apply = fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]);
  assert.equal(apply.code, 0, apply.stderr);
  // what a passing attestation records: the proven boot MAC
  const inv = new NetBoxInventory(f.client(f.handler.token), { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
  await inv.recordAttestation(await nodeRef(f.admin, "edge-1"), { verdict: "pass", at: new Date(), macs: ["0C:C4:7A:AA:00:31"] });
  const caFile = join(f.dir, "server-ca.pem");
  writeFileSync(caFile, cp.caPem);
  stateDir = join(f.dir, "restart-state");
  configFile = f.configFile(f.handler.token, {
    handler: { listen: { host: "127.0.0.1", port: f.handlerPort }, stateDir, nodesFile, reconcileIntervalSeconds: 5 },
    kubernetes: kubernetesSection(cp.kubeconfig, NS, caFile),
  });
  void stringify;
}, { timeout: 60 * 60_000 });

after(async () => {
  await proc?.stop();
  await Promise.all([f?.nb.stop(), cp?.stop()]);
});

/** A netbox-script process (the previous one stopped), optionally armed to kill itself at `failpoint`. */
async function start(failpoint = "", waitListening = true): Promise<ManagedProcess> {
  await proc?.stop();
  const p = new ManagedProcess("netbox-script", join(f.dir, `netbox-script-${++n}.log`), process.execPath, [MAIN, "--config", configFile], {
    env: { ...process.env, FLEETD_CONFIG: "", FLEETD_FAILPOINTS: failpoint },
  });
  proc = p;
  if (waitListening) await waitFor("netbox-script listening", 60_000, async () => (await fetch(`http://127.0.0.1:${f.handlerPort}/healthz`).then((r) => r.status, () => 0)) === 200, () => p.deadReason());
  return p;
}

const journalOf = async (id: number) => (await readJournal(f.admin, id)).map((j) => j.comments);
const count = (lines: string[], re: RegExp) => lines.filter((l) => re.test(l)).length;

/** Until edge-1's provision has run once: its Workflow exists, the request is cleared and journalled. */
async function provisioned(id: number, before: number): Promise<Obj[]> {
  return pollValue(
    "the provision dispatched and journalled",
    async () => {
      const wfs = await workflows("edge-1");
      const j = await journalOf(id);
      return wfs.length >= 1 && count(j, /Tinkerbell Workflow fleetd-edge-1-provision/) > before && (await device(f, "edge-1")).cf["desired_action"] === null ? wfs : undefined;
    },
    { timeoutMs: 180_000 },
  );
}

for (const point of ["handler.afterTake", "handler.afterEffect"]) {
  test(`killed at ${point}: after the restart the request runs once — one Workflow, one intent, one journal entry`, async () => {
    const d = await device(f, "edge-1");
    for (const w of await workflows("edge-1")) await kube.custom.deleteNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", name: w.metadata.name });
    const before = count(await journalOf(d.id), /Tinkerbell Workflow fleetd-edge-1-provision/);
    const armed = await start(point);
    await requestAction(f, f.alice.token, "edge-1", "provision");
    await armed.waitExit();
    assert.equal(armed.exit?.signal, "SIGKILL", `stopped at ${point}: ${armed.tail(5)}`);
    await start();
    const wfs = await provisioned(d.id, before);
    assert.equal(wfs.length, 1, "one Workflow");
    await new Promise((r) => setTimeout(r, 6_000)); // a reconcile pass (every 5 s) finds nothing more to do
    assert.equal((await workflows("edge-1")).length, 1, "still one Workflow");
    assert.equal(count(await journalOf(d.id), /Tinkerbell Workflow fleetd-edge-1-provision/), before + 1, "one journal entry");
    const store = new SqliteHandlerStore(join(stateDir, "store", "handler.db")); // the running handler's (WAL: a second reader is fine)
    const intents = await store.listIntents().finally(() => store.close());
    const recorded = intents.filter((i) => i.effect?.["workflow"] === wfs[0]?.metadata.name);
    assert.equal(recorded.length, 1, `one recorded intent for ${wfs[0]?.metadata.name}`);
  });
}

test("NetBox down while the handler works: the dispatch completes when NetBox is back, once", async () => {
  const d = await device(f, "edge-1");
  for (const w of await workflows("edge-1")) await kube.custom.deleteNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", name: w.metadata.name });
  const before = count(await journalOf(d.id), /Tinkerbell Workflow fleetd-edge-1-provision/);
  await start("handler.afterTake");
  await requestAction(f, f.alice.token, "edge-1", "provision");
  await proc?.waitExit(); // taken; the effect and its journal entry are still to come
  await f.nb.stopWeb();
  try {
    // it starts without NetBox (it waits for it: nothing can be decided without it, the queue on disk keeps the job)
    const p = await start("", false);
    await pollValue("netbox-script waiting for NetBox", async () => (/NetBox unavailable at start; waiting for it/.test(readFileSync(p.logFile, "utf8")) ? true : undefined), { timeoutMs: 120_000 });
    assert.equal((await workflows("edge-1")).length, 0, "nothing made without reading NetBox");
  } finally {
    await f.nb.startWeb();
  }
  const wfs = await provisioned(d.id, before);
  assert.equal(wfs.length, 1);
  assert.equal(count(await journalOf(d.id), /Tinkerbell Workflow fleetd-edge-1-provision/), before + 1, "journalled once");
});

test("netbox-script's /readyz (the service kit): ready with NetBox and its queue; not ready, naming NetBox, while NetBox's web server is down; ready again after; SIGTERM exits 0", async () => {
  const p = await start();
  const readyz = async () => {
    const r = await fetch(`http://127.0.0.1:${f.handlerPort}/readyz`);
    return { status: r.status, body: (await r.json()) as { ready: boolean; checks: Record<string, { ok: boolean; detail?: string }> } };
  };
  const up = await readyz();
  assert.equal(up.status, 200, JSON.stringify(up.body));
  assert.deepEqual(Object.keys(up.body.checks).sort(), ["netbox", "queue"]);
  await f.nb.stopWeb();
  try {
    // the NetBox probe is cached for 5 s: the answer turns within a few seconds
    const down = await pollValue("netbox-script /readyz not ready", async () => {
      const r = await readyz();
      return r.status === 503 ? r : undefined;
    }, { timeoutMs: 30_000 });
    assert.equal(down.body.ready, false);
    assert.equal(down.body.checks["netbox"]?.ok, false);
    assert.equal(down.body.checks["queue"]?.ok, true);
    assert.equal((await fetch(`http://127.0.0.1:${f.handlerPort}/healthz`)).status, 200, "alive all the same");
  } finally {
    await f.nb.startWeb();
  }
  await pollValue("netbox-script /readyz ready again", async () => ((await readyz()).status === 200 ? true : undefined), { timeoutMs: 30_000 });
  await p.stop("SIGTERM");
  assert.deepEqual(p.exit, { code: 0, signal: null }, p.tail(10));
});
