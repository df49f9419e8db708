/**
 * The node's Rufio Machine (its credentials: the node's own Secret `fleetd-bmc-<node>` in the Tinkerbell
 * namespace, referenced, never read; credentials.ts), power off through a Rufio Job, and a Job's state.
 * Objects not labelled as fleetd's are never changed.
 */
import { isAlreadyExists } from "../kube/client.js";
import { AnyObject, BMC_JOB, BMC_MACHINE, isOurs, JobObject, LABEL_NODE } from "./api.js";
import { resolveCredentials } from "./credentials.js";
import { TinkerbellError } from "./errors.js";
import { buildBootDiskJob, buildPowerOffJob, jobStateOf, type JobState } from "./job.js";
import { buildMachine, type MachineOptions, type SecretRef } from "./machine.js";
import { machineName, requireNodeName } from "./names.js";
import type { NamedNode } from "./node.js";
import type { Objects } from "./objects.js";
import { syncObjects } from "./sync.js";

export type BmcOptions = MachineOptions;

/** The node's Machine; refuses nodes without a BMC, credentials references other than the node's own Secret, and objects not fleetd's. */
export async function ensureBmcMachine(objs: Objects, node: NamedNode, o: BmcOptions): Promise<{ machine: string; secret: SecretRef; result: "created" | "updated" | "unchanged" }> {
  const bmc = node.bmc;
  if (!bmc) throw new TinkerbellError("no-bmc", `${node.name} has no BMC (nodes file bmc.type none)`);
  const secret = resolveCredentials(bmc.credentials, node.name, objs.namespace);
  const m = buildMachine(node.name, bmc, secret, objs.namespace, o);
  const c = await syncObjects(objs, BMC_MACHINE, [m], { scope: `${LABEL_NODE}=${node.name}`, managedSpecKeys: ["connection"], prune: false });
  const refused = c.refused[0];
  if (refused) throw new TinkerbellError("not-ours", refused.reason);
  return { machine: machineName(node.name), secret, result: c.created.length ? "created" : c.updated.length ? "updated" : "unchanged" };
}

/**
 * Creates `job` on its node's Machine, which must be fleetd's (`missing`: why not, for the refusal); an existing Job
 * of that name is this one again (a retry) when it is fleetd's, else refused. Returns the Job's name.
 */
async function createJob(objs: Objects, job: { metadata: { name: string }; spec: { machineRef: { name: string } } }, missing: string): Promise<string> {
  const machine = await objs.get(BMC_MACHINE, job.spec.machineRef.name, AnyObject);
  if (!machine || !isOurs(machine.metadata)) throw new TinkerbellError("no-bmc", `${missing}: no Machine ${objs.namespace}/${job.spec.machineRef.name} of fleetd's`);
  try {
    await objs.create(BMC_JOB, job);
  } catch (e) {
    if (!isAlreadyExists(e)) throw e;
    const live = await objs.get(BMC_JOB, job.metadata.name, AnyObject);
    if (!live || !isOurs(live.metadata)) throw new TinkerbellError("not-ours", `Job ${objs.namespace}/${job.metadata.name} exists and is not fleetd's`);
  }
  return job.metadata.name;
}

/** Creates the power-off Job for this request (the same request again → the same Job). Returns its name. */
export async function powerOff(objs: Objects, node: NamedNode, requestId: string): Promise<string> {
  if (!node.bmc) throw new TinkerbellError("no-bmc", `${node.name} has no BMC: it cannot be powered off remotely`);
  return createJob(objs, buildPowerOffJob(node.name, requestId, objs.namespace), `${node.name} (ensure the BMC Machine first)`);
}

/**
 * Creates the Job that boots the OS provision Workflow `workflow` installed on `node` (off, boot device disk, on);
 * the same Workflow again → the same Job. Refuses when the node has no Machine of fleetd's. Returns its name.
 */
export async function bootInstalledOs(objs: Objects, node: string, workflow: string): Promise<string> {
  return createJob(objs, buildBootDiskJob(requireNodeName(node), workflow, objs.namespace), `${node} (to boot the installed OS with)`);
}

export async function jobState(objs: Objects, name: string): Promise<JobState | undefined> {
  const j = await objs.get(BMC_JOB, name, JobObject);
  return j ? jobStateOf(j) : undefined;
}
