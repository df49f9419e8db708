/**
 * fleetd's Tinkerbell/Rufio effects against a real kube-apiserver with Tinkerbell v0.25.0's real v1alpha1 CRDs
 * (from the Go module cache): the objects fleetd creates are accepted by the CRD schemas and have the shapes
 * the controllers read; the one-Workflow-per-machine rules; ownership (objects not labelled as fleetd's are
 * never touched); BMC Machines per type and credentials; and the management RBAC manifest is enough (every
 * effect runs as a ServiceAccount bound to exactly that Role, with a TokenRequest token).
 * No tink-controller runs here: where a test needs a Workflow or Job to be in some state, it writes the status
 * subresource as the controller would (as admin), and says so.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import { parse as parseYaml, parseAllDocuments } from "yaml";
import { loadKube, type Kube } from "@fleetd/platform/kube";
import { TinkerbellSiteConfig, type Journal, type JournalEntry, type Node, type NodeRef, type PlatformNode } from "@fleetd/platform/fleet";
import {
  TinkerbellEffects, buildHardware, TinkerbellError, checkTemplateData, INTAKE_RULE_SET, checkNode,
  TinkerbellAdmission, type PlatformFieldCheck, followWorkflows, tinkerbellRetirementPlatform,
} from "@fleetd/platform/tinkerbell";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { installTinkerbellCrds, TINKERBELL_VERSION } from "../harness/tinkerbellCrds.js";
import { repoRoot } from "../netbox/fixture.js";

const NS = "tinkerbell";
const D = (c: string) => `sha256:${c.repeat(64)}`;
let cp: ControlPlane;
let admin: Kube;
let work: string;
let effects: TinkerbellEffects;

function site(overrides: Record<string, unknown> = {}): TinkerbellSiteConfig {
  return TinkerbellSiteConfig.parse({
    server: { url: "https://fleetd.example.internal:8443", caFile: "/unused-here" },
    images: {
      action: `registry.example.internal/fleetd/fleetd-tink-action@${D("a")}`,
      wipe: `docker.io/library/debian:bookworm-slim@${D("b")}`,
      image2disk: `quay.io/tinkerbell/actions/image2disk@${D("c")}`,
    },
    talosImageUrl: "https://factory.talos.dev/image/0123abcd/v1.13.9/metal-amd64.raw.zst",
    intake: { enabled: true },
    ...overrides,
  });
}

/** The only credentials reference accepted for a node: its own Secret in the Tinkerbell namespace (credentials.ts). */
const own = (name: string) => `secret:${NS}/fleetd-bmc-${name}`;

/** Admission's change-log check, as NetBox answers when the apply account wrote bmc and install_disk (tests/src/netbox covers the real one). */
const attributed: PlatformFieldCheck = { check: async () => [] };

function node(name: string, mac: string, bmc?: PlatformNode["bmc"]): PlatformNode {
  return { name, macs: [mac], address: "10.20.0.11/24", gateway: "10.20.0.1", installDisk: "/dev/nvme0n1", ...(bmc ? { bmc } : {}) };
}

const custom = () => admin.custom;
const tink = (plural: string) => ({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural });
const bmcApi = (plural: string) => ({ group: "bmc.tinkerbell.org", version: "v1alpha1", namespace: NS, plural });
type Obj = { metadata: { name: string; labels?: Record<string, string>; resourceVersion?: string; uid?: string }; spec: Record<string, unknown> };
/** The value at a dotted path ("spec.interfaces.0.dhcp"), for assertions on objects read back. */
function at(o: unknown, path: string): unknown {
  return path.split(".").reduce<unknown>((v, k) => (v !== null && typeof v === "object" ? (v as Record<string, unknown>)[k] : undefined), o);
}
const get = async (api: ReturnType<typeof tink>, name: string) => (await custom().getNamespacedCustomObject({ ...api, name })) as Obj;
const list = async (api: ReturnType<typeof tink>, labelSelector = "") => ((await custom().listNamespacedCustomObject({ ...api, labelSelector })) as { items: Obj[] }).items;

/** What tink-controller/tink-server would write: the Workflow's status (the status subresource, as admin). */
async function setWorkflowState(name: string, state: string, agentID?: string): Promise<void> {
  await custom().patchNamespacedCustomObjectStatus(
    { ...tink("workflows"), name, body: { status: { state, ...(agentID ? { agentID } : {}) } } },
    k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch),
  );
}

async function refusal(p: Promise<unknown>): Promise<TinkerbellError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof TinkerbellError) return e;
    throw e;
  }
  assert.fail("expected a TinkerbellError");
}

async function apiStatus(p: Promise<unknown>): Promise<number> {
  try {
    await p;
    return 200;
  } catch (e) {
    return (e as { code?: number }).code ?? -1;
  }
}

before(async () => {
  work = mkdtempSync(join(tmpdir(), "fleetd-tink-effects-"));
  cp = await startControlPlane();
  const crds = await installTinkerbellCrds(cp);
  process.stdout.write(`# Kubernetes ${cp.version}; Tinkerbell ${TINKERBELL_VERSION} CRDs: ${crds.join(", ")}\n`);
  admin = loadKube(cp.kubeconfig);
  for (const name of [NS, "fleetd", "other"]) await admin.core.createNamespace({ body: { metadata: { name } } });
  effects = new TinkerbellEffects({ kube: admin, namespace: NS, site: site(), serverCaPem: cp.caPem });
}, { timeout: 60 * 60_000 });

after(async () => {
  await cp?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

test("MACs: the CRD refuses an uppercase MAC; fleetd refuses it too (checkNode, before any builder), and also what the CRD's unanchored pattern lets through", async () => {
  const hw = buildHardware(checkNode(node("mac-check", "0c:c4:7a:00:00:01")), NS);
  const upper = structuredClone(hw);
  upper.metadata.name = "mac-upper";
  upper.spec.interfaces[0]!.dhcp.mac = "0C:C4:7A:00:00:0A";
  const upperStatus = await apiStatus(custom().createNamespacedCustomObject({ ...tink("hardware"), body: upper }));
  assert.equal(upperStatus, 422, "the Hardware CRD refuses an uppercase MAC");
  assert.equal((await refusal(Promise.resolve().then(() => buildHardware(checkNode(node("mac-upper", "0C:C4:7A:00:00:0A")), NS)))).code, "mac-not-canonical");
  // The CRD pattern ([0-9a-f]{2}[:]){5}([0-9a-f]{2}) is not anchored: a value containing a lowercase MAC passes.
  const sloppy = structuredClone(hw);
  sloppy.metadata.name = "mac-sloppy";
  sloppy.spec.interfaces[0]!.dhcp.mac = "XX0c:c4:7a:00:00:0b";
  assert.equal(await apiStatus(custom().createNamespacedCustomObject({ ...tink("hardware"), body: sloppy })), 200, "the CRD's pattern is unanchored");
  assert.equal((await refusal(Promise.resolve().then(() => buildHardware(checkNode(node("mac-sloppy", "XX0c:c4:7a:00:00:0b")), NS)))).code, "mac-not-canonical");
  await custom().deleteNamespacedCustomObject({ ...tink("hardware"), name: "mac-sloppy" });
});

test("provision creates Hardware, Templates, Machine and Workflow that the real CRDs accept, in the shapes the controllers read", async () => {
  const n = node("node-a", "0c:c4:7a:00:00:01", { type: "redfish", address: "10.30.0.11", credentials: own("node-a") });
  const started = await effects.start(n, { mode: "provision", requestId: "desired_action:1:100" });
  assert.equal(started.created, true);
  assert.match(started.name, /^fleetd-node-a-provision-[0-9a-f]{10}$/);
  assert.equal(started.machine, "node-a");

  const hw = await get(tink("hardware"), "node-a");
  assert.equal(hw.metadata.labels?.["fleetd.io/owner"], "fleetd");
  assert.equal(hw.metadata.labels?.["fleetd.io/node"], "node-a");
  const i0 = at(hw, "spec.interfaces.0");
  assert.deepEqual(at(i0, "dhcp"), { mac: "0c:c4:7a:00:00:01", hostname: "node-a", arch: "x86_64", uefi: true, ip: { address: "10.20.0.11", netmask: "255.255.255.0", gateway: "10.20.0.1" } });
  assert.equal(at(i0, "netboot.allowPXE"), true);
  assert.deepEqual(hw.spec["disks"], [{ device: "/dev/nvme0n1" }]);
  assert.deepEqual(hw.spec["bmcRef"], { apiGroup: "bmc.tinkerbell.org", kind: "Machine", name: "node-a" });
  assert.equal(at(hw, "spec.auto.enrollmentEnabled"), false);
  assert.equal(at(hw, "spec.agentID"), at(hw, "spec.interfaces.0.dhcp.mac"), "agentID: the boot MAC (tink-server never enrolls it again)");

  const templates = await list(tink("templates"), "fleetd.io/owner=fleetd");
  assert.deepEqual(templates.map((t) => t.metadata.name).sort(), ["fleetd-attest", "fleetd-intake", "fleetd-provision", "fleetd-wipe"]);
  const prov = parseYaml(String((await get(tink("templates"), "fleetd-provision")).spec["data"]));
  const data = checkTemplateData(prov, "read back");
  const actions = data.tasks[0]!.actions;
  assert.deepEqual(actions.map((a) => a.name), ["fleetd-attest", "wipe-disk", "install-talos", "fleetd-write-meta"]);
  assert.equal(data.tasks[0]!.worker, "{{ .device_1 }}");
  assert.equal(actions[0]!.environment?.["FLEETD_WORKFLOW"], "{{ .fleetd_workflow }}");
  assert.equal(actions[0]!.environment?.["FLEETD_SERVER_CA"], cp.caPem);
  assert.deepEqual(actions[0]!.namespaces, { network: "host" });
  for (const a of actions) assert.match(a.image, /@sha256:[0-9a-f]{64}$/);
  const intake = checkTemplateData(parseYaml(String((await get(tink("templates"), "fleetd-intake")).spec["data"])), "intake");
  assert.equal(intake.tasks[0]!.actions[0]!.environment?.["FLEETD_WORKFLOW"], 'enrollment-{{ .device_1 | replace ":" "-" }}');

  const wf = await get(tink("workflows"), started.name);
  assert.deepEqual(wf.spec, {
    templateRef: "fleetd-provision",
    hardwareRef: "node-a",
    hardwareMap: { device_1: "0c:c4:7a:00:00:01", fleetd_workflow: started.name },
    bootOptions: { toggleAllowNetboot: true, bootMode: "netboot" },
  });
  assert.equal(wf.metadata.labels?.["fleetd.io/mode"], "provision");

  const m = await get(bmcApi("machines"), "node-a");
  assert.deepEqual(m.spec["connection"], {
    host: "10.30.0.11", port: 623, insecureTLS: true, authSecretRef: { name: "fleetd-bmc-node-a", namespace: NS },
    providerOptions: { preferredOrder: ["gofish"], redfish: { useBasicAuth: false } },
  }, "port 623 is the CRD default (Rufio never reads it)");
  assert.equal(await apiStatus(admin.core.readNamespacedSecret({ name: "fleetd-bmc-node-a", namespace: NS })), 404, "the Secret is the operator's: fleetd references it and never writes one");

  const rs = await get(tink("workflowrulesets"), INTAKE_RULE_SET);
  assert.deepEqual(rs.spec["workflow"], { namespace: NS, addAttributes: true, disabled: false, template: { ref: "fleetd-intake", agentValue: "device_1", kvs: { fleetd_mode: "intake" } } });
});

test("the same request twice makes one Workflow; a node without a BMC gets no bootMode and no Machine", async () => {
  const n = node("node-b", "0c:c4:7a:00:00:02");
  const a = await effects.start(n, { mode: "attest", requestId: "desired_action:2:200" });
  const b = await effects.start(n, { mode: "attest", requestId: "desired_action:2:200" });
  assert.equal(a.name, b.name);
  assert.deepEqual([a.created, b.created], [true, false]);
  assert.equal((await list(tink("workflows"), "fleetd.io/node=node-b")).length, 1);
  const wf = await get(tink("workflows"), a.name);
  assert.deepEqual(wf.spec["bootOptions"], { toggleAllowNetboot: true });
  assert.equal(a.machine, undefined);
  assert.equal((await get(tink("hardware"), "node-b")).spec["bmcRef"], undefined);

  // Two replicas handling the same request at once: one Workflow, one creation, the same name for both.
  const both = await Promise.all([0, 1].map(() => effects.start(node("node-b2", "0c:c4:7a:00:00:12"), { mode: "provision", requestId: "desired_action:3:300" })));
  assert.equal(both[0]!.name, both[1]!.name);
  assert.deepEqual(both.map((x) => x.created).sort(), [false, true]);
  assert.equal((await list(tink("workflows"), "fleetd.io/node=node-b2")).length, 1);
});

test("an unfinished Workflow blocks the next with a clear reason; re-provision after it finished deletes the old and creates the new; wipe supersedes", async () => {
  const n = node("node-c", "0c:c4:7a:00:00:03");
  const first = await effects.start(n, { mode: "provision", requestId: "r1" });
  for (const state of ["", "PREPARING", "PENDING", "RUNNING", "POST"]) {
    if (state) await setWorkflowState(first.name, state, "0c:c4:7a:00:00:03"); // as tink-controller/tink-server would
    const e = await refusal(effects.start(n, { mode: "provision", requestId: "r2" }));
    assert.equal(e.code, "workflow-in-progress");
    assert.match(e.message, new RegExp(`${first.name} \\(${state || "not yet reconciled"}\\) is still in progress`));
  }
  await setWorkflowState(first.name, "SUCCESS");
  const second = await effects.start(n, { mode: "provision", requestId: "r2" });
  assert.equal(second.created, true);
  assert.deepEqual(second.deleted, [{ name: first.name, state: "SUCCESS", why: "finished" }]);
  assert.equal(await apiStatus(get(tink("workflows"), first.name)), 404, "the finished Workflow is gone");
  assert.deepEqual((await list(tink("workflows"), "fleetd.io/node=node-c")).map((w) => w.metadata.name), [second.name]);

  // A running provision: attest is refused, wipe supersedes it; a second wipe is refused while the first runs.
  await setWorkflowState(second.name, "RUNNING", "0c:c4:7a:00:00:03");
  assert.equal((await refusal(effects.start(n, { mode: "attest", requestId: "r3" }))).code, "workflow-in-progress");
  const wipe = await effects.start(n, { mode: "wipe", requestId: "r4" });
  assert.deepEqual(wipe.deleted, [{ name: second.name, state: "RUNNING", why: "superseded by wipe" }]);
  assert.equal((await get(tink("workflows"), wipe.name)).spec["templateRef"], "fleetd-wipe");
  const again = await refusal(effects.start(n, { mode: "wipe", requestId: "r5" }));
  assert.equal(again.code, "workflow-in-progress");
  for (const state of ["FAILED", "TIMEOUT"]) {
    const cur = (await list(tink("workflows"), "fleetd.io/node=node-c"))[0]!;
    await setWorkflowState(cur.metadata.name, state);
    const next = await effects.start(n, { mode: "attest", requestId: `after-${state}` });
    assert.deepEqual(next.deleted.map((d) => d.state), [state]);
  }
  assert.equal((await effects.workflowState((await list(tink("workflows"), "fleetd.io/node=node-c"))[0]!.metadata.name))?.finished, false);
});

test("admission supersedes the machine's intake Workflow (from fleetd's rule set, in any state); a Workflow not fleetd's for the machine refuses and stays", async () => {
  await effects.syncTemplates();
  const rs = await get(tink("workflowrulesets"), INTAKE_RULE_SET);
  // What tink-server's enrollment creates (TB tink/server/internal/grpc/enrollment.go).
  const mac = "0c:c4:7a:00:00:04";
  await custom().createNamespacedCustomObject({ ...tink("workflows"), body: {
    apiVersion: "tinkerbell.org/v1alpha1", kind: "Workflow",
    metadata: { name: "enrollment-0c-c4-7a-00-00-04", labels: { "tinkerbell.org/auto-enrollment": "true" },
      ownerReferences: [{ apiVersion: "tinkerbell.org/v1alpha1", kind: "WorkflowRuleSet", name: INTAKE_RULE_SET, uid: rs.metadata.uid! }] },
    spec: { templateRef: "fleetd-intake", hardwareMap: { device_1: mac, fleetd_mode: "intake" } },
  } });
  await setWorkflowState("enrollment-0c-c4-7a-00-00-04", "RUNNING", mac);
  const started = await effects.start(node("node-d", mac), { mode: "provision", requestId: "admission:node-d:1" });
  assert.deepEqual(started.deleted, [{ name: "enrollment-0c-c4-7a-00-00-04", state: "RUNNING", why: "intake superseded" }]);

  const foreign = { apiVersion: "tinkerbell.org/v1alpha1", kind: "Workflow", metadata: { name: "someone-elses" },
    spec: { templateRef: "x", hardwareRef: "elsewhere", hardwareMap: { device_1: "0c:c4:7a:00:00:05" } } };
  await custom().createNamespacedCustomObject({ ...tink("workflows"), body: foreign });
  await setWorkflowState("someone-elses", "SUCCESS");
  const e = await refusal(effects.start(node("node-e", "0c:c4:7a:00:00:05"), { mode: "provision", requestId: "x" }));
  assert.equal(e.code, "not-ours");
  assert.match(e.message, /someone-elses \(SUCCESS\) targets this machine and is not fleetd's/);
  assert.equal((await get(tink("workflows"), "someone-elses")).metadata.name, "someone-elses", "left alone");
  assert.equal(await apiStatus(get(tink("hardware"), "node-e")), 404, "nothing created for the refused start");
});

test("one MAC, one machine: a MAC in another node's (or anyone's) Hardware refuses the start; only the node's own Workflows and intakes for its boot MAC are touched", async () => {
  // mac-a has its Hardware and a running provision Workflow.
  const a = node("mac-a", "0c:c4:7a:00:0b:01");
  const wfA = await effects.start(a, { mode: "provision", requestId: "mac-a:1" });
  await setWorkflowState(wfA.name, "RUNNING", "0c:c4:7a:00:0b:01");
  const hwA = await get(tink("hardware"), "mac-a");
  // mac-b claims mac-a's MAC (a wrong boot MAC in the inventory): refused for every mode, wipe above all.
  for (const mode of ["provision", "wipe"] as const) {
    const e = await refusal(effects.start(node("mac-b", "0c:c4:7a:00:0b:01"), { mode, requestId: `mac-b:${mode}` }));
    assert.equal(e.code, "mac-in-use", mode);
    assert.match(e.message, /MAC 0c:c4:7a:00:0b:01 is already in Hardware tinkerbell\/mac-a/);
  }
  // ... also as a second MAC of its own.
  assert.equal((await refusal(effects.start({ ...node("mac-b", "0c:c4:7a:00:0b:02"), macs: ["0c:c4:7a:00:0b:02", "0c:c4:7a:00:0b:01"] }, { mode: "provision", requestId: "mac-b:2" }))).code, "mac-in-use");
  assert.equal(at(await get(tink("workflows"), wfA.name), "status.state"), "RUNNING", "mac-a's running provision is untouched");
  assert.equal((await get(tink("hardware"), "mac-a")).metadata.resourceVersion, hwA.metadata.resourceVersion, "mac-a's Hardware is untouched");
  assert.equal(await apiStatus(get(tink("hardware"), "mac-b")), 404, "no Hardware for mac-b");
  assert.equal(await apiStatus(get(bmcApi("machines"), "mac-b")), 404);
  // Hardware that is not fleetd's holds a MAC: refused the same way.
  await custom().createNamespacedCustomObject({ ...tink("hardware"), body: { apiVersion: "tinkerbell.org/v1alpha1", kind: "Hardware", metadata: { name: "theirs-c" }, spec: { interfaces: [{ dhcp: { mac: "0c:c4:7a:00:0b:03" } }] } } });
  assert.equal((await refusal(effects.start(node("mac-c", "0c:c4:7a:00:0b:03"), { mode: "provision", requestId: "mac-c" }))).code, "mac-in-use");

  // A fleetd Workflow of another node that names this node's MAC (its Hardware changed since; no Hardware holds
  // the MAC now): a wipe of mac-d does not supersede it — it refuses and leaves it.
  await custom().createNamespacedCustomObject({ ...tink("workflows"), body: {
    apiVersion: "tinkerbell.org/v1alpha1", kind: "Workflow",
    metadata: { name: "fleetd-other-provision-0000000001", labels: { "fleetd.io/owner": "fleetd", "fleetd.io/node": "other", "fleetd.io/mode": "provision" } },
    spec: { templateRef: "fleetd-provision", hardwareRef: "other", hardwareMap: { device_1: "0c:c4:7a:00:0b:04", fleetd_workflow: "fleetd-other-provision-0000000001" } },
  } });
  for (const state of ["RUNNING", "SUCCESS"]) {
    await setWorkflowState("fleetd-other-provision-0000000001", state, "0c:c4:7a:00:0b:04");
    const e = await refusal(effects.start(node("mac-d", "0c:c4:7a:00:0b:04"), { mode: "wipe", requestId: `mac-d:${state}` }));
    assert.equal(e.code, "mac-in-use", state);
    assert.equal(at(await get(tink("workflows"), "fleetd-other-provision-0000000001"), "status.state"), state, "another node's Workflow is never deleted");
  }
  assert.equal(await apiStatus(get(tink("hardware"), "mac-d")), 404);
  await custom().deleteNamespacedCustomObject({ ...tink("workflows"), name: "fleetd-other-provision-0000000001" }); // not left for the outcome tests below

  // An intake Workflow of fleetd's rule set for a MAC of the node that is not its boot MAC: left alone, refused.
  await effects.syncTemplates();
  const rs = await get(tink("workflowrulesets"), INTAKE_RULE_SET);
  await custom().createNamespacedCustomObject({ ...tink("workflows"), body: {
    apiVersion: "tinkerbell.org/v1alpha1", kind: "Workflow",
    metadata: { name: "enrollment-0c-c4-7a-00-0b-06", labels: { "tinkerbell.org/auto-enrollment": "true" },
      ownerReferences: [{ apiVersion: "tinkerbell.org/v1alpha1", kind: "WorkflowRuleSet", name: INTAKE_RULE_SET, uid: rs.metadata.uid! }] },
    spec: { templateRef: "fleetd-intake", hardwareMap: { device_1: "0c:c4:7a:00:0b:06", fleetd_mode: "intake" } },
  } });
  await setWorkflowState("enrollment-0c-c4-7a-00-0b-06", "RUNNING", "0c:c4:7a:00:0b:06");
  const e = await refusal(effects.start({ ...node("mac-e", "0c:c4:7a:00:0b:05"), macs: ["0c:c4:7a:00:0b:05", "0c:c4:7a:00:0b:06"] }, { mode: "provision", requestId: "mac-e" }));
  assert.equal(e.code, "mac-in-use");
  assert.equal(at(await get(tink("workflows"), "enrollment-0c-c4-7a-00-0b-06"), "status.state"), "RUNNING", "the other interface's intake is left alone");
  // With that MAC as the boot MAC, the intake is this node's and is superseded.
  const ok = await effects.start({ ...node("mac-e", "0c:c4:7a:00:0b:06"), macs: ["0c:c4:7a:00:0b:06", "0c:c4:7a:00:0b:05"] }, { mode: "provision", requestId: "mac-e:2" });
  assert.deepEqual(ok.deleted, [{ name: "enrollment-0c-c4-7a-00-0b-06", state: "RUNNING", why: "intake superseded" }]);
});

test("objects not labelled as fleetd's are never changed: Hardware, Template, Machine of the same name", async () => {
  const theirs = { apiVersion: "tinkerbell.org/v1alpha1", kind: "Hardware", metadata: { name: "node-f" },
    spec: { interfaces: [{ dhcp: { mac: "0c:c4:7a:00:00:0f" } }] } };
  await custom().createNamespacedCustomObject({ ...tink("hardware"), body: theirs });
  const before = await get(tink("hardware"), "node-f");
  const e = await refusal(effects.start(node("node-f", "0c:c4:7a:00:00:06"), { mode: "provision", requestId: "f" }));
  assert.equal(e.code, "not-ours");
  const afterHw = await get(tink("hardware"), "node-f");
  assert.equal(afterHw.metadata.resourceVersion, before.metadata.resourceVersion);
  // The Workflow was not created either (Hardware is ensured before it).
  assert.equal((await list(tink("workflows"), "fleetd.io/node=node-f")).length, 0);

  // A Template of fleetd's name in another namespace's copy of fleetd: counted as refused, left as it was.
  const other = new TinkerbellEffects({ kube: admin, namespace: "other", site: site(), serverCaPem: cp.caPem });
  await custom().createNamespacedCustomObject({ ...tink("templates"), namespace: "other", body: { apiVersion: "tinkerbell.org/v1alpha1", kind: "Template", metadata: { name: "fleetd-attest" }, spec: { data: "mine" } } });
  const c = await other.syncTemplates();
  assert.deepEqual(c.templates.refused.map((r) => r.name), ["fleetd-attest"]);
  assert.equal(c.templates.created.length, 3, "intake, provision, wipe (fleetd-attest refused)");
  assert.equal(((await custom().getNamespacedCustomObject({ ...tink("templates"), namespace: "other", name: "fleetd-attest" })) as Obj).spec["data"], "mine");

  // Machine.
  await custom().createNamespacedCustomObject({ ...bmcApi("machines"), namespace: "other", body: { apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Machine", metadata: { name: "node-g" }, spec: { connection: { host: "x", insecureTLS: false } } } });
  assert.equal((await refusal(other.ensureBmcMachine(node("node-g", "0c:c4:7a:00:00:07", { type: "ipmi", address: "10.30.0.7", credentials: "secret:other/fleetd-bmc-node-g" })))).code, "not-ours");
});

test("Template sync writes nothing when nothing changed, updates a changed image, refuses an unpinned one", async () => {
  const c1 = await effects.syncTemplates();
  assert.equal(c1.templates.unchanged.length, 4);
  assert.deepEqual([c1.templates.created, c1.templates.updated, c1.templates.deleted], [[], [], []]);
  const rv = (await get(tink("templates"), "fleetd-attest")).metadata.resourceVersion;
  await effects.syncTemplates();
  assert.equal((await get(tink("templates"), "fleetd-attest")).metadata.resourceVersion, rv, "an unchanged sync writes nothing");

  const changed = site({ images: { ...site().images, action: `registry.example.internal/fleetd/fleetd-tink-action@${D("e")}` }, intake: { enabled: false } });
  const eff2 = new TinkerbellEffects({ kube: admin, namespace: NS, site: changed, serverCaPem: cp.caPem });
  const c2 = await eff2.syncTemplates();
  assert.deepEqual(c2.templates.updated.sort(), ["fleetd-attest", "fleetd-provision", "fleetd-wipe"]);
  assert.deepEqual(c2.templates.deleted, ["fleetd-intake"], "intake off: its Template is pruned");
  assert.deepEqual(c2.ruleSets.deleted, [INTAKE_RULE_SET]);
  await effects.syncTemplates(); // back to the suite's configuration

  // An older fleetd's unattested wipe Template (wipe-disk with no fleetd-attest) left in the namespace is removed.
  await custom().createNamespacedCustomObject({ ...tink("templates"), namespace: NS, body: { apiVersion: "tinkerbell.org/v1alpha1", kind: "Template",
    metadata: { name: "fleetd-wipe-unattested", labels: { "fleetd.io/owner": "fleetd", "fleetd.io/template": "wipe-unattested" } }, spec: { data: "wipe-disk only" } } });
  const c3 = await effects.syncTemplates();
  assert.deepEqual(c3.templates.deleted, ["fleetd-wipe-unattested"]);
  assert.deepEqual((await list(tink("templates"), "fleetd.io/owner=fleetd")).map((t) => t.metadata.name).sort(), ["fleetd-attest", "fleetd-intake", "fleetd-provision", "fleetd-wipe"]);

  assert.throws(() => site({ images: { ...site().images, wipe: "docker.io/library/debian:bookworm-slim" } }), /pinned by digest/);
  assert.throws(() => checkTemplateData({ version: "0.1", name: "t", global_timeout: 60, tasks: [{ name: "a", worker: "{{ .device_1 }}", actions: [{ name: "x", image: "quay.io/x/y:latest", timeout: 60 }] }] }, "t"),
    (e: unknown) => e instanceof TinkerbellError && e.code === "image-not-pinned");
});

test("Rufio Machines for amt, ipmi and redfish are accepted by the real CRD; a wrong provider name is refused by it", async () => {
  const cases = [
    { type: "amt" as const, want: { preferredOrder: ["IntelAMT"], intelAMT: { port: 16992, hostScheme: "http" } } },
    { type: "ipmi" as const, want: { preferredOrder: ["ipmitool"], ipmitool: { port: 623 } } },
    { type: "redfish" as const, want: { preferredOrder: ["gofish"], redfish: { useBasicAuth: false } } },
  ];
  for (const c of cases) {
    const name = `bmc-${c.type}`;
    const r = await effects.ensureBmcMachine(node(name, "0c:c4:7a:00:01:00", { type: c.type, address: `${c.type}.bmc.example`, credentials: own(name) }));
    assert.deepEqual(r.secret, { name: `fleetd-bmc-${name}`, namespace: NS }, "the node's own Secret is referenced");
    const m = await get(bmcApi("machines"), name);
    assert.deepEqual(at(m, "spec.connection.providerOptions"), c.want, c.type);
    assert.deepEqual(at(m, "spec.connection.authSecretRef"), { name: `fleetd-bmc-${name}`, namespace: NS });
    assert.equal((await effects.ensureBmcMachine(node(name, "0c:c4:7a:00:01:00", { type: c.type, address: `${c.type}.bmc.example`, credentials: own(name) }))).result, "unchanged");
  }
  assert.equal(await apiStatus(admin.core.readNamespacedSecret({ namespace: NS, name: "fleetd-bmc-bmc-amt" })), 404, "fleetd never writes the Secret a secret: reference names");
  // The CRD's provider pattern: "redfish" is not a bmclib provider name ("gofish" is).
  const bad = { apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Machine", metadata: { name: "bad-provider" },
    spec: { connection: { host: "x", insecureTLS: true, providerOptions: { preferredOrder: ["redfish"] } } } };
  assert.equal(await apiStatus(custom().createNamespacedCustomObject({ ...bmcApi("machines"), body: bad })), 422);
  const noTls = { apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Machine", metadata: { name: "no-tls" }, spec: { connection: { host: "x" } } };
  assert.equal(await apiStatus(custom().createNamespacedCustomObject({ ...bmcApi("machines"), body: noTls })), 422, "insecureTLS is required by the CRD");
  const amtHttps = { apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Machine", metadata: { name: "amt-ftp" },
    spec: { connection: { host: "x", insecureTLS: true, providerOptions: { intelAMT: { port: 16992, hostScheme: "ftp" } } } } };
  assert.equal(await apiStatus(custom().createNamespacedCustomObject({ ...bmcApi("machines"), body: amtHttps })), 422, "AMT hostScheme is http|https");
});

test("BMC credentials: only the node's own Secret in the Tinkerbell namespace; another node's or namespace's Secret, env:, file: and vault: refused, nothing written", async () => {
  const n = node("cred-a", "0c:c4:7a:00:02:00", { type: "ipmi", address: "10.30.0.20", credentials: own("cred-a") });
  // Another node's Secret, another namespace (even with the node's own Secret name), a lookalike name.
  for (const ref of [own("cred-b"), "secret:kube-system/fleetd-bmc-cred-a", "secret:other/fleetd-bmc-cred-a", `secret:${NS}/bmc-shared`, `${own("cred-a")}-x`]) {
    const e = await refusal(effects.ensureBmcMachine({ ...n, bmc: { ...n.bmc!, credentials: ref } }));
    assert.equal(e.code, "credentials-not-own", ref);
    assert.match(e.message, new RegExp(`only secret:${NS}/fleetd-bmc-cred-a is accepted`));
  }
  // env: and file: would have fleetd read a password from its own environment or file system: refused.
  const dir = join(work, "bmc-creds");
  const { mkdirSync } = await import("node:fs");
  mkdirSync(dir);
  writeFileSync(join(dir, "username"), "root\n");
  writeFileSync(join(dir, "password"), "calvin\n");
  const envRef = "env:FLEETD_IT_CRED";
  process.env["FLEETD_IT_CRED_USERNAME"] = "root";
  process.env["FLEETD_IT_CRED_PASSWORD"] = "calvin";
  try {
    for (const ref of [envRef, `file:${dir}`]) {
      const e = await refusal(effects.ensureBmcMachine({ ...n, bmc: { ...n.bmc!, credentials: ref } }));
      assert.equal(e.code, "credentials-unsupported", ref);
      assert.doesNotMatch(e.message, /calvin/);
    }
  } finally {
    delete process.env["FLEETD_IT_CRED_USERNAME"];
    delete process.env["FLEETD_IT_CRED_PASSWORD"];
  }
  const v = await refusal(effects.ensureBmcMachine({ ...n, bmc: { ...n.bmc!, credentials: "vault:kv/bmc/cred-a" } }));
  assert.equal(v.code, "credentials-unsupported");
  assert.match(v.message, /not supported by this deployment/);
  assert.equal(await apiStatus(get(bmcApi("machines"), "cred-a")), 404, "no Machine for a refused reference");
  assert.equal(await apiStatus(admin.core.readNamespacedSecret({ namespace: NS, name: "fleetd-bmc-cred-a" })), 404, "no Secret written");
  // The node's own Secret: the Machine references it.
  assert.equal((await effects.ensureBmcMachine(n)).result, "created");
  assert.deepEqual(at(await get(bmcApi("machines"), "cred-a"), "spec.connection.authSecretRef"), { name: "fleetd-bmc-cred-a", namespace: NS });
});

test("power off: a Rufio Job the CRD accepts, one per request, its state read from the conditions", async () => {
  const n = node("node-p", "0c:c4:7a:00:03:00", { type: "amt", address: "10.30.0.30", credentials: own("node-p") });
  const job = await effects.powerOff(n, "retire:node-p:1");
  assert.equal(await effects.powerOff(n, "retire:node-p:1"), job);
  const j = await get(bmcApi("jobs"), job);
  assert.deepEqual(j.spec, { machineRef: { name: "node-p", namespace: NS }, tasks: [{ powerAction: "off" }] });
  assert.deepEqual(await effects.jobState(job), { state: "pending" });
  const setJob = (conditions: unknown[]) => custom().patchNamespacedCustomObjectStatus({ ...bmcApi("jobs"), name: job, body: { status: { conditions } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
  await setJob([{ type: "Running", status: "True" }]); // as Rufio would
  assert.deepEqual(await effects.jobState(job), { state: "running" });
  await setJob([{ type: "Failed", status: "True", message: "BMC unreachable" }]);
  assert.deepEqual(await effects.jobState(job), { state: "failed", message: "BMC unreachable" });
  await setJob([{ type: "Completed", status: "True" }]);
  assert.deepEqual(await effects.jobState(job), { state: "completed" });
  assert.equal((await refusal(effects.powerOff(node("node-q", "0c:c4:7a:00:03:01"), "x"))).code, "no-bmc");
});

test("the management RBAC manifest is enough: every effect runs as a ServiceAccount bound to exactly that Role", async () => {
  const docs = parseAllDocuments(readFileSync(join(repoRoot, "netbox-script/manifests/management-rbac.yaml"), "utf8")).map((d) => d.toJS() as { kind: string; metadata: { name: string; namespace: string }; subjects?: { name: string; namespace: string }[] });
  const role = docs.find((d) => d.kind === "Role")!;
  const binding = docs.find((d) => d.kind === "RoleBinding")!;
  assert.equal(role.metadata.namespace, NS);
  await admin.rbac.createNamespacedRole({ namespace: NS, body: role as k8s.V1Role });
  await admin.rbac.createNamespacedRoleBinding({ namespace: NS, body: binding as k8s.V1RoleBinding });
  const sa = binding.subjects![0]!;
  await admin.core.createNamespacedServiceAccount({ namespace: sa.namespace, body: { metadata: { name: sa.name } } });
  const tr = await admin.core.createNamespacedServiceAccountToken({ namespace: sa.namespace, name: sa.name, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: cp.server, caData: Buffer.from(cp.caPem).toString("base64") }],
    users: [{ name: sa.name, token: tr.status!.token }],
    contexts: [{ name: "x", cluster: "c", user: sa.name, namespace: NS }],
    currentContext: "x",
  });
  const kubeconfig = join(work, "sa.kubeconfig");
  writeFileSync(kubeconfig, kc.exportConfig());
  const asSa = loadKube(kubeconfig);
  const review = await asSa.config.makeApiClient(k8s.AuthenticationV1Api).createSelfSubjectReview({ body: { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" } });
  assert.equal(review.status?.userInfo?.username, `system:serviceaccount:${sa.namespace}:${sa.name}`);

  const eff = new TinkerbellEffects({ kube: asSa, namespace: NS, site: site({ images: { ...site().images, image2disk: `quay.io/tinkerbell/actions/image2disk@${D("9")}` } }), serverCaPem: cp.caPem });
  const synced = await eff.syncTemplates(); // list, get, patch (provision changed), create/delete as needed
  assert.deepEqual(synced.templates.updated, ["fleetd-provision"]);
  const n = node("rbac-1", "0c:c4:7a:00:04:00", { type: "redfish", address: "10.30.0.40", credentials: own("rbac-1") });
  const a = await eff.start(n, { mode: "provision", requestId: "rbac-1" });
  assert.equal(a.created, true);
  await setWorkflowState(a.name, "SUCCESS");
  const b = await eff.start({ ...n, installDisk: "/dev/sda" }, { mode: "attest", requestId: "rbac-2" }); // delete + Hardware patch
  assert.deepEqual([b.deleted.length, b.hardware], [1, "updated"]);
  assert.deepEqual(await eff.workflowState(b.name), { name: b.name, state: "", finished: false, conditions: [] });
  // following Workflow outcomes: a boot-Job restart (delete, wait for the GC, create) and the journalled mark
  // (patch). The first restart in a fresh cluster waits up to ~30 s: the garbage collector watches a new CRD's
  // objects only after its next discovery pass.
  await failBootJob(b.name, "Rufio: task failed");
  assert.deepEqual(await followWorkflows({ objects: eff.objects, journal: new Entries(), bootRetries: 1 }), { journalled: [], booted: [], restarted: [b.name], errors: [] });
  await failBootJob(b.name, "Rufio: task failed");
  assert.deepEqual(await followWorkflows({ objects: eff.objects, journal: new Entries(), bootRetries: 1 }), { journalled: [b.name], booted: [], restarted: [], errors: [] });
  const job = await eff.powerOff(n, "rbac-off");
  assert.deepEqual(await eff.jobState(job), { state: "pending" });
  // retirement's power-off after a failed Job: the failed Job deleted, the same one created again
  await custom().patchNamespacedCustomObjectStatus({ ...bmcApi("jobs"), name: job, body: { status: { conditions: [{ type: "Failed", status: "True", message: "BMC unreachable" }] } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
  const platform = tinkerbellRetirementPlatform({ effects: eff, node: async () => n, requestId: "rbac-off" });
  assert.equal(await platform.startPowerOff("rbac-1"), job);
  assert.equal(await platform.jobState(job), "running", "the new Job, not yet run");
  await eff.ensureBmcMachine({ ...n, bmc: { ...n.bmc!, address: "10.30.0.41" } }); // Machine patch
  await eff.syncTemplates();

  // ... and no more than that: no Secrets at all (fleetd never reads or writes BMC credentials), nothing outside
  // the namespace, no Workflow status writes.
  assert.equal(await apiStatus(asSa.core.listNamespacedSecret({ namespace: NS })), 403);
  assert.equal(await apiStatus(asSa.core.readNamespacedSecret({ namespace: NS, name: "fleetd-bmc-rbac-1" })), 403);
  assert.equal(await apiStatus(asSa.core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: "fleetd-bmc-rbac-2" }, stringData: { username: "u", password: "p" } } })), 403);
  assert.equal(await apiStatus(asSa.custom.listNamespacedCustomObject({ ...tink("hardware"), namespace: "other" })), 403);
  assert.equal(await apiStatus(asSa.custom.patchNamespacedCustomObjectStatus({ ...tink("workflows"), name: b.name, body: { status: { state: "SUCCESS" } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch))), 403);
});

/** The journal as the attestation server sees it (NetBox in production): entries kept in order. */
class Entries implements Journal {
  readonly entries: { node: string | undefined; entry: JournalEntry }[] = [];
  async record(node: NodeRef | string | undefined, entry: JournalEntry): Promise<void> {
    this.entries.push({ node: typeof node === "object" ? node.name : node, entry });
  }
}

const record = (name: string, bmc?: Node["bmc"]): Node => ({
  deviceId: 1, name, serial: "S", class: "talos", role: "worker", tpm: "2.0", ekBindings: [], status: "planned", desiredAction: null, macs: [], unattributed: [], switchPortWaived: false,
  address: "10.20.0.51/24", gateway: "10.20.0.1", installDisk: "/dev/nvme0n1", ...(bmc ? { bmc } : {}),
});

test("admission (talos-config-server): Hardware with the intake's boot MAC first and the provision Workflow; the intake Workflow deleted; every outcome journalled, never thrown", async () => {
  await effects.syncTemplates();
  const rs = await get(tink("workflowrulesets"), INTAKE_RULE_SET);
  // tink-server enrolled the machine by its second MAC (sorted claims put another first).
  await custom().createNamespacedCustomObject({ ...tink("workflows"), body: {
    apiVersion: "tinkerbell.org/v1alpha1", kind: "Workflow",
    metadata: { name: "enrollment-0c-c4-7a-00-05-02", labels: { "tinkerbell.org/auto-enrollment": "true" },
      ownerReferences: [{ apiVersion: "tinkerbell.org/v1alpha1", kind: "WorkflowRuleSet", name: INTAKE_RULE_SET, uid: rs.metadata.uid! }] },
    spec: { templateRef: "fleetd-intake", hardwareMap: { device_1: "0c:c4:7a:00:05:02", fleetd_mode: "intake" } },
  } });
  await setWorkflowState("enrollment-0c-c4-7a-00-05-02", "RUNNING", "0c:c4:7a:00:05:02");
  const journal = new Entries();
  const adm = new TinkerbellAdmission(effects, journal, attributed);
  await adm.admit(record("adm-1", { type: "ipmi", address: "10.30.0.51", credentials: own("adm-1") }), { macs: ["0C:C4:7A:00:05:01", "0c:c4:7a:00:05:02"], uuid: "4c4c4544-0000-0000-0000-000000000001" });
  const hw = await get(tink("hardware"), "adm-1");
  assert.deepEqual((hw.spec["interfaces"] as { dhcp: { mac: string }; netboot: { allowPXE: boolean } }[]).map((i) => [i.dhcp.mac, i.netboot.allowPXE]), [["0c:c4:7a:00:05:02", true], ["0c:c4:7a:00:05:01", false]]);
  const wfs = await list(tink("workflows"), "fleetd.io/node=adm-1");
  assert.equal(wfs.length, 1);
  assert.equal(at(wfs[0], "spec.hardwareMap.device_1"), "0c:c4:7a:00:05:02");
  assert.equal(at(wfs[0], "spec.templateRef"), "fleetd-provision");
  assert.equal(await apiStatus(get(tink("workflows"), "enrollment-0c-c4-7a-00-05-02")), 404);
  assert.equal(journal.entries.length, 1);
  assert.equal(journal.entries[0]!.entry.kind, "success");
  assert.match(journal.entries[0]!.entry.summary, new RegExp(`admission: Hardware adm-1 \\(boot MAC 0c:c4:7a:00:05:02\\) and provision Workflow ${wfs[0]!.metadata.name} created; deleted first: enrollment-0c-c4-7a-00-05-02 \\(RUNNING, intake superseded\\)`));

  // Two MACs and no intake Workflow naming one: which boots is unknown — refused in the journal, nothing created.
  await adm.admit(record("adm-2"), { macs: ["0c:c4:7a:00:06:01", "0c:c4:7a:00:06:02"], uuid: "u2" });
  assert.equal(journal.entries[1]!.entry.kind, "danger");
  assert.match(journal.entries[1]!.entry.summary, /cannot tell which of the 2 proven MACs .* boots.*\[no-proven-mac\]/);
  assert.equal(await apiStatus(get(tink("hardware"), "adm-2")), 404);
  // One MAC: it is the boot MAC. vault: credentials: refused, journalled, not thrown.
  await adm.admit(record("adm-3", { type: "redfish", address: "10.30.0.53", credentials: "vault:kv/x" }), { macs: ["0c:c4:7a:00:07:01"], uuid: "u3" });
  assert.equal(journal.entries[2]!.entry.kind, "danger");
  assert.match(journal.entries[2]!.entry.summary, /\[credentials-unsupported\]/);
  await adm.admit(record("adm-4"), { macs: ["0c:c4:7a:00:08:01"], uuid: "u4" });
  assert.equal(journal.entries[3]!.entry.kind, "success");
  // An API error (a namespace that does not exist) is journalled too, not thrown.
  const broken = new TinkerbellAdmission(new TinkerbellEffects({ kube: admin, namespace: "no-such-namespace", site: site(), serverCaPem: cp.caPem }), journal, attributed);
  await broken.admit(record("adm-5"), { macs: ["0c:c4:7a:00:09:01"], uuid: "u5" });
  assert.equal(journal.entries[4]!.entry.kind, "danger");
  assert.match(journal.entries[4]!.entry.summary, /admission failed \(kubernetes-api\): `Kubernetes API/);
});

/** What tink-controller writes when the netboot Job fails (and the Job and Task it made, owned as it owns them). */
async function failBootJob(wf: string, message: string): Promise<void> {
  const owner = await get(tink("workflows"), wf);
  const job = `netboot-${wf}`;
  await custom().createNamespacedCustomObject({ ...bmcApi("jobs"), body: {
    apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Job",
    metadata: { name: job, labels: { "tink-controller-auto-created": "true" }, ownerReferences: [{ apiVersion: "tinkerbell.org/v1alpha1", kind: "Workflow", name: wf, uid: owner.metadata.uid!, controller: true }] },
    spec: { machineRef: { name: "x", namespace: NS }, tasks: [{ powerAction: "off" }] },
  } });
  const j = await get(bmcApi("jobs"), job);
  await custom().createNamespacedCustomObject({ ...bmcApi("tasks"), body: {
    apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Task",
    metadata: { name: `${job}-task-0`, labels: { "owner-name": job }, ownerReferences: [{ apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Job", name: job, uid: j.metadata.uid!, controller: true }] },
    spec: { task: { powerAction: "off" }, connection: { host: "127.0.0.1", authSecretRef: { name: "x", namespace: NS }, insecureTLS: true } },
  } });
  await custom().patchNamespacedCustomObjectStatus({ ...tink("workflows"), name: wf, body: { status: {
    state: "FAILED", conditions: [{ type: "BootJobFailed", status: "True", reason: "Error", message }],
  } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
}

test("Workflow outcomes: a boot-Job failure starts the same Workflow again after the garbage collector removed the old Job and Task, within the budget; then every end is journalled once", async () => {
  const journal = new Entries();
  const follow = () => followWorkflows({ objects: effects.objects, journal, bootRetries: 2 });
  const n = node("out-1", "0c:c4:7a:00:0a:01", { type: "redfish", address: "10.30.0.61", credentials: own("out-1") });
  const a = await effects.start(n, { mode: "provision", requestId: "out-1" });
  const first = await get(tink("workflows"), a.name);
  assert.deepEqual(await follow(), { journalled: [], booted: [], restarted: [], errors: [] }, "an unfinished Workflow is left alone");

  for (const attempt of [1, 2]) {
    const before = await get(tink("workflows"), a.name);
    await failBootJob(a.name, "failed to create Task tinkerbell/netboot-x-task-0: already exists");
    const r = await follow();
    assert.deepEqual(r.restarted, [a.name]);
    const now = await get(tink("workflows"), a.name);
    assert.notEqual(now.metadata.uid, before.metadata.uid, "the same Workflow, created again");
    assert.deepEqual([now.spec, now.metadata.labels], [first.spec, first.metadata.labels]);
    assert.equal((now.metadata as { annotations?: Record<string, string> }).annotations?.["fleetd.io/boot-restarts"], String(attempt));
    assert.equal(at(now, "status"), undefined, "a fresh status for tink-controller");
    assert.equal(await apiStatus(get(bmcApi("jobs"), `netboot-${a.name}`)), 404, "the old boot Job is gone before the new Workflow exists");
    assert.deepEqual(await list(bmcApi("tasks"), `owner-name=netboot-${a.name}`), [], "and its Task");
    const e = journal.entries.at(-1)!;
    assert.deepEqual([e.node, e.entry.kind], ["out-1", "warning"]);
    assert.match(e.entry.summary, new RegExp(`provision Workflow ${a.name}: the boot Job failed before any action ran; started again \\(${attempt} of 2\\)`));
    assert.match(e.entry.reasons![0]!.detail, /already exists/);
  }
  // the budget is spent: journalled as failed, once
  await failBootJob(a.name, "power on: connection refused");
  assert.deepEqual(await follow(), { journalled: [a.name], booted: [], restarted: [], errors: [] });
  assert.equal(journal.entries.at(-1)!.entry.kind, "danger");
  assert.match(journal.entries.at(-1)!.entry.summary, /failed: the boot Job failed before any action ran, also after 2 restart\(s\); no action ran/);
  assert.deepEqual(journal.entries.at(-1)!.entry.reasons, [{ check: "workflow.boot-job", detail: `netboot-${a.name}: \`BootJobFailed: power on: connection refused\`` }]);
  const count = journal.entries.length;
  assert.deepEqual(await follow(), { journalled: [], booted: [], restarted: [], errors: [] }, "journalled once");
  assert.equal(journal.entries.length, count);

  // an action that failed, with the agent's message as tink-server records it; then a success
  const b = await effects.start(n, { mode: "attest", requestId: "out-2" });
  await custom().patchNamespacedCustomObjectStatus({ ...tink("workflows"), name: b.name, body: { status: {
    state: "FAILED", agentID: n.macs[0], currentState: { actionName: "fleetd-attest", state: "FAILED" },
    tasks: [{ id: "t", name: "attest", agentID: n.macs[0], actions: [{ id: "a1", name: "fleetd-attest", image: "x", state: "FAILED", message: "attestation refused: ek.unknown" }] }],
  } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
  assert.deepEqual((await follow()).journalled, [b.name]);
  const failed = journal.entries.at(-1)!.entry;
  assert.deepEqual([failed.kind, failed.summary], ["danger", `attest Workflow ${b.name} failed at action fleetd-attest`]);
  assert.deepEqual(failed.reasons, [{ check: "workflow.action", detail: "fleetd-attest (FAILED): `attestation refused: ek.unknown`" }]);
  const c = await effects.start(n, { mode: "wipe", requestId: "out-3" });
  await custom().patchNamespacedCustomObjectStatus({ ...tink("workflows"), name: c.name, body: { status: {
    state: "SUCCESS", tasks: [{ id: "t", name: "wipe", agentID: n.macs[0], actions: ["fleetd-attest", "wipe-disk"].map((x, i) => ({ id: `a${i}`, name: x, image: "x", state: "SUCCESS" })) }],
  } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
  // retirement's own wipe Workflows are retirement's to follow
  const r = await effects.start(node("out-2", "0c:c4:7a:00:0a:02"), { mode: "wipe", requestId: "retire-out-2", retirement: true });
  await setWorkflowState(r.name, "FAILED");
  assert.deepEqual(await follow(), { journalled: [c.name], booted: [], restarted: [], errors: [] });
  assert.deepEqual([journal.entries.at(-1)!.entry.kind, journal.entries.at(-1)!.entry.summary], ["success", `wipe Workflow ${c.name} succeeded: fleetd-attest → wipe-disk`]);
  assert.equal(journal.entries.filter((e) => e.node === "out-2").length, 0);

  // A provision Workflow that succeeded leaves the machine in HookOS: with a BMC fleetd boots the installed OS (a
  // Rufio Job: off, boot device disk once, on), before journalling; again on a retry, the same Job.
  const p = await effects.start(n, { mode: "provision", requestId: "out-4" });
  const succeed = (name: string, mac: string) => custom().patchNamespacedCustomObjectStatus({ ...tink("workflows"), name, body: { status: {
    state: "SUCCESS", tasks: [{ id: "t", name: "provision", agentID: mac, actions: ["fleetd-attest", "wipe-disk", "install-talos", "fleetd-write-meta"].map((x, i) => ({ id: `a${i}`, name: x, image: "x", state: "SUCCESS" })) }],
  } } }, k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch));
  await succeed(p.name, n.macs[0] ?? "");
  assert.deepEqual(await follow(), { journalled: [p.name], booted: [`${p.name}-boot-disk`], restarted: [], errors: [] });
  const job = await get(bmcApi("jobs"), `${p.name}-boot-disk`);
  assert.deepEqual(at(job, "spec"), { machineRef: { name: "out-1", namespace: NS }, tasks: [{ powerAction: "off" }, { oneTimeBootDeviceAction: { device: ["disk"], efiBoot: true } }, { powerAction: "on" }] });
  assert.equal((job.metadata as { labels?: Record<string, string> }).labels?.["fleetd.io/node"], "out-1");
  assert.deepEqual([journal.entries.at(-1)!.node, journal.entries.at(-1)!.entry.kind, journal.entries.at(-1)!.entry.summary], ["out-1", "success", `provision Workflow ${p.name} succeeded: fleetd-attest → wipe-disk → install-talos → fleetd-write-meta; booting the installed OS: Rufio Job ${p.name}-boot-disk (power off, boot device disk, power on)`]);
  assert.deepEqual(await follow(), { journalled: [], booted: [], restarted: [], errors: [] }, "booted and journalled once");
  // without a BMC there is no Job: the journal says what the operator does
  const q = await effects.start(node("out-3", "0c:c4:7a:00:0a:03"), { mode: "provision", requestId: "out-5" });
  await succeed(q.name, "0c:c4:7a:00:0a:03");
  assert.deepEqual(await follow(), { journalled: [q.name], booted: [], restarted: [], errors: [] });
  assert.match(journal.entries.at(-1)!.entry.summary, /; no BMC: power-cycle the machine to boot the installed OS \(its netboot is off now\)$/);
  assert.equal(await apiStatus(get(bmcApi("jobs"), `${q.name}-boot-disk`)), 404);
});
