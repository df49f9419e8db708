/**
 * fleetd's Tinkerbell side end to end, with every platform real: NetBox 4.7 (its RQ worker delivers the
 * webhooks) → netbox-script → the management cluster (kube-apiserver 1.36 with Tinkerbell v0.25.0's CRDs) where
 * the real tink-controller renders fleetd's own Templates, Rufio drives a Redfish BMC (sushy-tools emulator over
 * HTTPS) for the netboot Job the controller creates, and the real tink-server serves the actions over gRPC to an
 * agent (fleetd's TypeScript client of the agent protocol: the real tink-agent needs Docker or containerd).
 *   1. desired_action provision → Hardware, Machine, Templates, Workflow → netboot Job run against the BMC →
 *      the agent is served fleetd-attest (mode provision, this Workflow's name) and the rest → SUCCESS.
 *   2. a re-provision replaces the finished Workflow; the agent is served the new one.
 *   3. status decommissioning → the retirement steps with this platform: the wipe Workflow (netboot, served to
 *      the agent), a Rufio power-off Job the BMC obeys, NetBox offline.
 * Rufio v0.25.0 sometimes fails a BMC Job by itself (its Job controller re-creates a Task it has just created:
 * "already exists"); tink-controller then fails the Workflow (BootJobFailed). Like an operator, the test asks
 * again (at most 3 times) and says so.
 */
import { strict as assert } from "node:assert";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pino } from "pino";
import { startHandler, toHandlerConfig, type Handler } from "@fleetd/netbox-script";
import { NetBoxInventory } from "@fleetd/shared/netbox/attestationInventory";
import { patchDevice } from "@fleetd/shared/netbox/device";
import { readJournal } from "@fleetd/shared/netbox/journal";
import { startRedfishEmulator, type RedfishEmulator } from "../harness/redfish.js";
import { AgentRpcError, TinkAgentClient, type AgentAction } from "../harness/tinkAgent.js";
import { fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { Decisions, device, handlerNodesText, requestAction } from "../netbox/handlerFixture.js";
import { BmcJob, condition, get, poll, startEnv, workflow, type Env } from "./fixtures.js";

const NS = "tinkerbell";
const NODE = "rack-1";
const D = (c: string) => `sha256:${c.repeat(64)}`;
const RUFIO_TASK_RACE = /failed to create Task .* already exists/;
let f: Fleet;
let env: Env;
let bmc: RedfishEmulator;
let agent: TinkAgentClient;
let h: Handler | undefined;
const decisions = new Decisions();
const log: string[] = [];

const nodeText = () => `
  ${NODE}:
    serial: RACK-0001
    model: nuc13
    class: talos
    role: worker
    switch: { device: tor-a1, port: ethernet1/1/5 }
    address: { cidr: 10.20.0.51/24, gateway: 10.20.0.1 }
    installDisk: /dev/nvme0n1
    bmc: { type: redfish, address: 127.0.0.1, credentials: "env:FLEETD_IT_BMC" }
    tpm: "2.0"
    ek:
      - { alg: rsa, sha256: ${"e2".repeat(32)} }
`;

before(async () => {
  [f, env, bmc] = await Promise.all([startFleet(), startEnv(NS), startRedfishEmulator({ powerState: "On" })]);
  agent = await TinkAgentClient.connect(env.tb.grpcAddress);
  await env.core.createNamespace({ body: { metadata: { name: "fleetd" } } });
  const adminCfg = f.configFile(f.nb.authorization.replace(/^Bearer /, ""));
  assert.equal(fleetd(["netbox", "setup", "--config", adminCfg]).code, 0);
  const nodesFile = join(f.dir, "e2e-nodes.yaml");
  writeFileSync(nodesFile, handlerNodesText() + nodeText());
  const apply = fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]);
  assert.equal(apply.code, 0, apply.stderr);
  // What a passing attestation records: the proven MAC of the boot interface (the emulated system's NIC).
  const inv = new NetBoxInventory(f.admin, { applyAccount: f.apply.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
  await inv.recordAttestation(NODE, { verdict: "pass", at: new Date(), macs: [bmc.mac.toUpperCase()] });

  process.env["FLEETD_IT_BMC_USERNAME"] = bmc.username;
  process.env["FLEETD_IT_BMC_PASSWORD"] = bmc.password;
  const caFile = join(f.dir, "e2e-server-ca.pem");
  writeFileSync(caFile, env.cp.caPem);
  const cfg = toHandlerConfig(f.config(f.handler.token, {
    handler: { listen: { host: "127.0.0.1", port: f.handlerPort }, stateDir: join(f.dir, "e2e-state"), nodesFile, reconcileIntervalSeconds: 3600 },
    kubernetes: {
      management: {
        kubeconfig: env.cp.kubeconfig,
        namespace: NS,
        tinkerbell: {
          server: { url: "https://fleetd.example.internal:8443", caFile, lab: false },
          images: {
            action: `registry.example.internal/fleetd/fleetd-tink-action@${D("a")}`,
            wipe: `docker.io/library/debian:bookworm-slim@${D("b")}`,
            image2disk: `quay.io/tinkerbell/actions/image2disk@${D("c")}`,
          },
          talosImageUrl: "https://factory.talos.dev/image/0123abcd/v1.13.9/metal-amd64.raw.zst",
          bmc: { redfish: { port: bmc.port, useBasicAuth: true } },
        },
      },
      // the same cluster stands in as the workload cluster: no Node of rack-1 exists there (nothing to drain)
      workload: { kubeconfig: env.cp.kubeconfig },
    },
  } as never));
  h = await startHandler(cfg, { logger: pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" }), onDecision: (e) => decisions.push(e) });
}, { timeout: 60 * 60_000 });

after(async () => {
  await h?.stop();
  agent?.close();
  await Promise.all([f?.nb.stop(), env?.stop(), bmc?.stop()]);
  delete process.env["FLEETD_IT_BMC_USERNAME"];
  delete process.env["FLEETD_IT_BMC_PASSWORD"];
  if (log.length > 0) process.stdout.write(log.map((l) => `# ${l}\n`).join(""));
});

async function ask(action: string): Promise<string> {
  const d = await device(f, NODE);
  const mark = decisions.events.length;
  await requestAction(f, f.alice.token, NODE, action);
  const e = await decisions.wait(mark, (x) => x.deviceId === d.id && x.decision.outcome !== "ignore", `${action} ${NODE}`);
  assert.equal(e.decision.outcome, "dispatch", JSON.stringify(e.decision));
  const intent = h!.intents.all().filter((i) => i.deviceId === d.id && i.action === action).at(-1);
  assert.equal(intent?.effect?.effect, "workflow", JSON.stringify(intent));
  return intent.effect.effect === "workflow" ? intent.effect.workflow : "";
}

/**
 * Wait until tink-server serves `wf`'s first action to the agent (the netboot Job runs first). undefined when
 * Rufio's Task race failed the boot Job (the caller asks again).
 */
async function firstAction(wf: string): Promise<AgentAction | undefined> {
  const deadline = Date.now() + 300_000;
  for (;;) {
    try {
      return await agent.getAction(bmc.mac);
    } catch (e) {
      const w = await workflow(env, wf);
      const job = BmcJob.safeParse(await get(env, "jobs", `netboot-${wf}`).catch(() => undefined));
      const failure = job.success ? condition(job.data.status?.conditions, "Failed")?.message ?? "" : "";
      if (w.status?.state === "FAILED" && RUFIO_TASK_RACE.test(failure)) {
        log.push(`Rufio failed netboot-${wf} by itself (${failure}); asking again`);
        return undefined;
      }
      if (e instanceof AgentRpcError && e.codeName === "FAILED_PRECONDITION" && Date.now() < deadline) continue;
      assert.fail(`GetAction for ${wf}: ${(e as Error).message}\nworkflow: ${JSON.stringify(w.status)}\n${env.logs().slice(-4000)}`);
    }
  }
}

/** Ask for `action` until its Workflow's first action is served (Rufio's race: at most 3 times). */
async function served(action: string): Promise<{ wf: string; first: AgentAction }> {
  for (let attempt = 1; ; attempt++) {
    const wf = await ask(action);
    const first = await firstAction(wf);
    if (first) return { wf, first };
    assert.ok(attempt < 3, "Rufio failed the netboot Job three times");
  }
}

/** Play the agent through every action of `wf` (each reported SUCCESS); returns the action names served. */
async function runToSuccess(wf: string, first: AgentAction): Promise<string[]> {
  const names: string[] = [];
  let a: AgentAction | undefined = first;
  while (a) {
    assert.equal(a.workflowId, `${NS}/${wf}`);
    names.push(a.name);
    await agent.perform(a, async () => "SUCCESS");
    const w = await poll(env, `${wf} to move on`, async () => {
      const s = (await workflow(env, wf)).status?.state;
      return s === "RUNNING" || s === "SUCCESS" ? s : undefined;
    });
    a = w === "SUCCESS" ? undefined : await agent.getAction(bmc.mac);
  }
  return names;
}

test("desired_action provision: the real tink-controller renders fleetd's Template, Rufio netboots the BMC, tink-server serves the actions, the Workflow succeeds", async () => {
  const { wf, first } = await served("provision");
  assert.equal(first.name, "fleetd-attest");
  assert.deepEqual(first.command, ["attest", "--mode", "provision"]);
  assert.equal(first.environment["FLEETD_WORKFLOW"], wf, "hardwareMap.fleetd_workflow rendered into the action");
  assert.equal(first.environment["FLEETD_MODE"], "provision");
  assert.equal(first.environment["FLEETD_SERVER"], "https://fleetd.example.internal:8443");
  assert.equal(first.namespaces?.network, "host");
  const w = await workflow(env, wf);
  assert.equal(w.status?.templateRendering, "successful");
  assert.equal(w.status?.bootOptions?.jobs?.[`netboot-${wf}`]?.complete, true, "the controller's netboot Job completed against the BMC");
  assert.equal(await bmc.powerState(), "On");
  assert.equal((await bmc.bootSource()).target, "Pxe");
  const names = await runToSuccess(wf, first);
  assert.deepEqual(names, ["fleetd-attest", "wipe-disk", "install-talos", "fleetd-write-meta"]);
  assert.equal((await workflow(env, wf)).status?.state, "SUCCESS");
});

test("re-provision: the finished Workflow is deleted first and the new one is served", async () => {
  const { wf, first } = await served("provision");
  const names = await runToSuccess(wf, first);
  assert.equal(names[0], "fleetd-attest");
  const d = await device(f, NODE);
  const provisions = h!.intents.all().filter((i) => i.deviceId === d.id && i.effect?.effect === "workflow");
  const last = provisions.at(-1)!;
  assert.ok(last.effect?.effect === "workflow" && last.effect.deleted.length >= 1, `the previous finished Workflow was deleted: ${JSON.stringify(last.effect)}`);
});

test("decommissioning: the wipe Workflow is served, the Rufio power-off Job turns the BMC off, NetBox ends offline", async () => {
  const d = await device(f, NODE);
  assert.equal(await bmc.powerState(), "On");
  await patchDevice(f.client(f.alice.token), d.id, { status: "decommissioning" }, null, "test: retire");
  // the netboot step starts the wipe Workflow; the agent (the machine in HookOS) runs it
  const wf = await poll(env, "the wipe Workflow", async () => {
    const items = ((await env.custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", labelSelector: `fleetd.io/node=${NODE}` })) as { items: { metadata: { name: string }; spec: { templateRef: string } }[] }).items;
    return items.find((i) => /wipe/.test(i.spec.templateRef))?.metadata.name;
  }, 120_000);
  // If Rufio fails the netboot Job by itself, the retirement platform starts the same Workflow again.
  let first: AgentAction | undefined;
  for (let i = 0; i < 4 && !first; i++) {
    first = await firstAction(wf).catch(async (e: unknown) => {
      log.push(`wipe Workflow not served yet (${(e as Error).message.split("\n")[0]}); waiting for the retirement to start it again`);
      await new Promise((r) => setTimeout(r, 5000));
      return undefined;
    });
  }
  assert.ok(first, "the wipe Workflow was served to the agent");
  const names = await runToSuccess(wf, first);
  assert.ok(names.includes("wipe-disk") || names.some((n) => /wipe/.test(n)), names.join(","));
  // power-off: a Rufio Job the emulated BMC obeys; then NetBox offline
  await poll(env, "the BMC to be powered off", async () => ((await bmc.powerState()) === "Off" ? true : undefined), 180_000);
  const offline = await poll(env, "NetBox offline", async () => ((await device(f, NODE)).status === "offline" ? true : undefined), 120_000);
  assert.ok(offline);
  const journal = await readJournal(f.admin, d.id);
  for (const step of ["cordon", "evict", "netboot", "delete-node", "delete-cluster-records", "wipe", "power-off", "netbox-offline"]) {
    assert.ok(journal.some((j) => j.comments.includes(step)), `journal names step ${step}: ${JSON.stringify(journal.map((j) => j.comments))}`);
  }
});
