/**
 * fleetd's Tinkerbell side end to end with every platform real (platformWorld.ts: NetBox, netbox-script, the
 * real tink-controller, tink-server and Rufio v0.25.0, a Redfish BMC emulator, the agent protocol over gRPC):
 *   1. desired_action provision → Hardware, Machine, Templates, Workflow → netboot Job run against the BMC →
 *      the agent is served fleetd-attest (mode provision, this Workflow's name) and the rest → SUCCESS.
 *   2. a re-provision deletes the finished Workflow first; the agent is served the new one.
 *   3. status decommissioning → the retirement steps with this platform: the wipe Workflow (netboot, served to
 *      the agent), a Rufio power-off Job the BMC obeys, NetBox offline, each step journalled.
 */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { patchDevice } from "@fleetd/shared/netbox/device";
import { readJournal } from "@fleetd/shared/netbox/journal";
import { device } from "../netbox/handlerFixture.js";
import type { AgentAction } from "../harness/tinkAgent.js";
import { poll, workflow } from "./fixtures.js";
import { NODE, NS, startPlatformWorld, type PlatformWorld } from "./platformWorld.js";

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
  const last = w.handler.intents.all().filter((i) => i.deviceId === d.id && i.effect?.effect === "workflow").at(-1);
  assert.ok(last?.effect?.effect === "workflow" && last.effect.deleted.length >= 1, `the previous finished Workflow was deleted: ${JSON.stringify(last?.effect)}`);
});

test("decommissioning: the wipe Workflow is served, the Rufio power-off Job turns the BMC off, NetBox ends offline", async () => {
  const d = await device(w.f, NODE);
  assert.equal(await w.bmc.powerState(), "On");
  await patchDevice(w.f.client(w.f.alice.token), d.id, { status: "decommissioning" }, null, "test: retire");
  const wf = await poll(w.env, "the wipe Workflow", async () => {
    const items = ((await w.env.custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", labelSelector: `fleetd.io/node=${NODE}` })) as { items: { metadata: { name: string }; spec: { templateRef: string } }[] }).items;
    return items.find((i) => /wipe/.test(i.spec.templateRef))?.metadata.name;
  }, 120_000);
  // If Rufio fails the netboot Job by itself, the retirement platform starts the same Workflow again.
  let first: AgentAction | undefined;
  for (let i = 0; i < 4 && !first; i++) {
    first = await w.firstAction(wf).catch(async (e: unknown) => {
      w.notes.push(`wipe Workflow not served yet (${(e as Error).message.split("\n")[0]}); waiting for the retirement to start it again`);
      await new Promise((r) => setTimeout(r, 5000));
      return undefined;
    });
  }
  assert.ok(first, "the wipe Workflow was served to the agent");
  const names = await w.runToSuccess(wf, first);
  assert.deepEqual(names, ["fleetd-attest", "wipe-disk", "fleetd-clear-tpm"], "attest (wipe mode), the whole disk, the TPM owner hierarchy");
  await poll(w.env, "the BMC to be powered off", async () => ((await w.bmc.powerState()) === "Off" ? true : undefined), 180_000);
  await poll(w.env, "NetBox offline", async () => ((await device(w.f, NODE)).status === "offline" ? true : undefined), 120_000);
  // The status changes before the step's own journal line is written: wait for that line, not only the status.
  const journal = await poll(w.env, "the netbox-offline step journalled", async () => {
    const j = await readJournal(w.f.admin, d.id);
    return j.some((e) => e.comments.includes("retirement step netbox-offline")) ? j : undefined;
  }, 30_000);
  for (const step of ["cordon", "evict", "netboot", "delete-node", "delete-cluster-records", "wipe", "power-off", "netbox-offline"]) {
    assert.ok(journal.some((j) => j.comments.includes(step)), `journal names step ${step}: ${JSON.stringify(journal.map((j) => j.comments))}`);
  }
});
