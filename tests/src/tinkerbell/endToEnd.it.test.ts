/**
 * fleetd's Tinkerbell side end to end with every platform real (platformWorld.ts: NetBox, netbox-script, the
 * real tink-controller, tink-server and Rufio v0.25.0, a Redfish BMC emulator, the agent protocol over gRPC):
 *   1. desired_action provision → Hardware, Machine, Templates, Workflow → netboot Job run against the BMC →
 *      the agent is served fleetd-attest (mode provision, this Workflow's name) and the rest → SUCCESS.
 *   2. a re-provision deletes the finished Workflow first; the agent is served the new one.
 *   3. status decommissioning → the retirement steps with this platform: the wipe Workflow (netboot, served to
 *      the agent), a Rufio power-off Job the BMC obeys, NetBox offline, each step journalled.
 *
 * The agent here is still the scripted one (platformWorld "scripted": fleetd's TypeScript client of the agent
 * protocol reports each action's outcome without running it; test 3 needs it to report a FAILED message of its
 * choosing). The same provision with the real tink-agent, real containers, the real attestation server and a
 * loop device is realAgent.it.test.ts (issue 13: the retirement and re-provision move there next).
 */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { readJournal } from "@fleetd/platform/netbox";
import { device } from "../netbox/handlerFixture.js";
import { poll, workflow } from "./fixtures.js";
import { NODE, startPlatformWorld, type PlatformWorld } from "./platformWorld.js";

let w: PlatformWorld;

before(async () => {
  w = await startPlatformWorld();
}, { timeout: 60 * 60_000 });

after(async () => {
  await w?.stop();
  if (w && w.notes.length > 0) process.stdout.write(w.notes.map((l) => `# ${l}\n`).join(""));
});

test("desired_action provision: the real tink-controller renders fleetd's Template, Rufio netboots the BMC, tink-server serves the actions, the Workflow succeeds", async () => {
  const { wf, first } = await w.served("provision");
  assert.equal(first.name, "fleetd-attest");
  assert.deepEqual(first.command, ["attest", "--mode", "provision"]);
  assert.equal(first.environment["FLEETD_WORKFLOW"], wf, "hardwareMap.fleetd_workflow rendered into the action");
  assert.equal(first.environment["FLEETD_MODE"], "provision");
  assert.equal(first.environment["FLEETD_SERVER"], "https://fleetd.example.internal:8443");
  assert.equal(first.namespaces?.network, "host");
  const s = await workflow(w.env, wf);
  assert.equal(s.status?.templateRendering, "successful");
  assert.equal(s.status?.bootOptions?.jobs?.[`netboot-${wf}`]?.complete, true, "the controller's netboot Job completed against the BMC");
  assert.equal(await w.bmc.powerState(), "On");
  assert.equal((await w.bmc.bootSource()).target, "Pxe");
  assert.deepEqual(await w.runToSuccess(wf, first), ["fleetd-attest", "wipe-disk", "install-talos", "fleetd-write-meta"]);
  assert.equal((await workflow(w.env, wf)).status?.state, "SUCCESS");
});

test("re-provision: the finished Workflow is deleted first and the new one is served", async () => {
  const { wf, first } = await w.served("provision");
  assert.equal((await w.runToSuccess(wf, first))[0], "fleetd-attest");
  const d = await device(w.f, NODE);
  const last = (await w.handler.intents.all()).filter((i) => i.deviceId === d.id && i.effect?.effect === "workflow").at(-1);
  assert.ok(last?.effect?.effect === "workflow" && last.effect.deleted.length >= 1, `the previous finished Workflow was deleted: ${JSON.stringify(last?.effect)}`);
});

test("how Workflows end is journalled: an action the agent reports FAILED (tink-server records its message) and the provisions that succeeded", async () => {
  await w.handler.followWorkflows(); // the re-provision's end, before the next request deletes that Workflow
  const { wf, first } = await w.served("attest");
  assert.equal(first.name, "fleetd-attest");
  const start = new Date();
  await w.agent.reportActionStatus(first, "RUNNING", { message: "running action", start, stop: start });
  await w.agent.reportActionStatus(first, "FAILED", { message: "attestation refused: quote.pcr: PCR 7 differs from the profile", start, stop: new Date() });
  await poll(w.env, `${wf} to fail`, async () => ((await workflow(w.env, wf)).status?.state === "FAILED" ? true : undefined));
  await w.handler.followWorkflows();
  const journal = (await readJournal(w.f.admin, (await device(w.f, NODE)).id)).map((j) => ({ kind: j.kind, comments: j.comments }));
  const failed = journal.find((j) => j.comments.includes(`attest Workflow ${wf} failed at action fleetd-attest`));
  assert.ok(failed?.kind === "danger" && failed.comments.includes("`workflow.action`: fleetd-attest (FAILED): `attestation refused: quote.pcr: PCR 7 differs from the profile`"), JSON.stringify(journal));
  assert.equal(journal.filter((j) => j.kind === "success" && / succeeded: fleetd-attest → wipe-disk → install-talos → fleetd-write-meta$/.test(j.comments)).length, 1, "the re-provision's (the first provision's Workflow was deleted unjournalled by the re-provision, whose own entry names it and its state)");
  await w.handler.followWorkflows();
  assert.equal((await readJournal(w.f.admin, (await device(w.f, NODE)).id)).length, journal.length, "each end journalled once");
});

test("decommissioning: the wipe Workflow is served, the Rufio power-off Job turns the BMC off, NetBox ends offline", async () => {
  assert.equal(await w.bmc.powerState(), "On");
  const { actions: names, journal } = await w.retire("test: retire");
  assert.deepEqual(names, ["fleetd-attest", "wipe-disk", "fleetd-clear-tpm"], "attest (wipe mode), the whole disk, the TPM owner hierarchy");
  for (const step of ["cordon", "evict", "netboot", "delete-node", "delete-cluster-records", "wipe", "power-off", "spire", "netbox-offline"]) {
    assert.ok(journal.some((j) => j.comments.includes(step)), `journal names step ${step}: ${JSON.stringify(journal.map((j) => j.comments))}`);
  }
});
