/**
 * The Tinkerbell end-to-end world with the REAL tink-agent (platformWorld.ts, agent "real"; issue 13, work in
 * progress): NetBox → netbox-script → the real tink-controller, Rufio (Redfish emulator) and tink-server → the
 * real tink-agent on podman's Docker API, pulling fleetd-tink-action and the lab's wipe/image2disk images from a
 * loopback registry by the digests the Templates pin. The install disk is a loop device over a scratch image.
 *
 * What holds today: desired_action provision → the Workflow's first action, fleetd-attest, runs as a container and
 * fails (this world has no attestation server yet, and the action reads the host's own claims and event log), so
 * the Workflow ends FAILED before wipe-disk: wipe-disk, install-talos and fleetd-write-meta never run, the install
 * disk's SHA-256 is unchanged and the OS image was never fetched.
 */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { sha256File } from "../harness/loopDisk.js";
import { workflow } from "./fixtures.js";
import { startPlatformWorld, type PlatformWorld } from "./platformWorld.js";

let w: PlatformWorld;

before(async () => {
  w = await startPlatformWorld({ agent: "real" });
}, { timeout: 60 * 60_000 });

after(async () => {
  if (w?.real) process.stdout.write(`# lab set-up timings (ms): ${JSON.stringify(w.real.timings)}\n`);
  await w?.stop();
  if (w && w.notes.length > 0) process.stdout.write(w.notes.map((l) => `# ${l}\n`).join(""));
});

test("desired_action provision with the real tink-agent: fleetd-attest runs as a container from the loopback registry; its failure stops the Workflow before wipe-disk and the install disk is untouched", { timeout: 20 * 60_000 }, async () => {
  const real = w.real;
  assert.ok(real);
  const t0 = Date.now();
  const wf = await w.ranToEnd("provision");
  const s = await workflow(w.env, wf);
  process.stdout.write(`# ${wf} ended ${s.status?.state} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  const actions = s.status?.tasks?.[0]?.actions ?? [];
  assert.deepEqual(actions.map((a) => a.name), ["fleetd-attest", "wipe-disk", "install-talos", "fleetd-write-meta"]);
  assert.deepEqual(actions.map((a) => a.image), [real.images.action, real.images.wipe, real.images.image2disk, real.images.action], "the Templates pin the digests the loopback registry holds");
  assert.equal(s.status?.state, "FAILED", JSON.stringify(s.status));
  assert.deepEqual(actions.map((a) => a.state), ["FAILED", "PENDING", "PENDING", "PENDING"], "nothing after fleetd-attest ran");

  // The agent really ran the action as a container (its output is in the agent's log).
  const outputs = real.agent.actionOutput();
  const attest = [...outputs].find(([name]) => name.includes("fleetd-attest"));
  assert.ok(attest, `the agent ran fleetd-attest as a container: ${[...outputs.keys()].join(", ")}\n${real.agent.log().slice(-3000)}`);
  process.stdout.write(`# fleetd-attest's output:\n${attest[1].split("\n").slice(-15).map((l) => `#   ${l}`).join("\n")}\n`);
  assert.ok(![...outputs.keys()].some((n) => /wipe-disk|install-talos|write-meta/.test(n)), "no later action ran");

  assert.equal(await sha256File(real.disk.device), real.diskSha256, "the install disk is unchanged");
  assert.equal(real.osImage.gets(), 0, "the OS image was never fetched");
});
