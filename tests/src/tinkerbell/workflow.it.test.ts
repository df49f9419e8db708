/**
 * The real Tinkerbell (tink-server + tink-controller of github.com/tinkerbell/tinkerbell v0.25.0) against a real
 * control plane, driven as fleetd drives it: the v1alpha1 CRDs' own schema judges Hardware; the controller
 * renders a Workflow from our Template and Hardware; an agent speaking the real gRPC protocol fetches the
 * actions and reports them; the Workflow reaches SUCCESS (or FAILED). Then what "one Workflow per agent"
 * really means on this server.
 */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { AgentRpcError, TinkAgentClient, type AgentAction } from "../harness/tinkAgentClient.js";
import {
  apiError, create, get, Hardware, hardwareBody, poll, remove, startEnv, templateBody, workflow, workflowBody, type Env,
} from "./fixtures.js";

let env: Env;
let agent: TinkAgentClient;

before(async () => {
  const t0 = Date.now();
  env = await startEnv("fleetd-tink");
  agent = await TinkAgentClient.connect(env.tb.grpcAddress);
  process.stdout.write(`# Kubernetes ${env.cp.version}, Tinkerbell tink-server at ${env.tb.grpcAddress}, ready in ${Date.now() - t0} ms\n`);
}, { timeout: 60 * 60_000 }); // a cold build of the binaries can take long on 2 cores
after(async () => {
  agent?.close();
  await env?.stop();
});

const MAC = "02:00:5e:10:00:01";

/** GetAction's gRPC failure; fails the test if an action is served instead. */
async function rpcFailure(p: Promise<AgentAction>): Promise<AgentRpcError> {
  try {
    const a = await p;
    assert.fail(`expected a gRPC failure, got action ${a.name} of ${a.workflowId}`);
  } catch (e) {
    if (e instanceof AgentRpcError) return e;
    throw e;
  }
}

test("the v1alpha1 CRDs are installed and Established", () => {
  assert.deepEqual([...env.crds].sort(), [
    "hardware.tinkerbell.org", "jobs.bmc.tinkerbell.org", "machines.bmc.tinkerbell.org", "tasks.bmc.tinkerbell.org",
    "templates.tinkerbell.org", "workflowrulesets.tinkerbell.org", "workflows.tinkerbell.org",
  ]);
});

test("the Hardware CRD's schema rejects an uppercase MAC (422) and accepts it lowercased", async () => {
  const upper = MAC.toUpperCase().replace("02:", "0A:");
  const err = await create(env, "hardware", hardwareBody("upper-mac", upper)).then(() => undefined, apiError);
  assert.ok(err, "the API server accepted a Hardware with an uppercase MAC");
  assert.equal(err.code, 422);
  assert.match(err.body, /spec\.interfaces\[0\]\.dhcp\.mac/);
  assert.match(err.body, /should match/);
  await assert.rejects(get(env, "hardware", "upper-mac"), (e) => apiError(e).code === 404);

  await create(env, "hardware", hardwareBody("lower-mac", upper.toLowerCase()));
  const hw = Hardware.parse(await get(env, "hardware", "lower-mac"));
  assert.equal(hw.spec.interfaces?.[0]?.dhcp?.mac, upper.toLowerCase());
});

test("tink-controller renders the Workflow; the agent is served each action over gRPC, reports it, and the Workflow reaches SUCCESS", async () => {
  await create(env, "hardware", hardwareBody("node-1", MAC));
  await create(env, "templates", templateBody("fleetd-provision"));
  await create(env, "workflows", workflowBody("wf-1", "node-1", "fleetd-provision", MAC));

  // The controller renders the Template with our Hardware and hands the Workflow to the server (PENDING).
  const wf = await poll(env, "wf-1 PENDING", async () => {
    const w = await workflow(env, "wf-1");
    return w.status?.state === "PENDING" ? w : undefined;
  });
  assert.equal(wf.status?.templateRendering, "successful");
  assert.equal(wf.status?.agentID, MAC);
  const task = wf.status?.tasks?.[0];
  assert.ok(task, "no rendered task");
  assert.equal(wf.status?.tasks?.length, 1);
  assert.equal(task.agentID, MAC);
  assert.deepEqual(task.volumes, ["/dev:/dev"]);
  assert.deepEqual(task.environment, { WORKER_ID: MAC });
  assert.deepEqual(task.actions.map((a) => [a.name, a.state]), [["attest", "PENDING"], ["write-config", "PENDING"]]);
  assert.deepEqual(task.actions[0]?.environment, { HW_NAME: "node-1", DISK: "/dev/nvme0n1", INSTANCE_ID: "node-1-instance" });

  // The first action, as the agent receives it: image, timeout, env = task env + action env.
  const attributes = { network: [{ name: "eth0", mac: MAC, speed: "25Gb/s" }], product: { vendor: "fleetd-test", name: "lab-node", serial_number: "SN-0001" } };
  const first = await agent.getAction(MAC, attributes);
  assert.equal(first.workflowId, "fleetd-tink/wf-1");
  assert.equal(first.agentId, MAC);
  assert.equal(first.name, "attest");
  assert.equal(first.actionId, task.actions[0]?.id);
  assert.equal(first.image, "registry.invalid/fleetd/tink-action:test");
  assert.equal(first.timeout, 600);
  assert.deepEqual(first.volumes, ["/dev:/dev"]);
  assert.deepEqual(first.environment, { DISK: "/dev/nvme0n1", HW_NAME: "node-1", INSTANCE_ID: "node-1-instance", WORKER_ID: MAC });
  assert.deepEqual(first.environmentList, [...first.environmentList].sort(), "the server sends env sorted");

  // The server records the agent's attributes on the Hardware (first action only).
  const hw = Hardware.parse(await get(env, "hardware", "node-1"));
  const recorded = hw.metadata.annotations?.["tinkerbell.org/agent-attributes"];
  assert.ok(recorded, "no agent-attributes annotation on the Hardware");
  assert.match(recorded, /SN-0001/);

  // RUNNING is reflected on the Workflow before the outcome.
  const start = new Date();
  await agent.reportActionStatus(first, "RUNNING", { message: "running action", start, stop: start });
  const running = await workflow(env, "wf-1");
  assert.equal(running.status?.state, "RUNNING");
  assert.equal(running.status?.tasks?.[0]?.actions[0]?.state, "RUNNING");
  await agent.reportActionStatus(first, "SUCCESS", { message: "action completed", start, stop: new Date() });

  // The second action: the action's env wins over the task's.
  const second = await agent.getAction(MAC);
  assert.equal(second.name, "write-config");
  assert.deepEqual(second.command, ["--mode", "0600"]);
  assert.deepEqual(second.environment, { DEST_DISK: "/dev/nvme0n1p2", WORKER_ID: "overridden-by-action" });
  await agent.perform(second, async () => "SUCCESS");

  const done = await poll(env, "wf-1 SUCCESS", async () => {
    const w = await workflow(env, "wf-1");
    return w.status?.state === "SUCCESS" ? w : undefined;
  });
  assert.deepEqual(done.status?.tasks?.[0]?.actions.map((a) => [a.name, a.state, a.message]), [
    ["attest", "SUCCESS", "action completed"], ["write-config", "SUCCESS", "action completed"],
  ]);
});

test("one Workflow per agent: a finished Workflow answers FAILED_PRECONDITION, an unknown agent NOT_FOUND; a new Workflow is served once the old one is deleted", async () => {
  // tink-server retries a failing GetAction for up to a minute before answering: ask both at once.
  const [finished, unknown] = await Promise.all([
    rpcFailure(agent.getAction(MAC)),
    rpcFailure(agent.getAction("02:00:5e:10:00:99")),
  ]);
  assert.equal(finished.codeName, "FAILED_PRECONDITION");
  assert.match(finished.details, /not in pending or running state/);
  assert.equal(unknown.codeName, "NOT_FOUND");
  assert.match(unknown.details, /no Workflows found/);

  // A second Workflow for the same agent while the finished one exists.
  await create(env, "workflows", workflowBody("wf-2", "node-1", "fleetd-provision", MAC));
  await poll(env, "wf-2 PENDING", async () => ((await workflow(env, "wf-2")).status?.state === "PENDING" ? true : undefined));
  // The server lists the agent's Workflows from an index in map order (random) and refuses when the finished
  // one comes first, then retries the same GetAction every second: the answer is wf-2 after a random delay,
  // or (rarely, if the finished one came first for a whole minute) FAILED_PRECONDITION. Reported, not timed.
  const t0 = Date.now();
  const both = await agent.getAction(MAC).then((a) => a, (e: unknown) => e);
  process.stdout.write(`# GetAction with a finished and a pending Workflow for one agent: ${both instanceof AgentRpcError ? both.message : `served ${(both as AgentAction).workflowId}`} after ${Date.now() - t0} ms\n`);
  // Never the finished Workflow: either wf-2 or a refusal.
  if (!(both instanceof AgentRpcError)) assert.equal((both as AgentAction).workflowId, "fleetd-tink/wf-2");

  // fleetd's rule: delete the previous Workflow first. Then the new one is served, and a FAILED report fails it.
  await remove(env, "workflows", "wf-1");
  await poll(env, "wf-1 gone", async () => get(env, "workflows", "wf-1").then(() => undefined, (e) => (apiError(e).code === 404 ? true : undefined)));
  const next = await agent.getAction(MAC);
  assert.equal(next.workflowId, "fleetd-tink/wf-2");
  assert.equal(next.name, "attest");
  await agent.perform(next, async () => "FAILED");
  const failed = await poll(env, "wf-2 FAILED", async () => {
    const w = await workflow(env, "wf-2");
    return w.status?.state === "FAILED" ? w : undefined;
  });
  assert.deepEqual(failed.status?.tasks?.[0]?.actions.map((a) => a.state), ["FAILED", "PENDING"]);
});
