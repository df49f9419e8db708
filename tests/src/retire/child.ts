/**
 * A retirement in its own process, for the kill test: `node child.js` with the environment below runs
 * retireNode to its end and prints the report as JSON. The test SIGKILLs it mid-retirement and starts it again.
 *   FLEETD_RETIRE_KUBECONFIG, FLEETD_RETIRE_NAMESPACE, FLEETD_RETIRE_NODE, FLEETD_RETIRE_OWNER,
 *   FLEETD_RETIRE_NETBOX_URL, FLEETD_RETIRE_NETBOX_TOKEN, FLEETD_RETIRE_WORKFLOW_STATE (pending|running)
 */
import { z } from "zod";
import { loadKube } from "@fleetd/platform/kube";
import { createNetBox, netboxJournal } from "@fleetd/platform/netbox";
import { configMapProgress, netboxRetirementInventory, retireNode } from "@fleetd/platform/retire";
import { configMapTestPlatform } from "./platform.js";

const env = z.object({
  FLEETD_RETIRE_KUBECONFIG: z.string(), FLEETD_RETIRE_NAMESPACE: z.string(), FLEETD_RETIRE_NODE: z.string(), FLEETD_RETIRE_OWNER: z.string(),
  FLEETD_RETIRE_NETBOX_URL: z.url(), FLEETD_RETIRE_NETBOX_TOKEN: z.string(),
  /** The stand-in wipe Workflow's state when it is created (default running: the machine is in HookOS at once). */
  FLEETD_RETIRE_WORKFLOW_STATE: z.enum(["pending", "running"]).default("running"),
}).parse(process.env);

const kube = loadKube(env.FLEETD_RETIRE_KUBECONFIG);
const nb = createNetBox({ url: env.FLEETD_RETIRE_NETBOX_URL, token: env.FLEETD_RETIRE_NETBOX_TOKEN });
const report = await retireNode({
  workload: kube,
  progress: configMapProgress(kube, env.FLEETD_RETIRE_NAMESPACE),
  platform: configMapTestPlatform(kube, env.FLEETD_RETIRE_NAMESPACE, "completed", env.FLEETD_RETIRE_WORKFLOW_STATE),
  inventory: netboxRetirementInventory(nb),
  journal: netboxJournal(nb),
  owner: env.FLEETD_RETIRE_OWNER,
  options: { evictionPollMs: 300, platformPollMs: 300, evictionTimeoutMs: 60_000, budgetMs: 120_000 },
  log: {
    info: (o, m) => process.stderr.write(`${m} ${JSON.stringify(o)}\n`),
    warn: (o, m) => process.stderr.write(`WARN ${m} ${JSON.stringify(o)}\n`),
  },
}, env.FLEETD_RETIRE_NODE);
process.stdout.write(JSON.stringify(report) + "\n");
