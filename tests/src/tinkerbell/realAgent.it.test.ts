/**
 * fleetd's Tinkerbell side end to end with every platform real and the REAL tink-agent (platformWorld.ts, agent
 * "real"): NetBox → netbox-script → the real tink-controller, Rufio (Redfish emulator) and tink-server → the real
 * tink-agent on podman's Docker API, pulling fleetd-tink-action and the lab's wipe/image2disk images from a
 * loopback registry by the digests the Templates pin. The install disk is a loop device over a scratch image.
 * fleetd-attest attests against the real attestation server with the machine's swtpm (its real EKs approved on
 * rack-1 in the nodes file; its claims and HookOS event log a sysfs directory mounted into the action; LLDP from
 * rack-1's switch port on a veth). Nothing is recorded or reported for the machine: it proves everything itself.
 *
 *   1. intake → admission → provision: the machine powers on into HookOS (its agent starts); no Hardware names it,
 *      so tink-server enrolls it into fleetd's intake Workflow (auto-enrollment, fleetd's rule set); fleetd-attest
 *      proves its EKs and boot, the server records its MAC and issues its LDevID; the confirm runs admission, which
 *      creates the Hardware and the provision Workflow; its netboot Job power-cycles the machine (a new agent); the
 *      real agent runs it: attest passes again, wipe-disk wipes the loop device, install-talos writes the lab OS
 *      image, fleetd-write-meta writes META 0x0b = the install code (read back with Talos's reader); the SUCCESS is
 *      journalled once.
 *   2. NetBox desired_action: provision (the finished Workflow deleted first), and the machine's PCR 7 no longer
 *      matches its event log: the server refuses, the Workflow stops before wipe-disk, the loop device's SHA-256 is
 *      unchanged, the FAILED action journalled with the server's reason; the admitted machine is never enrolled again.
 *   3. decommissioning: the wipe Workflow (attest in wipe mode, the whole disk, the TPM), Rufio's power-off, NetBox
 *      offline, each retirement step journalled.
 * (The scripted agent client, tests/src/harness/tinkAgentClient.ts, is left only in workflow.it and rufio.it, which
 * probe what tink-server itself does with an agent's calls.)
 */
import { strict as assert } from "node:assert";
import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { labOsImage, sha256File } from "../harness/loopDisk.js";
import { runProcess } from "../harness/process.js";
import { advread } from "../talos/goTools.js";
import { enrollmentWorkflowName } from "@fleetd/platform/tinkerbell";
import { readJournal } from "@fleetd/platform/netbox";
import { device } from "../netbox/handlerFixture.js";
import { get, list, poll, workflow } from "./fixtures.js";
import { NODE, startPlatformWorld, type PlatformWorld } from "./platformWorld.js";

let w: PlatformWorld;

before(async () => {
  w = await startPlatformWorld();
}, { timeout: 60 * 60_000 });

after(async () => {
  if (w?.real) process.stdout.write(`# lab set-up timings (ms): ${JSON.stringify(w.real.timings)}\n`);
  await w?.stop();
  if (w && w.notes.length > 0) process.stdout.write(w.notes.map((l) => `# ${l}\n`).join(""));
});

interface ActionResult {
  mode?: string;
  verdict?: string;
  step?: string;
  error?: string;
  reasons?: { check: string; detail: string }[];
  installCode?: boolean;
}

function lab() {
  assert.ok(w.real, "a real-agent world");
  return w.real;
}

/** The action's result.json on the Workflow's shared volume (workerDir/fleetd). */
function actionResult(): ActionResult {
  const file = join(lab().actionOut, "result.json");
  assert.ok(existsSync(file), `the action wrote ${file}\n${lab().agent.log().slice(-3000)}`);
  return JSON.parse(readFileSync(file, "utf8")) as ActionResult;
}

const printed = new Set<string>();
/** Each action container's output not printed yet (the last lines), as the agent logged it. */
function printOutputs(): Map<string, string> {
  const outputs = new Map(lab().agents.flatMap((a) => [...a.actionOutput()]));
  for (const [name, text] of outputs) if (!printed.has(name) && printed.add(name)) process.stdout.write(`# ${name}:\n${text.trim().split("\n").slice(-8).map((l) => `#   ${l}`).join("\n")}\n`);
  return outputs;
}

/**
 * The host's own disks (every block device but loop, ram and zram devices: other tests' loop devices may change
 * meanwhile): SHA-256 of the first and last MiB of each, where a wipe or an image write would land first.
 */
function hostDisksFingerprint(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of readdirSync("/sys/block").filter((n) => !/^(loop|ram|zram)\d+$/.test(n)).sort()) {
    const sectors = Number(readFileSync(`/sys/block/${name}/size`, "utf8").trim());
    if (!(sectors > 0)) continue;
    const size = sectors * 512;
    const mib = Math.min(1 << 20, size);
    let fd: number;
    try {
      fd = openSync(`/dev/${name}`, "r");
    } catch (e) {
      // this sandbox may forbid even root to open the host's disk (EPERM): recorded as such, compared as such
      out[name] = `unreadable: ${(e as NodeJS.ErrnoException).code ?? "error"}`;
      continue;
    }
    try {
      const h = createHash("sha256");
      for (const at of [0, size - mib]) {
        const b = Buffer.alloc(mib);
        readSync(fd, b, 0, mib, at);
        h.update(b);
      }
      out[name] = h.digest("hex");
    } finally {
      closeSync(fd);
    }
  }
  return out;
}

const head = (path: string, n: number): Buffer => {
  const fd = openSync(path, "r");
  try {
    const b = Buffer.alloc(n);
    readSync(fd, b, 0, n, 0);
    return b;
  } finally {
    closeSync(fd);
  }
};

test("intake → admission → provision with the real tink-agent: tink-server enrolls the unknown machine, fleetd-attest passes against the real server with the swtpm, the confirm creates the Hardware and provision Workflow, and that Workflow wipes the loop device, writes the lab OS image and META 0x0b holds the install code", { timeout: 20 * 60_000 }, async () => {
  const real = lab();
  const hostDisks = hostDisksFingerprint();
  assert.ok(Object.keys(hostDisks).length > 0, "the host has a disk to watch");
  const d = await device(w.f, NODE);
  assert.equal(d.status, "planned");
  assert.equal((await list(w.env, "hardware")).length, 0, "no Hardware names the machine before it boots");
  const t0 = Date.now();
  await real.startAgent();
  // tink-server's auto-enrollment: the intake Workflow for the agent, from fleetd's rule set and intake Template
  const intake = enrollmentWorkflowName(w.bmc.mac.toLowerCase());
  const enrolled = await poll(w.env, `${intake} (auto-enrollment)`, async () => (await get(w.env, "workflows", intake).catch(() => undefined)) as { spec: { templateRef: string; hardwareMap: Record<string, string> } } | undefined, 120_000);
  assert.equal(enrolled.spec.templateRef, "fleetd-intake");
  assert.equal(enrolled.spec.hardwareMap["device_1"], w.bmc.mac.toLowerCase());
  // the intake's confirm ran admission: journalled, with the Hardware and the provision Workflow it created
  const { line: admitted, provisions } = await w.admitted();
  process.stdout.write(`# ${((Date.now() - t0) / 1000).toFixed(1)} s to admission: ${admitted.comments}\n`);
  assert.equal(admitted.kind, "success", admitted.comments);
  // the server's own journal lines go through its outbox (delivered after the answer)
  await poll(w.env, "intake confirmed by the LDevID the server issued (journal)", async () => ((await readJournal(w.f.admin, d.id)).some((e) => e.comments.includes("intake confirmed by the new LDevID")) ? true : undefined), 60_000);
  await poll(w.env, "intake's verdict and proven MAC in NetBox", async () => {
    const now = await device(w.f, NODE);
    return now.cf["attestation_verdict"] === "pass" && now.cf["boot_mac"] === w.bmc.mac.toLowerCase() ? true : undefined;
  }, 60_000);
  const hardware = (await list(w.env, "hardware")) as { metadata: { name: string }; spec: { interfaces?: { dhcp?: { mac?: string } }[] } }[];
  assert.deepEqual(hardware.map((h) => [h.metadata.name, h.spec.interfaces?.[0]?.dhcp?.mac]), [[NODE, w.bmc.mac.toLowerCase()]], "admission's Hardware: the node, its proven boot MAC");
  assert.equal(provisions.length, 1, "admission created one provision Workflow");
  const wf = provisions[0]!;
  assert.ok(admitted.comments.includes(wf), `the journal names ${wf}`);
  assert.equal(await get(w.env, "workflows", intake).catch(() => undefined), undefined, "the intake Workflow was superseded");
  // the provision Workflow's netboot Job power-cycles the machine through its BMC: HookOS boots again, a new agent
  const state = await w.endOf(wf, Number(process.env["FLEETD_E2E_END_MS"] ?? 600_000));
  const s = await workflow(w.env, wf);
  assert.equal(state, s.status?.state);
  process.stdout.write(`# boots by the BMC: ${JSON.stringify(real.boots)}\n`);
  assert.ok(real.boots.length >= 1, "the netboot Job rebooted the machine into HookOS (its agent started again)");
  process.stdout.write(`# ${wf} ended ${s.status?.state} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  printOutputs();
  const actions = s.status?.tasks?.[0]?.actions ?? [];
  assert.deepEqual(actions.map((a) => a.name), ["fleetd-attest", "wipe-disk", "install-talos", "fleetd-write-meta"]);
  assert.deepEqual(actions.map((a) => a.image), [real.images.action, real.images.wipe, real.images.image2disk, real.images.action], "the Templates pin the digests the loopback registry holds");
  // every disk an action was given is the lab's loop device (the containers are privileged: /dev is all there)
  const named = actions.flatMap((a) => [...Object.values(a.environment ?? {}), ...(a.command ?? [])]).filter((v) => v.startsWith("/dev/"));
  assert.deepEqual([...new Set(named)], [real.disk.device], `the disks the actions name: ${JSON.stringify(named)}`);
  const result = actionResult();
  process.stdout.write(`# fleetd-attest result: ${JSON.stringify(result)}\n`);
  process.stdout.write(`# host disks watched: ${JSON.stringify(hostDisks)}\n`);
  assert.equal(s.status?.state, "SUCCESS", `${JSON.stringify(actions.map((a) => [a.name, a.state, a.message]))}`);
  assert.equal(result.verdict, "pass");
  assert.equal(result.installCode, true);
  assert.equal(real.osImage.gets(), 1, "install-talos fetched the OS image once");

  const code = readFileSync(join(real.actionOut, "install-code"), "utf8").trim();
  assert.match(code, /^[0-9a-f]{64}$/);
  // advread sizes a file with stat (a block device's is 0): read the device's bytes into a file for it.
  const readBack = join(real.workerDir, "..", "read-back.img");
  const dd = await runProcess("dd", [`if=${real.disk.device}`, `of=${readBack}`, "bs=1M", "status=none"], { timeoutMs: 120_000 });
  assert.equal(dd.code, 0, dd.stderr.toString());
  try {
    const meta = advread(readBack);
    assert.equal(meta.tags["0x0b"]?.text, code, "META key 0x0b holds the install code (Talos's reader on the loop device's bytes)");
    assert.ok(meta.copies.every((c) => c.valid));
    const os = await labOsImage();
    assert.ok(head(readBack, 1 << 20).equals(head(os.raw, 1 << 20)), "the lab OS image's GPT is on the disk (install-talos wrote it)");
  } finally {
    rmSync(readBack, { force: true });
  }
  assert.notEqual(await sha256File(real.disk.device), real.diskSha256, "the disk changed");
  // how it ended is journalled by the handler's outcome loop (admission's Workflow is fleetd's like any other)
  await w.handler.followWorkflows();
  const ended = (await readJournal(w.f.admin, d.id)).filter((e) => e.comments.includes(`provision Workflow ${wf} succeeded: fleetd-attest → wipe-disk → install-talos → fleetd-write-meta`));
  assert.equal(ended.length, 1, "the SUCCESS journalled once");
  assert.equal(ended[0]?.kind, "success");
  // ... and the machine was handed over to the installed OS: fleetd's Rufio Job (off, boot device disk, on)
  assert.match(ended[0]?.comments ?? "", new RegExp(`booting the installed OS: Rufio Job ${wf}-boot-disk \\(power off, boot device disk, power on\\)`));
  const booted = await w.bootedInstalledOs(wf);
  assert.deepEqual([booted.bootDevice, booted.power], ["Hdd", "On"], `the BMC boots the disk, powered on: ${JSON.stringify(booted)}`);
  assert.deepEqual(hostDisksFingerprint(), hostDisks, `the host's own disks (${Object.keys(hostDisks).join(", ")}) are untouched: only the lab's loop device was written`);
});

test("NetBox desired_action: provision, and a boot that no longer matches its event log: the real server refuses fleetd-attest, the Workflow stops before wipe-disk, the loop device's SHA-256 is unchanged", { timeout: 20 * 60_000 }, async () => {
  const real = lab();
  const before = await sha256File(real.disk.device);
  const fetches = real.osImage.gets();
  // from its next boot on, the machine's firmware extends PCR 7 with something its event log does not record
  real.unloggedMeasurement(true);
  const boots = real.boots.length;
  const t0 = Date.now();
  const wf = await w.ranToEnd("provision");
  const s = await workflow(w.env, wf);
  process.stdout.write(`# ${wf} ended ${s.status?.state} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  printOutputs();
  const actions = s.status?.tasks?.[0]?.actions ?? [];
  const result = actionResult();
  process.stdout.write(`# fleetd-attest result: ${JSON.stringify(result)}\n`);
  assert.equal(s.status?.state, "FAILED", JSON.stringify(s.status));
  assert.ok(real.boots.length > boots, "the netboot Job rebooted the machine (the unlogged measurement is in this boot)");
  assert.deepEqual(actions.map((a) => a.state), ["FAILED", "PENDING", "PENDING", "PENDING"], "nothing after fleetd-attest ran");
  assert.equal(result.verdict, "fail", "the attestation server refused");
  assert.equal(result.installCode, undefined);
  // the request deleted the finished provision Workflow (admission's) first: Tinkerbell serves one per agent
  const d = await device(w.f, NODE);
  const intent = (await w.handler.intents.all()).filter((i) => i.deviceId === d.id && i.effect?.effect === "workflow").at(-1);
  assert.ok(intent?.effect?.effect === "workflow" && intent.effect.deleted.some((x) => x.includes(`(SUCCESS, finished)`)), `the finished Workflow was deleted first: ${JSON.stringify(intent?.effect)}`);
  // the FAILED action and tink-server's record of its message, journalled once by the outcome loop
  await w.handler.followWorkflows();
  const journal = await readJournal(w.f.admin, d.id);
  const failed = journal.filter((j) => j.comments.includes(`provision Workflow ${wf} failed at action fleetd-attest`));
  assert.equal(failed.length, 1, JSON.stringify(journal.map((j) => j.comments)));
  assert.equal(failed[0]?.kind, "danger");
  // tink-agent reports a failed action as "action completed": the reason is the server's own journal of the refusal
  assert.ok(journal.some((j) => j.kind === "danger" && j.comments.includes("policy.pcr-replay")), `the server journalled its refusal with the failed check: ${JSON.stringify(journal.map((j) => j.comments))}`);
  assert.equal(await sha256File(real.disk.device), before, "the install disk is unchanged");
  assert.equal(real.osImage.gets(), fetches, "the OS image was not fetched again");
  // the admitted machine asked tink-server for work after each Workflow: its Hardware (agentID = the boot MAC) keeps
  // it from being enrolled again
  const intakes = [...new Map(real.agents.flatMap((a) => [...a.actionOutput()])).values()].filter((t) => t.includes('"mode":"intake"'));
  assert.equal(intakes.length, 1, "one intake in the machine's life (tink-server did not enroll the admitted machine again)");
  assert.deepEqual(((await list(w.env, "workflows")) as { metadata: { name: string } }[]).map((x) => x.metadata.name).filter((n) => n.startsWith("enrollment-")), []);
});

test("decommissioning with the real agent: the wipe Workflow attests (wipe mode), wipes the whole loop device and clears the TPM; Rufio powers the machine off; NetBox ends offline, each step journalled", { timeout: 20 * 60_000 }, async () => {
  const real = lab();
  real.unloggedMeasurement(false); // the wipe Workflow's netboot boots the machine cleanly again
  const { wipe, actions, journal } = await w.retire("test: retire").finally(() => printOutputs());
  assert.deepEqual(actions, ["fleetd-attest", "wipe-disk", "fleetd-clear-tpm"], "attest (wipe mode), the whole disk, the TPM owner hierarchy");
  const s = await workflow(w.env, wipe);
  assert.deepEqual(s.status?.tasks?.[0]?.actions?.map((a) => a.state), ["SUCCESS", "SUCCESS", "SUCCESS"]);
  const size = Number(readFileSync(`/sys/block/${real.disk.device.replace("/dev/", "")}/size`, "utf8").trim()) * 512;
  const zero = Buffer.alloc(1 << 20);
  for (const at of [0, size - (1 << 20)]) {
    const fd = openSync(real.disk.device, "r");
    try {
      const b = Buffer.alloc(1 << 20);
      readSync(fd, b, 0, b.length, at);
      assert.ok(b.equals(zero), `the install disk reads zero at ${at} (the lab OS image and META are gone)`);
    } finally {
      closeSync(fd);
    }
  }
  assert.equal(await w.bmc.powerState(), "Off");
  assert.ok(real.agents.at(-1)?.hasExited(), "powered off: the machine's agent stopped");
  for (const step of ["cordon", "evict", "netboot", "delete-node", "delete-cluster-records", "wipe", "power-off", "spire", "netbox-offline"]) {
    assert.ok(journal.some((j) => j.comments.includes(step)), `journal names step ${step}: ${JSON.stringify(journal.map((j) => j.comments))}`);
  }
});
