/**
 * fleetd's Tinkerbell side with every platform real, for the end-to-end test and the lab: NetBox 4.7 (its RQ
 * worker delivers the webhooks) → netbox-script → the management cluster (kube-apiserver 1.36 with Tinkerbell
 * v0.25.0's CRDs) where the real tink-controller renders fleetd's Templates, Rufio drives a Redfish BMC
 * (sushy-tools over HTTPS) for the netboot Job the controller creates, and the real tink-server serves the
 * actions over gRPC to an agent (fleetd's TypeScript client of the agent protocol: the real tink-agent needs
 * Docker or containerd). The same cluster stands in as the workload cluster (no Node of the machine exists).
 *
 * Rufio v0.25.0 sometimes fails a BMC Job by itself (its Job controller re-creates a Task it has just created:
 * "already exists"); tink-controller then fails the Workflow (BootJobFailed). `served` asks again, as an
 * operator would (at most 3 times), and says so in `notes`.
 */
import { nodeRef } from "../harness/nodeRef.js";
import { strict as assert } from "node:assert";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pino } from "pino";
import { startHandler, toHandlerConfig, type Handler } from "@fleetd/netbox-script";
import { NetBoxInventory, patchDevice, readJournal, type JournalRecord } from "@fleetd/platform/netbox";
import { startRedfishEmulator, type RedfishEmulator } from "../harness/redfish.js";
import { AgentRpcError, TinkAgentClient, type AgentAction } from "../harness/tinkAgentClient.js";
import { fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { Decisions, device, handlerNodesText, requestAction } from "../netbox/handlerFixture.js";
import { WorkflowObject, bootFailure } from "@fleetd/platform/tinkerbell";
import { BmcJob, condition, get, kubernetesSection, poll, startEnv, workflow, type Env } from "./fixtures.js";

export const NS = "tinkerbell";
export const NODE = "rack-1";

const nodeText = () => `
  ${NODE}:
    serial: RACK-0001
    model: nuc13
    class: talos
    role: worker
    switch: { device: tor-a1, port: ethernet1/1/5 }
    address: { cidr: 10.20.0.51/24, gateway: 10.20.0.1 }
    installDisk: /dev/nvme0n1
    bmc: { type: redfish, address: 127.0.0.1, credentials: "secret:${NS}/fleetd-bmc-${NODE}" }
    tpm: "2.0"
    ek:
      - { alg: rsa, sha256: ${"e2".repeat(32)} }
`;

export interface PlatformWorld {
  f: Fleet;
  env: Env;
  bmc: RedfishEmulator;
  agent: TinkAgentClient;
  handler: Handler;
  decisions: Decisions;
  /** What happened that a reader should know (Rufio's own failures, retries). */
  notes: string[];
  /** Set desired_action in NetBox and wait for the handler's dispatch; returns the Workflow it created. */
  ask(action: string): Promise<string>;
  /** The first action of `wf` as tink-server serves it (the netboot Job runs first); undefined if its boot Job failed. */
  firstAction(wf: string): Promise<AgentAction | undefined>;
  /** Ask for `action` until its Workflow's first action is served (at most 3 times). */
  served(action: string): Promise<{ wf: string; first: AgentAction }>;
  /** The first action of `wf`, waiting for fleetd to start it again after boot failures (at most 4 tries). */
  servedAfterRestarts(wf: string): Promise<AgentAction>;
  /**
   * Set the device `decommissioning` (as alice) and play the retirement through: the wipe Workflow served and run,
   * the BMC powered off, NetBox offline with the last step journalled. Returns the wipe Workflow, its actions and
   * the device's journal.
   */
  retire(reason: string): Promise<{ wipe: string; actions: string[]; journal: JournalRecord[] }>;
  /** Play the agent through every action of `wf`, each SUCCESS; returns the action names served. */
  runToSuccess(wf: string, first: AgentAction): Promise<string[]>;
  stop(): Promise<void>;
}

export async function startPlatformWorld(): Promise<PlatformWorld> {
  const [f, env, bmc] = await Promise.all([startFleet(), startEnv(NS), startRedfishEmulator({ powerState: "On" })]);
  const notes: string[] = [];
  const decisions = new Decisions();
  let handler: Handler | undefined;
  const agent = await TinkAgentClient.connect(env.tb.grpcAddress);
  const stop = async () => {
    await handler?.stop();
    agent.close();
    await Promise.all([f.nb.stop(), env.stop(), bmc.stop()]);
  };
  try {
    await env.core.createNamespace({ body: { metadata: { name: "fleetd" } } });
    const adminCfg = f.configFile(f.nb.authorization.replace(/^Bearer /, ""));
    assert.equal(fleetd(["netbox", "setup", "--config", adminCfg]).code, 0);
    const nodesFile = join(f.dir, "platform-nodes.yaml");
    writeFileSync(nodesFile, handlerNodesText() + nodeText());
    const apply = fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]);
    assert.equal(apply.code, 0, apply.stderr);
    // What a passing attestation records: the proven MAC of the boot interface (the emulated system's NIC).
    const inv = new NetBoxInventory(f.client(f.handler.token), { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
    await inv.recordAttestation(await nodeRef(f.admin, NODE), { verdict: "pass", at: new Date(), macs: [bmc.mac.toUpperCase()] });

    // The node's own BMC Secret, kept by the operator (fleetd only references it; credentials.ts).
    await env.core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: `fleetd-bmc-${NODE}` }, stringData: { username: bmc.username, password: bmc.password } } });
    const caFile = join(f.dir, "platform-server-ca.pem");
    writeFileSync(caFile, env.cp.caPem);
    const cfg = toHandlerConfig(f.config(f.handler.token, {
      handler: { listen: { host: "127.0.0.1", port: f.handlerPort }, stateDir: join(f.dir, "platform-state"), nodesFile, reconcileIntervalSeconds: 3600 },
      // the same cluster stands in as the workload cluster (no Node of the machine exists there)
      kubernetes: kubernetesSection(env.cp.kubeconfig, NS, caFile, { bmc: { redfish: { port: bmc.port, useBasicAuth: true } }, clearTpmOnRetire: true }),
    } as never));
    handler = await startHandler(cfg, { logger: pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" }), onDecision: (e) => decisions.push(e) });
  } catch (e) {
    await stop();
    throw e;
  }
  const h = handler;

  const ask = async (action: string): Promise<string> => {
    const d = await device(f, NODE);
    const mark = decisions.events.length;
    await requestAction(f, f.alice.token, NODE, action);
    const e = await decisions.wait(mark, (x) => x.deviceId === d.id && x.decision.outcome !== "ignore", `${action} ${NODE}`);
    assert.equal(e.decision.outcome, "dispatch", JSON.stringify(e.decision));
    const intent = (await h.intents.all()).filter((i) => i.deviceId === d.id && i.action === action).at(-1);
    assert.equal(intent?.effect?.effect, "workflow", JSON.stringify(intent));
    return intent.effect.effect === "workflow" ? intent.effect.workflow : "";
  };

  const firstAction = async (wf: string): Promise<AgentAction | undefined> => {
    const deadline = Date.now() + 300_000;
    for (;;) {
      try {
        return await agent.getAction(bmc.mac);
      } catch (e) {
        const w = await workflow(env, wf);
        // Tinkerbell v0.25.0 fails boot Jobs by itself now and then (Rufio's Task race, tink-controller's Job
        // race): judged with fleetd's own bootFailure, which decides the restarts
        const live = WorkflowObject.safeParse(await get(env, "workflows", wf).catch(() => undefined));
        const boot = live.success ? bootFailure(live.data) : undefined;
        if (boot !== undefined) {
          const job = BmcJob.safeParse(await get(env, "jobs", `netboot-${wf}`).catch(() => undefined));
          const jobFailure = job.success ? condition(job.data.status?.conditions, "Failed")?.message : undefined;
          notes.push(`${wf} failed at its boot Job by itself: ${boot}${jobFailure ? ` (Job: ${jobFailure})` : ""}`);
          return undefined;
        }
        if (e instanceof AgentRpcError && e.codeName === "FAILED_PRECONDITION" && Date.now() < deadline) continue;
        throw new Error(`GetAction for ${wf}: ${(e as Error).message}\nworkflow: ${JSON.stringify(w.status)}\n${env.logs().slice(-4000)}`);
      }
    }
  };

  const served = async (action: string): Promise<{ wf: string; first: AgentAction }> => {
    for (let attempt = 1; ; attempt++) {
      const wf = await ask(action);
      const first = await firstAction(wf);
      if (first) return { wf, first };
      assert.ok(attempt < 3, "Rufio failed the netboot Job three times");
      notes.push(`asked for ${action} again (attempt ${attempt + 1})`);
    }
  };

  /** The first action of a Workflow fleetd starts again after a boot failure (retirement's wipe, the outcome loop). */
  const servedAfterRestarts = async (wf: string): Promise<AgentAction> => {
    for (let attempt = 1; attempt <= 4; attempt++) {
      const a = await firstAction(wf);
      if (a) return a;
      await poll(env, `${wf} started again`, async () => {
        const live = WorkflowObject.safeParse(await get(env, "workflows", wf).catch(() => undefined));
        return live.success && bootFailure(live.data) === undefined ? true : undefined;
      }, 180_000);
      notes.push(`${wf} was started again by fleetd (attempt ${attempt + 1})`);
    }
    throw new Error(`${wf} was never served`);
  };

  const runToSuccess = async (wf: string, first: AgentAction): Promise<string[]> => {
    const names: string[] = [];
    let a: AgentAction | undefined = first;
    while (a) {
      assert.equal(a.workflowId, `${NS}/${wf}`);
      names.push(a.name);
      await agent.perform(a, async () => "SUCCESS");
      const s = await poll(env, `${wf} to move on`, async () => {
        const st = (await workflow(env, wf)).status?.state;
        return st === "RUNNING" || st === "SUCCESS" ? st : undefined;
      });
      a = s === "SUCCESS" ? undefined : await agent.getAction(bmc.mac);
    }
    return names;
  };

  const retire = async (reason: string): Promise<{ wipe: string; actions: string[]; journal: JournalRecord[] }> => {
    const d = await device(f, NODE);
    await patchDevice(f.client(f.alice.token), d.id, { status: "decommissioning" }, null, reason);
    const wipe = await poll(env, "the wipe Workflow", async () => {
      const items = ((await env.custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", labelSelector: `fleetd.io/node=${NODE}` })) as { items: { metadata: { name: string }; spec: { templateRef: string } }[] }).items;
      return items.find((i) => /wipe/.test(i.spec.templateRef))?.metadata.name;
    }, 120_000);
    // If Tinkerbell fails the boot Job by itself, the retirement platform starts the same Workflow again.
    const actions = await runToSuccess(wipe, await servedAfterRestarts(wipe));
    await poll(env, "the BMC to be powered off", async () => ((await bmc.powerState()) === "Off" ? true : undefined), 180_000);
    await poll(env, "NetBox offline", async () => ((await device(f, NODE)).status === "offline" ? true : undefined), 120_000);
    // The status changes before the step's own journal line is written: wait for that line, not only the status.
    const journal = await poll(env, "the netbox-offline step journalled", async () => {
      const j = await readJournal(f.admin, d.id);
      return j.some((e) => e.comments.includes("retirement step netbox-offline")) ? j : undefined;
    }, 30_000);
    return { wipe, actions, journal };
  };

  return { f, env, bmc, agent, handler: h, decisions, notes, ask, firstAction, served, servedAfterRestarts, runToSuccess, retire, stop };
}
