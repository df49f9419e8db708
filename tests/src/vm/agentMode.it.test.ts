/**
 * The lab HookOS in agent mode: a lab machine (QEMU/TCG, OVMF with the lab's Secure Boot keys, swtpm) netboots the
 * signed HookOS, whose /init starts podman's Docker API (`podman system service`, runc, overlay storage on a tmpfs)
 * and the REAL Tinkerbell agent (tink-agent of the pinned github.com/tinkerbell/tinkerbell, its `docker` runtime)
 * from the kit's runtime share (tests/scripts/vm/hookos-init.sh, FLEETD_AGENT=tink-agent). The agent, named by the
 * machine's boot MAC, asks the real tink-server (tink-controller on a real kube-apiserver; its gRPC exposed into
 * the boot network) for its Workflow, pulls each action's image from a real registry (Debian's docker-registry,
 * exposed into the boot network; the images `pnpm -s images` built, pinned by digest) and runs it privileged on the
 * machine's own virtio disk.
 *
 * The Workflow is fleetd's provision Template's disk actions, run by their images — wipe-disk (fleetd-lab-wipe:
 * wipefs, then zeroes), install-talos (fleetd-lab-image2disk: the lab OS image over HTTP, gzip) and
 * fleetd-write-meta (fleetd-tink-action under Node.js: the install code into META) — without fleetd-attest (it
 * needs the attestation world: tests/src/vm/hookos.it.test.ts runs it in direct mode): the install code attest
 * would leave in /worker is written there by the wipe step instead. Asserted from the host after the machine is
 * stopped: the Workflow's state (tink-server's), the disk holds the lab OS image, META key 0x0b holds the code
 * (Talos's own reader), the rest of the disk is zero, and the machine reached the registry, tink-server and the
 * image server only through the boot network's relays. Times, QEMU's CPU seconds and the guest's memory are
 * printed, never judged.
 */
import { strict as assert } from "node:assert";
import { randomBytes, randomUUID } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, truncateSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { stringify } from "yaml";
import { LAB_REGISTRY_PORT, LAB_SEGMENT, LAB_TINK_GRPC_PORT, startBootNetwork, type BootNetwork, type TcpGateway } from "./bootNetwork.js";
import { serveHookos } from "./hookos.js";
import { labKit, type LabKit } from "./kit.js";
import { startMachine, type Machine } from "./machine.js";
import { manufactureMachineTpm, type MachineTpm } from "./machineTpm.js";
import { create, hardwareBody, poll, startEnv, workflow, workflowBody, type Env } from "../tinkerbell/fixtures.js";
import { builtImage, builtLabImage, readBuiltImages, readBuiltLabImages } from "../images/built.js";
import { podman, pushImage, startRegistry, type LocalRegistry } from "../harness/podman.js";
import { labOsImage, serveFile, type LabOsImage, type ServedFile } from "../harness/loopDisk.js";
import { advread } from "../talos/goTools.js";
import { parseAgentLog } from "../harness/tinkAgent.js";
import { waitFor } from "../harness/process.js";

const BOOT_FILE = "hookos.efi";
/** Where machines reach the lab OS image server (plain HTTP, a TCP relay): 10.99.0.1:8080. */
const LAB_IMAGE_PORT = 8080;
/** A hang guard, not a judgement (TCG: pulls, decompression and Node.js all run on one emulated CPU). */
const WORKFLOW_TIMEOUT_MS = 15 * 60_000;
const NS = "fleetd-vm-agent";
const MAC = "52:54:00:fd:00:a1";
const MIB = 1 << 20;
const DISK_MIB = 64;

let kit: LabKit;
let env: Env;
let dir: string;
let registry: LocalRegistry;
let net: BootNetwork;
let relays: { registry: TcpGateway; grpc: TcpGateway; image: TcpGateway };
let osImage: LabOsImage;
/** The lab OS image (gzip) over HTTP on loopback, relayed to the machines. */
let imageServer: ServedFile;
/** The images as the machine pulls them: the lab registry's address in the boot network, pinned by digest. */
let refs: { action: string; wipe: string; image2disk: string };
let tpm: MachineTpm | undefined;
let machine: Machine | undefined;
const report: string[] = [];

before(
  async () => {
    kit = await labKit();
    dir = mkdtempSync(join(tmpdir(), "fleetd-vm-agent-"));
    env = await startEnv(NS);
    registry = await startRegistry(join(dir, "registry"));
    const p = podman({ insecureRegistries: [registry.host] });
    const built = readBuiltImages();
    const lab = readBuiltLabImages();
    // Pushed to the registry on loopback; the machine pulls the same manifests by digest through the relay.
    const pin = async (local: string, path: string) => `${LAB_SEGMENT}.1:${LAB_REGISTRY_PORT}/${path}@${await pushImage(p, local, `${registry.host}/${path}:lab`)}`;
    refs = {
      action: await pin(builtImage(built, "tink-action").ref, "fleetd/tink-action"),
      wipe: await pin(builtLabImage(lab, "wipe").ref, "fleetd/lab-wipe"),
      image2disk: await pin(builtLabImage(lab, "image2disk").ref, "fleetd/lab-image2disk"),
    };
    for (const [k, i] of [["tink-action", builtImage(built, "tink-action")], ["lab-wipe", builtLabImage(lab, "wipe")], ["lab-image2disk", builtLabImage(lab, "image2disk")]] as const) {
      report.push(`  image ${k}: ${(i.sizeBytes / MIB).toFixed(1)} MiB uncompressed`);
    }
    net = await startBootNetwork({ bootFile: BOOT_FILE });
    osImage = await labOsImage();
    imageServer = await serveFile(osImage.gz);
    relays = {
      registry: await net.exposeTcp(registry.host, LAB_REGISTRY_PORT),
      grpc: await net.exposeTcp(env.tb.grpcAddress, LAB_TINK_GRPC_PORT),
      image: await net.exposeTcp(new URL(imageServer.url).host, LAB_IMAGE_PORT),
    };
  },
  { timeout: 15 * 60_000 },
);
after(async () => {
  await machine?.stop().catch(() => undefined);
  machine?.remove();
  tpm?.remove();
  await net?.stop();
  await imageServer?.close();
  await registry?.stop();
  await env?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
  if (report.length) console.log(`the lab HookOS in agent mode (QEMU/TCG, 1 vCPU, 1 GiB; kernel ${kit?.kernelRelease}):\n${report.join("\n")}`);
});

/** A disk of DISK_MIB with random bytes in every MiB: what the Workflow leaves unwritten shows. */
function randomDisk(f: string): void {
  const fd = openSync(f, "w");
  try {
    for (let i = 0; i < DISK_MIB; i++) writeSync(fd, randomBytes(MIB), 0, MIB, i * MIB);
  } finally {
    closeSync(fd);
  }
  truncateSync(f, DISK_MIB * MIB);
}

function readAt(f: string, offset: number, length: number): Buffer {
  const fd = openSync(f, "r");
  try {
    const b = Buffer.alloc(length);
    readSync(fd, b, 0, length, offset);
    return b;
  } finally {
    closeSync(fd);
  }
}

/** The Workflow's Template: fleetd-provision's disk actions (templates.ts) by their lab images, `code` as attest's output. */
function provisionTemplate(name: string, code: string): object {
  const disk = "{{ index .Hardware.Disks 0 }}";
  return {
    version: "0.1",
    name,
    global_timeout: 1800,
    tasks: [{
      name: "provision",
      worker: "{{ .device_1 }}",
      volumes: ["/dev:/dev", "/worker:/worker"],
      actions: [
        {
          name: "wipe-disk",
          image: refs.wipe,
          timeout: 600,
          // fleetd's wipe-disk (templates.ts; this disk cannot discard), then the install code attest would leave
          command: ["/bin/sh", "-c", 'wipefs --all --force "$DEST_DISK" && dd if=/dev/zero of="$DEST_DISK" bs=1M count=64 conv=fsync && mkdir -p /worker/fleetd && printf %s "$CODE" >/worker/fleetd/install-code'],
          environment: { DEST_DISK: disk, CODE: code },
        },
        {
          // no `namespaces`: podman's default network (CNI bridge + NAT in the HookOS) reaches the image server
          name: "install-talos",
          image: refs.image2disk,
          timeout: 600,
          environment: { IMG_URL: `http://${LAB_SEGMENT}.1:${LAB_IMAGE_PORT}${new URL(imageServer.url).pathname}`, DEST_DISK: disk, COMPRESSED: "true" },
        },
        {
          name: "fleetd-write-meta",
          image: refs.action,
          timeout: 600,
          command: ["write-meta", "--disk", disk, "--code-file", "/worker/fleetd/install-code"],
        },
      ],
    }],
  };
}
const ACTIONS = ["wipe-disk", "install-talos", "fleetd-write-meta"];

test("in agent mode the real tink-agent in the HookOS runs Workflows from tink-server: images pulled from the lab registry and run by podman, the disk wiped, the lab OS installed and META written", { timeout: 2 * WORKFLOW_TIMEOUT_MS + 5 * 60_000 }, async () => {
  const hw = hardwareBody("lab-agent", MAC) as { spec: Record<string, unknown> };
  await create(env, "hardware", { ...hw, spec: { ...hw.spec, disks: [{ device: "/dev/vda" }] } });
  const codes = [randomBytes(32).toString("hex"), randomBytes(32).toString("hex")];
  const workflowOf = async (n: number) => {
    const tpl = `vm-agent-provision-${n}`;
    await create(env, "templates", { apiVersion: "tinkerbell.org/v1alpha1", kind: "Template", metadata: { name: tpl }, spec: { data: stringify(provisionTemplate(tpl, codes[n - 1] as string), { lineWidth: 0 }) } });
    await create(env, "workflows", workflowBody(`wf-vm-agent-${n}`, "lab-agent", tpl, MAC));
    return `wf-vm-agent-${n}`;
  };
  const first = await workflowOf(1);

  tpm = await manufactureMachineTpm({ caDir: join(dir, "tpm-ca") });
  const diskFile = join(dir, "disk.img");
  randomDisk(diskFile);
  serveHookos(net, MAC, { image: kit.image("hookos"), bootFile: BOOT_FILE, agent: { tinkServer: `${LAB_SEGMENT}.1:${LAB_TINK_GRPC_PORT}`, registry: `${LAB_SEGMENT}.1:${LAB_REGISTRY_PORT}` } });
  const port = await net.addPort();
  const m = await startMachine({ name: "lab-agent", kit, network: net, port, tpm, vars: "secureboot", mac: MAC, smbios: { serial: "LAB-VM-AGENT", uuid: randomUUID() }, disk: diskFile });
  machine = m;
  await m.waitForConsole(/\[fleetd-hookos\] agent mode: tink-agent start/, "the agent's start", 10 * 60_000);

  const endOf = (wf: string) =>
    poll(env, `${wf} to end`, async () => {
      if (m.qemu.hasExited()) throw new Error(`the machine powered off before ${wf} ended; console:\n${m.console().slice(-4000)}`);
      const st = (await workflow(env, wf)).status;
      return st?.state === "SUCCESS" || st?.state === "FAILED" || st?.state === "TIMEOUT" ? st : undefined;
    }, WORKFLOW_TIMEOUT_MS);
  // The agent's last report of a Workflow reaches the console a moment after tink-server has it.
  const lastReport = (n: number) =>
    waitFor("the agent's last report on the console", async () => m.lines().filter((l) => /"msg":"reported action status".*"name":"fleetd-write-meta".*"state":"(success|failure|timeout)"/.test(l.text)).length >= n, { timeoutMs: 60_000 }).catch(() => undefined);
  const end1 = await endOf(first);
  await lastReport(1);
  const firstRun = { cpu: m.cpuSeconds(), elapsed: m.elapsedMs() };
  // The same Workflow again in the same boot: the images are in the HookOS's storage now (the agent's pull only
  // checks the manifest), so the difference is the pulls' cost.
  const end2 = end1.state === "SUCCESS" ? await endOf(await workflowOf(2)) : undefined;
  if (end2) await lastReport(2);
  const cpu = m.cpuSeconds();
  const elapsed = m.elapsedMs();
  await m.stop();

  // What the agent logged (its JSON lines, copied to the console by the HookOS), in order.
  const agentLines = m.lines().flatMap((l) => (l.text.startsWith("[tink-agent] ") ? parseAgentLog(l.text.slice("[tink-agent] ".length)).map((j) => ({ atMs: l.atMs, j })) : []));
  const marker = (t: string) => m.markers().find((k) => k.text.startsWith(t));
  const sec = (ms: number | undefined) => (ms === undefined ? "-" : `${(ms / 1000).toFixed(1)}s`);
  const actionName = (j: Record<string, unknown>) => (j["action"] as { name?: string } | undefined)?.name;
  const podmanUp = marker("agent mode: podman system service listening");
  report.push(`  boot: /init ${sec(marker("init:")?.atMs)} (uptime ${marker("init:")?.uptimeSeconds ?? "-"}s), podman service listening ${sec(podmanUp?.atMs)} (uptime ${podmanUp?.uptimeSeconds ?? "-"}s), tink-agent start ${sec(marker("agent mode: tink-agent start")?.atMs)}`);
  let from = 0;
  for (const [run, what] of [[1, "images pulled"], [2, "images in storage"]] as const) {
    for (const a of ACTIONS) {
      const at = (pred: (j: (typeof agentLines)[number]["j"]) => boolean) => {
        const k = agentLines.findIndex((l, idx) => idx >= from && pred(l.j));
        return k < 0 ? undefined : { k, l: agentLines[k] as (typeof agentLines)[number] };
      };
      const got = at((j) => j.msg === "received action" && actionName(j) === a);
      if (!got) continue;
      from = got.k;
      // the agent names a container tinkerbell_<action name>_<action ID> (conv.ParseName) and logs its output
      const out = at((j) => j.container_name?.startsWith(`tinkerbell_${a}_`) === true && j.error === undefined);
      const done = at((j) => j.msg === "reported action status" && actionName(j) === a && !/running/i.test(String(j["state"])));
      report.push(`  run ${run} (${what}) ${a.padEnd(18)} received ${sec(got.l.atMs)}  → first output +${sec(out ? out.l.atMs - got.l.atMs : undefined)}  → reported ${String(done?.l.j["state"] ?? "-")} +${sec(done ? done.l.atMs - got.l.atMs : undefined)}`);
      if (done) from = done.k;
    }
  }
  const mem = m.markers().filter((k) => k.text.startsWith("memory:")).map((k) => k.text);
  const nums = (re: RegExp) => mem.map((t) => Number(re.exec(t)?.[1] ?? NaN)).filter((n) => !Number.isNaN(n));
  report.push(`  memory: MemAvailable min ${Math.min(...nums(/MemAvailable: (\d+) MiB/))} MiB, Shmem (the tmpfs: images) max ${Math.max(...nums(/Shmem: (\d+) MiB/))} MiB over ${mem.length} samples`);
  report.push(`  ${first} ${end1.state} ${sec(firstRun.elapsed)} after QEMU started (QEMU CPU ${firstRun.cpu.toFixed(1)}s); wf-vm-agent-2 ${end2?.state ?? "-"} ${sec(elapsed)} (QEMU CPU ${cpu.toFixed(1)}s); relays: registry ${relays.registry.connections()}, tink-server ${relays.grpc.connections()}, image ${relays.image.connections()} connections`);

  for (const end of [end1, end2]) {
    const actions = end?.tasks?.[0]?.actions ?? [];
    assert.equal(end?.state, "SUCCESS", `the Workflow's actions: ${JSON.stringify(actions.map((a) => [a.name, a.state, a.message]))}\nconsole:\n${m.console().slice(-6000)}`);
    assert.deepEqual(actions.map((a) => [a.name, a.state]), ACTIONS.map((a) => [a, "SUCCESS"]));
    assert.equal(end?.agentID, MAC, "tink-server's Workflow names the machine's MAC as its agent");
  }

  // The real agent ran them: its start line (version, Docker runtime).
  const started = agentLines.find((l) => l.j.msg === "starting Agent");
  assert.ok(started, "tink-agent logged its start on the console");
  assert.match(started.j.version ?? "", /^v\d+\.\d+\.\d+/);
  assert.ok(agentLines.some((l) => l.j.msg === "using Docker runtime"), "the agent's docker runtime");
  assert.ok(relays.registry.connections() > 0, "the images came through the registry relay");
  assert.ok(relays.grpc.connections() > 0, "the agent reached tink-server through its relay");
  assert.equal(imageServer.gets(), 2, "image2disk fetched the lab OS image once per Workflow");

  // The disk: the lab OS image, META 0x0b = the second Workflow's code (Talos's reader), zeros after the image.
  const raw = readFileSync(osImage.raw);
  const meta = osImage.layout.partitions.find((p) => p.name === "META");
  assert.ok(meta, "the lab OS layout has META");
  const [metaFrom, metaTo] = [meta.firstSector * osImage.layout.sectorSize, (meta.lastSector + 1) * osImage.layout.sectorSize];
  const written = readAt(diskFile, 0, raw.length);
  assert.ok(written.subarray(0, metaFrom).equals(raw.subarray(0, metaFrom)), "the disk holds the lab OS image before META");
  assert.ok(written.subarray(metaTo).equals(raw.subarray(metaTo)), "the disk holds the lab OS image after META");
  assert.ok(readAt(diskFile, raw.length, DISK_MIB * MIB - raw.length).every((b) => b === 0), "the rest of the disk was zeroed by wipe-disk");
  assert.equal(advread(diskFile).tags["0x0b"]?.text, codes[1], "META 0x0b holds the install code (Talos's reader, on the host)");
});
