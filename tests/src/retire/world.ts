/**
 * The retirement tests' world: a real control plane (with the deployment and replicaset controllers), KWOK
 * running the pods, a real NetBox with the example fleet, and a tiny binder standing in for kube-scheduler
 * (the harness has none): it binds each pending pod to the first KWOK node that is not cordoned.
 */
import { strict as assert } from "node:assert";
import * as k8s from "@kubernetes/client-node";
import { kubeFromConfig, type Kube } from "@fleetd/platform/kube";
import { type NetBox, readJournal, type JournalRecord } from "@fleetd/platform/netbox";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { KWOK_ANNOTATION, kwokNode, startKwok, type Kwok } from "../harness/kwok.js";
import { sleep } from "../harness/process.js";
import { EXAMPLE_NODES, fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { device } from "../netbox/handlerFixture.js";

export const MGMT_NS = "fleetd-mgmt";
export const APPS_NS = "apps";

export interface World {
  cp: ControlPlane;
  kube: Kube;
  kwok: Kwok;
  fleet: Fleet;
  stop(): Promise<void>;
}

export async function startWorld(): Promise<World> {
  const cp = await startControlPlane({ extraControllers: ["deployment", "replicaset"] });
  const config = new k8s.KubeConfig();
  config.loadFromFile(cp.kubeconfig);
  const kube = kubeFromConfig(config);
  const kwok = await startKwok(cp.kubeconfig);
  const fleet = await startFleet();
  const adminCfg = fleet.configFile(fleet.nb.authorization.replace(/^Bearer /, ""));
  const setup = fleetd(["netbox", "setup", "--config", adminCfg]);
  assert.equal(setup.code, 0, setup.stderr);
  const apply = fleetd(["inventory", "apply", EXAMPLE_NODES, "--config", fleet.configFile(fleet.apply.token)]);
  assert.equal(apply.code, 0, apply.stderr);
  for (const ns of [MGMT_NS, APPS_NS]) await kube.core.createNamespace({ body: { metadata: { name: ns } } });
  let binding = true;
  const binder = (async () => {
    while (binding) {
      try {
        await bindPending(kube);
      } catch {
        // the API server is going away at the end; retry otherwise
      }
      await sleep(250);
    }
  })();
  return {
    cp, kube, kwok, fleet,
    async stop() {
      binding = false;
      await binder;
      await kwok.stop();
      await cp.stop();
      await fleet.nb.stop();
    },
  };
}

async function bindPending(kube: Kube): Promise<void> {
  const pending = await kube.core.listPodForAllNamespaces({ fieldSelector: "spec.nodeName=,status.phase=Pending" });
  if (pending.items.length === 0) return;
  const nodes = (await kube.core.listNode()).items.filter((n) =>
    n.metadata?.annotations?.[KWOK_ANNOTATION] === "fake" && n.spec?.unschedulable !== true && !n.metadata?.deletionTimestamp &&
    n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
  const names = nodes.map((n) => n.metadata?.name ?? "").sort();
  // The tests' own taints (fleetd.test/…, NoSchedule/NoExecute) keep a pod that does not tolerate them off the node,
  // as kube-scheduler would. Other taints are not judged here: the ones the node lifecycle controller manages come and
  // go with KWOK's node status, and these tests are not about them.
  const tolerated = (pod: k8s.V1Pod, t: k8s.V1Taint) =>
    (pod.spec?.tolerations ?? []).some((x) =>
      (x.effect === undefined || x.effect === t.effect) &&
      (x.operator === "Exists" ? x.key === undefined || x.key === t.key : x.key === t.key && (x.value ?? "") === (t.value ?? "")));
  const fits = (pod: k8s.V1Pod, node: string) =>
    (nodes.find((n) => n.metadata?.name === node)?.spec?.taints ?? []).every((t) => !t.key.startsWith("fleetd.test/") || t.effect === "PreferNoSchedule" || tolerated(pod, t));
  for (const p of pending.items) {
    const wanted = p.spec?.nodeSelector?.["kubernetes.io/hostname"];
    const target = wanted === undefined ? names.find((n) => fits(p, n)) : names.find((n) => n === wanted && fits(p, n));
    if (!target) continue;
    const name = p.metadata?.name ?? "";
    const namespace = p.metadata?.namespace ?? "";
    await kube.core.createNamespacedPodBinding({ name, namespace, body: {
      apiVersion: "v1", kind: "Binding", metadata: { name, namespace }, target: { apiVersion: "v1", kind: "Node", name: target },
    } }).catch(() => undefined);
  }
}

export async function poll<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 90_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== false) return v;
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (last error: ${last})` : ""}`);
    await sleep(250);
  }
}

export async function addNode(w: World, name: string, opts: { cordoned?: boolean } = {}): Promise<void> {
  const body = kwokNode(name);
  if (opts.cordoned) body.spec = { unschedulable: true };
  await w.kube.core.createNode({ body });
  await poll(`KWOK to mark Node ${name} Ready`, async () =>
    (await w.kube.core.readNode({ name })).status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
}

export async function runningPodsOn(kube: Kube, node: string, namespace = APPS_NS): Promise<k8s.V1Pod[]> {
  const l = await kube.core.listNamespacedPod({ namespace, fieldSelector: `spec.nodeName=${node}` });
  return l.items.filter((p) => p.status?.phase === "Running" && !p.metadata?.deletionTimestamp);
}

export function deployment(name: string, replicas: number): k8s.V1Deployment {
  return {
    apiVersion: "apps/v1", kind: "Deployment",
    metadata: { name, namespace: APPS_NS },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: { containers: [{ name: "c", image: "registry.invalid/fleetd-test:1" }], terminationGracePeriodSeconds: 1 },
      },
    },
  };
}

export function pdb(name: string, minAvailable: number): k8s.V1PodDisruptionBudget {
  return { apiVersion: "policy/v1", kind: "PodDisruptionBudget", metadata: { name, namespace: APPS_NS },
    spec: { minAvailable, selector: { matchLabels: { app: name } } } };
}

/** A pod on `node` owned by a DaemonSet (the harness runs no DaemonSet controller; the owner is real). */
export async function daemonSetPod(kube: Kube, node: string, dsName: string): Promise<string> {
  const apps = kube.config.makeApiClient(k8s.AppsV1Api);
  const ds = await apps.readNamespacedDaemonSet({ name: dsName, namespace: APPS_NS }).catch(async () =>
    apps.createNamespacedDaemonSet({ namespace: APPS_NS, body: {
      metadata: { name: dsName, namespace: APPS_NS },
      spec: { selector: { matchLabels: { app: dsName } }, template: { metadata: { labels: { app: dsName } }, spec: { containers: [{ name: "c", image: "registry.invalid/agent:1" }] } } },
    } }));
  const name = `${dsName}-${node}`;
  await kube.core.createNamespacedPod({ namespace: APPS_NS, body: {
    metadata: { name, namespace: APPS_NS, labels: { app: dsName },
      ownerReferences: [{ apiVersion: "apps/v1", kind: "DaemonSet", name: dsName, uid: ds.metadata?.uid ?? "", controller: true, blockOwnerDeletion: true }] },
    spec: { nodeName: node, containers: [{ name: "c", image: "registry.invalid/agent:1" }] },
  } });
  return name;
}

/** The device's journal, each entry without fleetd's `**fleetd** ` mark. */
export async function journalOf(w: World, name: string): Promise<JournalRecord[]> {
  return (await readJournal(w.fleet.admin, (await device(w.fleet, name)).id)).map((j) => ({ ...j, comments: j.comments.replace(/^\*\*fleetd\*\* /, "") }));
}

export async function netboxDevice(w: World, name: string) {
  return device(w.fleet, name);
}

export type { NetBox };

/**
 * A Kube acting as a ServiceAccount bound to exactly the rules of netbox-script/deploy/workload/retire-rbac.yaml
 * and netbox-script/deploy/management/retire-progress-rbac.yaml (the management Role placed in MGMT_NS), so a
 * retirement run with it proves the deployed RBAC suffices.
 */
export async function retireIdentity(w: World): Promise<Kube> {
  const { readFileSync } = await import("node:fs");
  const { parseAllDocuments } = await import("yaml");
  const { repoRoot } = await import("../netbox/fixture.js");
  const docs = ["deploy/workload/retire-rbac.yaml", "deploy/management/retire-progress-rbac.yaml"]
    .flatMap((f) => parseAllDocuments(readFileSync(`${repoRoot}/netbox-script/${f}`, "utf8")).map((d) => d.toJS() as { kind: string; metadata: { name: string; namespace?: string } }));
  const sa = { kind: "ServiceAccount", name: "fleetd-retire", namespace: MGMT_NS };
  await w.kube.core.createNamespacedServiceAccount({ namespace: MGMT_NS, body: { metadata: { name: sa.name } } });
  for (const d of docs) {
    if (d.kind === "ClusterRole") {
      await w.kube.rbac.createClusterRole({ body: d as k8s.V1ClusterRole });
      await w.kube.rbac.createClusterRoleBinding({ body: { metadata: { name: d.metadata.name }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: d.metadata.name }, subjects: [sa] } });
    } else if (d.kind === "Role") {
      const namespace = d.metadata.namespace === "kube-system" ? "kube-system" : MGMT_NS;
      await w.kube.rbac.createNamespacedRole({ namespace, body: { ...(d as k8s.V1Role), metadata: { ...d.metadata, namespace } } });
      await w.kube.rbac.createNamespacedRoleBinding({ namespace, body: { metadata: { name: d.metadata.name, namespace }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: d.metadata.name }, subjects: [sa] } });
    } else {
      throw new Error(`unexpected ${d.kind} in netbox-script's retirement RBAC`);
    }
  }
  const tr = await w.kube.core.createNamespacedServiceAccountToken({ name: sa.name, namespace: MGMT_NS, body: { spec: { audiences: ["https://kubernetes.default.svc.cluster.local"], expirationSeconds: 3600 } } });
  const config = new k8s.KubeConfig();
  config.loadFromOptions({
    clusters: [{ name: "c", server: w.cp.server, caData: Buffer.from(w.cp.caPem).toString("base64") }],
    users: [{ name: `system:serviceaccount:${MGMT_NS}:${sa.name}`, token: tr.status?.token ?? "" }],
    contexts: [{ name: "x", cluster: "c", user: `system:serviceaccount:${MGMT_NS}:${sa.name}` }],
    currentContext: "x",
  });
  return kubeFromConfig(config);
}
