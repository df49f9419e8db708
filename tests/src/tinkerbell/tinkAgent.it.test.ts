/**
 * The REAL tink-agent (cmd/agent of github.com/tinkerbell/tinkerbell, the version tests/go/tinkerbell-bin pins)
 * against the real tink-server/tink-controller on a real control plane. No container engine is given to it here
 * (its Docker socket names a path that does not exist: podman's Docker API is the lab's, started elsewhere), so
 * this shows the agent's half without containers: it reports the pinned version, reaches tink-server, is served
 * its Workflow's action, reports RUNNING and then FAILED because it cannot run a container, and the Workflow ends
 * FAILED with the next action never started.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { startTinkAgent, type TinkAgent } from "../harness/tinkAgent.js";
import { repoRoot } from "../talos/goTools.js";
import { create, get, Hardware, hardwareBody, poll, startEnv, workflow, workflowBody, type Env } from "./fixtures.js";

const MAC = "02:00:5e:10:00:31";
const PINNED = readFileSync(join(repoRoot, "tests/go/tinkerbell-bin/go.mod"), "utf8").match(/^\s*github\.com\/tinkerbell\/tinkerbell (v\S+)/m)?.[1];

let env: Env;
let dir: string;
let agent: TinkAgent | undefined;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-tink-agent-"));
  env = await startEnv("fleetd-agent");
}, { timeout: 10 * 60_000 });
after(async () => {
  await agent?.stop();
  await env?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const template = [
  'version: "0.1"',
  "name: agent-no-runtime",
  "global_timeout: 600",
  "tasks:",
  "  - name: provision",
  '    worker: "{{.device_1}}"',
  "    actions:",
  "      - name: first",
  `        image: "127.0.0.1:5000/fleetd/tink-action@sha256:${"a".repeat(64)}"`,
  "        timeout: 60",
  '        command: ["write-meta", "--help"]',
  "        environment:",
  '          DEST_DISK: "{{ index .Hardware.Disks 0 }}"',
  "      - name: second",
  `        image: "127.0.0.1:5000/fleetd/tink-action@sha256:${"b".repeat(64)}"`,
  "        timeout: 60",
  "",
].join("\n");

test("tink-agent reports the pinned version, is served its Workflow's action by the real tink-server, and without a container runtime fails it (FAILED, the next action never runs)", { timeout: 5 * 60_000 }, async () => {
  assert.ok(PINNED, "tests/go/tinkerbell-bin/go.mod pins github.com/tinkerbell/tinkerbell");
  const socket = join(dir, "no-docker-here.sock");
  agent = await startTinkAgent({ id: MAC, grpcServer: env.tb.grpcAddress, runtime: { kind: "docker", socket } });
  assert.equal(agent.version, PINNED, "the agent is the pinned tinkerbell version");
  process.stdout.write(`# tink-agent ${agent.version} (pid ${agent.pid}): ${agent.args.join(" ")}\n`);

  // No Workflow yet: the agent keeps asking (tink-server answers NOT_FOUND) and stays up.
  await agent.waitForLine("a GetAction retry", (l) => l.msg === "starting gRPC transport", 10_000);
  assert.equal(agent.hasExited(), false);

  await create(env, "hardware", {
    ...hardwareBody("agent-node", MAC),
    spec: { ...(hardwareBody("agent-node", MAC) as { spec: object }).spec, disks: [{ device: "/dev/loop7" }] },
  });
  await create(env, "templates", { apiVersion: "tinkerbell.org/v1alpha1", kind: "Template", metadata: { name: "agent-no-runtime" }, spec: { data: template } });
  await create(env, "workflows", workflowBody("wf-agent", "agent-node", "agent-no-runtime", MAC));

  const received = await agent.waitForLine("the served action", (l) => l.msg === "received action", 120_000);
  // The agent logs the action as its spec.Action (JSON field names).
  const action = received["action"] as { name?: string; image?: string; env?: { key: string; value: string }[] } | undefined;
  assert.equal(action?.name, "first", `the first action is served: ${JSON.stringify(received)}`);
  assert.equal(action?.image, `127.0.0.1:5000/fleetd/tink-action@sha256:${"a".repeat(64)}`);
  assert.ok(action?.env?.some((e) => e.key === "DEST_DISK" && e.value === "/dev/loop7"), `DEST_DISK comes from the Hardware: ${JSON.stringify(action?.env)}`);

  const failed = await agent.waitForLine("the action's failure", (l) => l.msg === "error executing action", 60_000);
  assert.match(failed.error ?? "", /docker/i);
  assert.ok((failed.error ?? "").includes(socket), `the failure names the missing socket: ${failed.error}`);

  const wf = await poll(env, "wf-agent FAILED", async () => {
    const w = await workflow(env, "wf-agent");
    return w.status?.state === "FAILED" ? w : undefined;
  }, 60_000);
  assert.deepEqual(wf.status?.tasks?.[0]?.actions.map((a) => [a.name, a.state]), [["first", "FAILED"], ["second", "PENDING"]]);
  assert.equal(wf.status?.tasks?.[0]?.actions[0]?.message, "action completed", "the agent's own report message");

  // The real agent detected and reported this machine's attributes (ghw); tink-server recorded them on the Hardware.
  const hw = Hardware.parse(await get(env, "hardware", "agent-node"));
  const attrs = hw.metadata.annotations?.["tinkerbell.org/agent-attributes"];
  assert.ok(attrs, "no agent-attributes annotation on the Hardware");
  assert.ok(JSON.parse(attrs) !== null && typeof JSON.parse(attrs) === "object", `attributes are JSON: ${attrs.slice(0, 200)}`);

  // What the agent itself reported: RUNNING before the attempt, then the failure.
  await agent.waitForLine("the final report", (l) => l.msg === "reported action status" && !/running/i.test(String(l["state"])), 30_000);
  const reports = agent.lines().filter((l) => l.msg === "reported action status").map((l) => String(l["state"]));
  assert.equal(reports.length, 2, `two reports: ${reports.join(", ")}`);
  assert.match(reports[0] ?? "", /running/i);
  assert.match(reports[1] ?? "", /fail/i);

  assert.equal(agent.actionOutput().size, 0, "no container ran, so no container output");
  const stopped = await agent.stop();
  assert.equal(stopped.code, 0, `SIGTERM stops the agent cleanly:\n${agent.log().slice(-2000)}`);
  assert.ok(agent.lines().some((l) => l.msg === "stopped Agent"), "the agent logs its stop");
});
