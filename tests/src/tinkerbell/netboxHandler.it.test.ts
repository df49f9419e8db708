/**
 * NetBox → netbox-script → Tinkerbell, for real: a NetBox 4.7 whose RQ worker delivers the webhooks, the
 * handler configured with a management cluster (a real kube-apiserver with Tinkerbell v0.25.0's CRDs), and the
 * objects it creates read back from the API server. desired_action provision yields Hardware, Templates, the
 * BMC Machine and the Workflow; a re-provision replaces the finished Workflow; refusals (no proven MAC, vault:
 * credentials) are journalled in NetBox with the reason and not retried; the intent log names the Workflow;
 * decommission goes to the injected retire function.
 */
import { nodeRef } from "../harness/nodeRef.js";
import { strict as assert } from "node:assert";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import { pino } from "pino";
import { startHandler, toHandlerConfig, type Handler, type RetireRequest } from "@fleetd/netbox-script";
import { loadKube, type Kube } from "@fleetd/platform/kube";
import { NetBoxInventory, patchDevice, readJournal } from "@fleetd/platform/netbox";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { installTinkerbellCrds } from "../harness/tinkerbellCrds.js";
import { kubernetesSection } from "./fixtures.js";
import { fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { Decisions, device, handlerNodesText, requestAction } from "../netbox/handlerFixture.js";

const NS = "tinkerbell";
let f: Fleet;
let cp: ControlPlane;
let kube: Kube;
let h: Handler | undefined;
const decisions = new Decisions();
const retired: RetireRequest[] = [];

const tink = (plural: string) => ({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural });
type Obj = { metadata: { name: string; labels?: Record<string, string> }; spec: Record<string, unknown> };
const list = async (plural: string, labelSelector = "") => ((await kube.custom.listNamespacedCustomObject({ ...tink(plural), labelSelector })) as { items: Obj[] }).items;

before(async () => {
  [f, cp] = await Promise.all([startFleet(), startControlPlane()]);
  await installTinkerbellCrds(cp);
  kube = loadKube(cp.kubeconfig);
  await kube.core.createNamespace({ body: { metadata: { name: NS } } });
  await kube.core.createNamespace({ body: { metadata: { name: "fleetd" } } });

  const adminCfg = f.configFile(f.nb.authorization.replace(/^Bearer /, ""));
  assert.equal(fleetd(["netbox", "setup", "--config", adminCfg]).code, 0);
  const nodesFile = join(f.dir, "tink-nodes.yaml");
  // worker-1's BMC is referenced through vault: here (the example uses its own Secret): the refusal test below
  const vaultRef = 'credentials: "vault:kv/fleetd/bmc/worker-1"';
  const text = handlerNodesText().replace('credentials: "secret:tinkerbell/fleetd-bmc-worker-1"', vaultRef);
  assert.ok(text.includes(vaultRef), "the example names worker-1's own BMC Secret");
  writeFileSync(nodesFile, text);
  const apply = fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]);
  assert.equal(apply.code, 0, apply.stderr);
  // What a passing attestation records: the proven MAC on the cabled interface (NetBox keeps it uppercase).
  const inv = new NetBoxInventory(f.client(f.handler.token), { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
  await inv.recordAttestation(await nodeRef(f.admin, "edge-1"), { verdict: "pass", at: new Date(), macs: ["0C:C4:7A:AA:00:31"] });
  await inv.recordAttestation(await nodeRef(f.admin, "worker-1"), { verdict: "pass", at: new Date(), macs: ["0C:C4:7A:AA:00:21"] });

  const caFile = join(f.dir, "server-ca.pem");
  writeFileSync(caFile, cp.caPem);
  const cfg = toHandlerConfig(f.config(f.handler.token, {
    handler: { listen: { host: "127.0.0.1", port: f.handlerPort }, stateDir: join(f.dir, "tink-state"), nodesFile, reconcileIntervalSeconds: 3600 },
    kubernetes: kubernetesSection(cp.kubeconfig, NS, caFile),
  } as never));
  h = await startHandler(cfg, {
    logger: pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" }),
    onDecision: (e) => decisions.push(e),
    retire: async (r) => void retired.push(r),
  });
}, { timeout: 60 * 60_000 });

after(async () => {
  await h?.stop();
  await Promise.all([f?.nb.stop(), cp?.stop()]);
});

async function request(name: string, action: string, token = f.alice.token) {
  const d = await device(f, name);
  const mark = decisions.events.length;
  await requestAction(f, token, name, action);
  const e = await decisions.wait(mark, (x) => x.deviceId === d.id && x.decision.outcome !== "ignore", `${action} ${name}`);
  return { d, e };
}

test("desired_action provision in NetBox yields Hardware, Templates, Machine and the Workflow the real CRDs accept; the intent log and the journal name it", async () => {
  const { d, e } = await request("edge-1", "provision");
  assert.equal(e.decision.outcome, "dispatch");
  const wfs = await list("workflows", "fleetd.io/node=edge-1");
  assert.equal(wfs.length, 1);
  const wf = wfs[0]!;
  assert.deepEqual(wf.spec["hardwareMap"], { device_1: "0c:c4:7a:aa:00:31", fleetd_workflow: wf.metadata.name });
  assert.deepEqual(wf.spec["bootOptions"], { toggleAllowNetboot: true, bootMode: "netboot" }, "edge-1 has an AMT BMC");
  const hw = (await list("hardware", "fleetd.io/node=edge-1"))[0]!;
  assert.deepEqual((hw.spec["interfaces"] as { dhcp: unknown }[])[0]!.dhcp, { mac: "0c:c4:7a:aa:00:31", hostname: "edge-1", arch: "x86_64", uefi: true, ip: { address: "10.20.0.31", netmask: "255.255.255.0", gateway: "10.20.0.1" } });
  assert.deepEqual(hw.spec["disks"], [{ device: "/dev/sda" }]);
  const m = (await kube.custom.getNamespacedCustomObject({ group: "bmc.tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "machines", name: "edge-1" })) as Obj;
  assert.deepEqual(m.spec["connection"], { host: "10.20.1.31", port: 623, insecureTLS: true, authSecretRef: { name: "fleetd-bmc-edge-1", namespace: NS },
    providerOptions: { preferredOrder: ["IntelAMT"], intelAMT: { port: 16992, hostScheme: "http" } } });
  assert.deepEqual((await list("templates", "fleetd.io/owner=fleetd")).map((t) => t.metadata.name).sort(), ["fleetd-attest", "fleetd-provision", "fleetd-wipe"], "intake off; no unattested wipe");

  const intent = (await h!.intents.all()).find((i) => i.deviceId === d.id && i.action === "provision");
  assert.deepEqual(intent?.effect, { effect: "workflow", workflow: wf.metadata.name, created: true, deleted: [] });
  assert.equal((await device(f, "edge-1")).cf["desired_action"], null);
  const journal = await readJournal(f.admin, d.id);
  assert.ok(journal.some((j) => j.kind === "success" && j.comments.includes(`Tinkerbell Workflow ${wf.metadata.name} created`)), JSON.stringify(journal));
});

test("re-provision replaces the finished Workflow; while one runs, the request is refused with the reason in the journal", async () => {
  const [old] = await list("workflows", "fleetd.io/node=edge-1");
  // tink-server's report of a running agent (the status subresource, as admin)
  const setState = (name: string, state: string) => kube.custom.patchNamespacedCustomObjectStatus({ ...tink("workflows"), name, body: { status: { state } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
  await setState(old!.metadata.name, "RUNNING");
  const busy = await request("edge-1", "attest");
  assert.equal(busy.e.decision.outcome, "dispatch");
  const j1 = await readJournal(f.admin, busy.d.id);
  assert.ok(j1.some((j) => j.kind === "danger" && j.comments.includes(`Workflow ${old!.metadata.name} (RUNNING) is still in progress`) && j.comments.includes("[workflow-in-progress]")), JSON.stringify(j1.map((j) => j.comments)));
  assert.equal((await device(f, "edge-1")).cf["desired_action"], null, "a refusal is final for the request: cleared, not retried");

  await setState(old!.metadata.name, "SUCCESS");
  await request("edge-1", "provision");
  const now = await list("workflows", "fleetd.io/node=edge-1");
  assert.equal(now.length, 1);
  assert.notEqual(now[0]!.metadata.name, old!.metadata.name);
  const intent = (await h!.intents.all()).filter((i) => i.deviceId === busy.d.id && i.action === "provision").at(-1);
  assert.deepEqual(intent?.effect?.effect === "workflow" && intent.effect.deleted, [`${old!.metadata.name} (SUCCESS, finished)`]);
});

test("refusals: vault: BMC credentials, and a node with no proven MAC — journalled with the reason, nothing created", async () => {
  const w = await request("worker-1", "provision");
  assert.ok((await readJournal(f.admin, w.d.id)).some((j) => j.kind === "danger" && /vault: is not supported by this deployment.*\[credentials-unsupported\]/.test(j.comments)));
  assert.equal((await list("workflows", "fleetd.io/node=worker-1")).length, 0);

  const l = await request("legacy-1", "provision"); // TPM 1.2: fleetd installs nothing on it, refused before any effect
  assert.ok(l.e.decision.outcome === "refuse" && l.e.decision.code === "tpm12-no-provision");
  const m = await request("legacy-1", "provision", f.mallory.token); // the reviewer's attack: an unprivileged "provision" became a wipe
  assert.ok(m.e.decision.outcome === "refuse" && m.e.decision.code === "tpm12-no-provision");
  assert.ok((await readJournal(f.admin, l.d.id)).some((j) => j.kind === "danger" && /fleetd does not install it.*\[tpm12-no-provision\]/.test(j.comments)));
  const nw = await request("legacy-1", "wipe"); // a group member's wipe, but no TPM 1.2 intake has proven a boot MAC
  assert.ok(nw.e.decision.outcome === "refuse" && nw.e.decision.code === "boot-mac-unproven");
  assert.equal((await list("hardware", "fleetd.io/node=legacy-1")).length, 0);
  assert.equal((await list("workflows", "fleetd.io/node=legacy-1")).length, 0);
});

test("a TPM 1.2 node's wipe with a boot MAC its TPM 1.2 intake proved: Hardware on exactly that MAC and a fleetd-wipe Workflow whose first action attests", async () => {
  const legacy = await device(f, "legacy-1");
  const mac = "b0:7b:25:00:12:80";
  // what the attestation server writes after a passing TPM 1.2 intake (the attestation account is the handler's here)
  await patchDevice(f.client(f.handler.token), legacy.id, { custom_fields: { boot_mac: mac } }, null, "fleetd: TPM 1.2 intake passed");
  const no = await request("legacy-1", "wipe", f.mallory.token);
  assert.ok(no.e.decision.outcome === "refuse" && no.e.decision.code === "not-authorized");
  assert.equal((await list("workflows", "fleetd.io/node=legacy-1")).length, 0);
  const ok = await request("legacy-1", "wipe");
  assert.ok(ok.e.decision.outcome === "dispatch" && ok.e.decision.intent.action === "wipe", JSON.stringify(ok.e.decision));
  const hw = await list("hardware", "fleetd.io/node=legacy-1");
  assert.equal(hw.length, 1);
  assert.deepEqual(JSON.stringify(hw[0]!.spec).match(/b0:7b:25:00:12:80/g)?.length ? true : false, true, "the Hardware names the proven boot MAC");
  const wfs = await list("workflows", "fleetd.io/node=legacy-1");
  assert.equal(wfs.length, 1);
  const wf = wfs[0]!;
  assert.equal(wf.spec["templateRef"], "fleetd-wipe");
  assert.equal((wf.spec["hardwareMap"] as Record<string, string>)["device_1"], mac);
  const tpl = (await list("templates", "fleetd.io/owner=fleetd")).find((t) => t.metadata.name === "fleetd-wipe");
  const data = String((tpl?.spec as { data?: string } | undefined)?.data ?? "");
  assert.ok(data.indexOf("fleetd-attest") >= 0 && data.indexOf("fleetd-attest") < data.indexOf("wipe-disk"), "the wipe Template attests before it wipes");
});

test("decommissioning goes to the injected retire function with the request's key", async () => {
  const d = await device(f, "edge-1");
  const mark = decisions.events.length;
  await patchDevice(f.client(f.alice.token), d.id, { status: "decommissioning" }, null, "test: retire");
  await decisions.wait(mark, (x) => x.deviceId === d.id && x.decision.outcome === "dispatch", "decommission edge-1");
  assert.equal(retired.length, 1);
  assert.equal(retired[0]!.node, "edge-1");
  assert.match(retired[0]!.requestKey, new RegExp(`^decommissioning:${d.id}:\\d+$`));
  assert.deepEqual((await h!.intents.all()).find((i) => i.action === "decommission")?.effect, { effect: "retire" });
});
