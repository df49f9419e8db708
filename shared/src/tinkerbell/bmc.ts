/**
 * The node's Rufio Machine (and, for env:/file: credentials, its Secret `fleetd-bmc-<node>` with the keys
 * `username` and `password`), power off through a Rufio Job, and a Job's state. A Secret named in the nodes
 * file (`secret:ns/name`) is referenced, never read. Objects not labelled as fleetd's are never changed.
 */
import * as k8s from "@kubernetes/client-node";
import { isAlreadyExists, isNotFound, type Kube } from "../kube/client.js";
import { AnyObject, BMC_JOB, BMC_MACHINE, isOurs, JobObject, LABEL_MANAGED_BY, LABEL_NODE, MANAGED_BY, ownedLabels } from "./api.js";
import { resolveCredentials } from "./credentials.js";
import { TinkerbellError } from "./errors.js";
import { buildPowerOffJob, jobStateOf, type JobState } from "./job.js";
import { buildMachine, type MachineOptions, type SecretRef } from "./machine.js";
import { bmcSecretName, machineName } from "./names.js";
import type { TinkNode } from "./node.js";
import type { Objects } from "./objects.js";
import { syncObjects } from "./sync.js";

const b64 = (s: string): string => Buffer.from(s, "utf8").toString("base64");

/** Create or update fleetd's credentials Secret; refuses when a Secret of that name is not fleetd's. */
async function ensureSecret(kube: Kube, namespace: string, node: string, username: string, password: string): Promise<SecretRef> {
  const name = bmcSecretName(node);
  const data = { username: b64(username), password: b64(password) };
  const body: k8s.V1Secret = { apiVersion: "v1", kind: "Secret", type: "Opaque", metadata: { name, namespace, labels: ownedLabels(node) }, data };
  let live: k8s.V1Secret | undefined;
  try {
    live = await kube.core.readNamespacedSecret({ name, namespace });
  } catch (e) {
    if (!isNotFound(e)) throw e;
  }
  if (!live) {
    try {
      await kube.core.createNamespacedSecret({ namespace, body });
      return { name, namespace };
    } catch (e) {
      if (!isAlreadyExists(e)) throw e;
      live = await kube.core.readNamespacedSecret({ name, namespace });
    }
  }
  // client-node's V1Secret (timestamps as Date): only the ownership label is judged.
  if (live.metadata?.labels?.[LABEL_MANAGED_BY] !== MANAGED_BY) throw new TinkerbellError("not_ours", `Secret ${namespace}/${name} exists and is not labelled as fleetd's: fleetd leaves it alone`);
  if (live.data?.["username"] !== data.username || live.data?.["password"] !== data.password || live.type !== "Opaque") {
    await kube.core.replaceNamespacedSecret({ name, namespace, body: { ...body, metadata: { ...body.metadata, ...(live.metadata?.resourceVersion ? { resourceVersion: live.metadata.resourceVersion } : {}) } } });
  }
  return { name, namespace };
}

export interface BmcOptions extends MachineOptions {
  /** Where env: references are looked up (default process.env). */
  env?: NodeJS.ProcessEnv;
}

/** The node's Machine (and Secret); refuses nodes without a BMC, vault: references and objects not fleetd's. */
export async function ensureBmcMachine(kube: Kube, objs: Objects, node: TinkNode, o: BmcOptions): Promise<{ machine: string; secret: SecretRef; result: "created" | "updated" | "unchanged" }> {
  const bmc = node.bmc;
  if (!bmc) throw new TinkerbellError("no_bmc", `${node.name} has no BMC (nodes file bmc.type none)`);
  const creds = resolveCredentials(bmc.credentials, o.env);
  const secret = creds.kind === "secret" ? { name: creds.name, namespace: creds.namespace } : await ensureSecret(kube, objs.namespace, node.name, creds.username, creds.password);
  const m = buildMachine(node.name, bmc, secret, objs.namespace, o);
  const c = await syncObjects(objs, BMC_MACHINE, [m], { scope: `${LABEL_NODE}=${node.name}`, managedSpecKeys: ["connection"], prune: false });
  const refused = c.refused[0];
  if (refused) throw new TinkerbellError("not_ours", refused.reason);
  return { machine: machineName(node.name), secret, result: c.created.length ? "created" : c.updated.length ? "updated" : "unchanged" };
}

/** Creates the power-off Job for this request (the same request again → the same Job). Returns its name. */
export async function powerOff(objs: Objects, node: TinkNode, requestId: string): Promise<string> {
  if (!node.bmc) throw new TinkerbellError("no_bmc", `${node.name} has no BMC: it cannot be powered off remotely`);
  const job = buildPowerOffJob(node.name, requestId, objs.namespace);
  const machine = await objs.get(BMC_MACHINE, job.spec.machineRef.name, AnyObject);
  if (!machine || !isOurs(machine.metadata)) throw new TinkerbellError("no_bmc", `${node.name}: no Machine ${objs.namespace}/${job.spec.machineRef.name} of fleetd's (ensure the BMC Machine first)`);
  try {
    await objs.create(BMC_JOB, job);
  } catch (e) {
    if (!isAlreadyExists(e)) throw e;
    const live = await objs.get(BMC_JOB, job.metadata.name, AnyObject);
    if (!live || !isOurs(live.metadata)) throw new TinkerbellError("not_ours", `Job ${objs.namespace}/${job.metadata.name} exists and is not fleetd's`);
  }
  return job.metadata.name;
}

export async function jobState(objs: Objects, name: string): Promise<JobState | undefined> {
  const j = await objs.get(BMC_JOB, name, JobObject);
  return j ? jobStateOf(j) : undefined;
}
