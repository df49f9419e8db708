/**
 * fleetd's Tinkerbell side with every platform real, for the end-to-end test and the lab: NetBox 4.7 (its RQ
 * worker delivers the webhooks) → netbox-script → the management cluster (kube-apiserver 1.36 with Tinkerbell
 * v0.25.0's CRDs) where the real tink-controller renders fleetd's Templates, Rufio drives a Redfish BMC
 * (sushy-tools over HTTPS) for the netboot Job the controller creates, and the real tink-server serves the
 * actions over gRPC to an agent. The same cluster stands in as the workload cluster (no Node of the machine exists).
 *
 * The agent is the real tink-agent (tests/src/harness/tinkAgent.ts) on podman's Docker API, pulling fleetd-tink-action
 * and the lab's wipe and image2disk images (tests/images/README.md) from a loopback registry, the Templates
 * pinned to the digests that registry holds. The install disk is a loop device over a scratch image, the OS
 * image is the lab OS image (lab-os.raw.gz) served on loopback, the machine's TPM is a swtpm on a Unix socket
 * (tpm: unix-socket), /worker a per-world directory. The Workflows' actions run for real.
 * fleetd-attest attests against the real attestation server (talos-config-server's app, attachAttestationServer)
 * with the swtpm, whose EKs the nodes file approves on rack-1; the machine's claims and HookOS event log are a
 * sysfs directory (labMachine), its boot interface one end of a veth whose other end is rack-1's switch port
 * speaking LLDP (tests/src/harness/lldp.ts). tink-server enrolls the machine (auto-enrollment, fleetd's intake
 * rule set) once `real.startAgent()` powers it on; the intake's confirm runs talos-config-server's admission
 * (TinkerbellAdmission), which creates the Hardware and the provision Workflow. Nothing is recorded for it.
 *
 * Rufio v0.25.0 sometimes fails a BMC Job by itself (its Job controller re-creates a Task it has just created:
 * "already exists"); tink-controller then fails the Workflow (BootJobFailed). `ranToEnd` asks again, as an
 * operator would (at most 3 times); `endOf` waits for fleetd to start the Workflow again; both say so in `notes`.
 */
import { pollValue } from "../harness/ports.js";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { runProcess } from "../harness/process.js";
import { strict as assert } from "node:assert";
import { createWriteStream, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { randomBytes } from "node:crypto";
import { podman, pushImage, startPodmanService, startRegistry, type LocalRegistry, type PodmanService } from "../harness/podman.js";
import { startTinkAgent, type TinkAgent } from "../harness/tinkAgent.js";
import { attachLoop, labOsImage, serveFile, sha256File, type LoopDisk, type ServedFile } from "../harness/loopDisk.js";
import { startSwtpm, type SwtpmUnix } from "../harness/swtpm.js";
import { startLldpSwitchPort, type LldpSwitchPort } from "../harness/lldp.js";
import { builtImage, builtLabImage, readBuiltImages, readBuiltLabImages } from "../images/built.js";
import { createServer, type Server } from "node:http";
import { ekBindingFromCertificate, readCertificate } from "@fleetd/verify/ek";
import { bootScenario, makeLabKeys, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";
import { bundleInMemoryIssuer } from "@fleetd/testkit/memoryAdapters";
import { writeFakeRoot } from "@fleetd/tink-action/testing/fakeRoot";
import { pcrExtend, TpmClient, UnixTransport } from "@fleetd/platform/tpmclient";
import { kubeFromConfig } from "@fleetd/platform/kube";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { attestationServer } from "../attestation/world.js";
import { CountingStore } from "../attestation/testServer.js";
import { createSoftHsmCa, startSoftHsm } from "../harness/softhsm.js";
import { TALOS_VERSION } from "../talos/goTools.js";
import { pino } from "pino";
import { startHandler, toHandlerConfig, type Handler } from "@fleetd/netbox-script";
import { NetBoxInventory, patchDevice, readJournal, type JournalRecord } from "@fleetd/platform/netbox";
import { startRedfishEmulator, type RedfishEmulator } from "../harness/redfish.js";
import { fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { Decisions, device, handlerNodesText, requestAction } from "../netbox/handlerFixture.js";
import { TinkerbellAdmission, TinkerbellWorkflowGate, WorkflowObject, bootFailure, tinkerbellEffectsFromConfig } from "@fleetd/platform/tinkerbell";
import { netboxPlatformFieldCheck } from "@fleetd/platform/netbox";
import type { SiteConfig } from "@fleetd/platform/fleet";
import { BmcJob, condition, create, get, kubernetesSection, list, poll, RUFIO_TASK_RACE, startEnv, workflow, type Env } from "./fixtures.js";

export const NS = "tinkerbell";
export const NODE = "rack-1";
/** What the real agent's lab machine claims (its sysfs): rack-1's serial. */
const MACHINE = { serial: "RACK-0001", uuid: "4c4c4544-0058-4b10-8032-b7c04f4d3351" };

const nodeText = (installDisk: string, ek: string) => `
  ${NODE}:
    serial: RACK-0001
    model: nuc13
    class: talos
    role: worker
    switch: { device: tor-a1, port: ethernet1/1/5 }
    address: { cidr: 10.20.0.51/24, gateway: 10.20.0.1 }
    installDisk: ${installDisk}
    bmc: { type: redfish, address: 127.0.0.1, credentials: "secret:${NS}/fleetd-bmc-${NODE}" }
    tpm: "2.0"
    ek:
${ek}
`;

/** The machine of the platform world: its real agent, disk, TPM, and the attestation server it attests to. */
export interface RealAgentLab {
  /** The machine's tink-agent in its current boot, once `startAgent` ran (it then asks tink-server for work). */
  agent: TinkAgent;
  /** Every boot's agent, the current one last. */
  agents: TinkAgent[];
  /**
   * Boot the machine into HookOS: its tink-agent starts and asks tink-server for work. With no Hardware naming it,
   * tink-server's auto-enrollment creates its intake Workflow from fleetd's rule set. From then on the machine
   * follows its BMC: powered off (the Redfish emulator's state, as Rufio's Jobs set it), its agent stops; powered
   * on again, it boots HookOS again with a new agent (a netboot Job's power cycle): the swtpm is reset (TPM_Init,
   * TPM2_Startup(CLEAR)) and the boot measured again; its persistent keys stay.
   */
  startAgent(): Promise<TinkAgent>;
  /** The machine's boots (power cycles its BMC made), each as "off→on at <ISO time>". */
  boots: string[];
  /**
   * From the machine's next boot on (a power cycle by its BMC), its firmware also extends PCR 7 with something its
   * event log does not record (on) — or boots cleanly again (off).
   */
  unloggedMeasurement(on: boolean): void;
  /** The machine's install disk: a loop device over a scratch image (the Hardware's disk 0). */
  disk: LoopDisk;
  /** SHA-256 of the whole install disk as the world made it (before any Workflow). */
  diskSha256: string;
  /** The images the Templates pin (registry 127.0.0.1:<port>/…@sha256). */
  images: { action: string; wipe: string; image2disk: string };
  /** The lab OS image served for install-talos. */
  osImage: ServedFile;
  tpm: SwtpmUnix;
  workerDir: string;
  /** The machine's sysfs/procfs (labMachine.root): serial, UUID, its NIC with the BMC's MAC, its HookOS event log. */
  machineRoot: string;
  /** rack-1's switch port (tor-a1 ethernet1/1/5) speaking LLDP on a veth (labMachine.bootInterface); none with lldp: false. */
  switchPort: LldpSwitchPort | undefined;
  /** The swtpm's EK bindings (rsa, ecc), approved on the node in the nodes file. */
  ekBindings: { rsa: string; ecc: string };
  /** The attestation server (talos-config-server's app over the world's NetBox, SoftHSM CA, SQLite) on loopback. */
  serverUrl: string;
  /** Where the attest action leaves result.json and the install code (workerDir/fleetd). */
  actionOut: string;
  /** The server's listening socket (its app is attached once NetBox holds the nodes) and the site authorities. */
  http: Server;
  siteDir: string;
  /** Timings of the lab's set-up steps (ms). */
  timings: Record<string, number>;
}

export interface PlatformWorld {
  f: Fleet;
  env: Env;
  bmc: RedfishEmulator;
  /** The machine: its agent, disk, TPM, images and the attestation server. */
  real: RealAgentLab;
  handler: Handler;
  decisions: Decisions;
  /** What happened that a reader should know (Rufio's own failures, retries). */
  notes: string[];
  /** Set desired_action in NetBox and wait for the handler's dispatch; returns the Workflow it created. */
  ask(action: string): Promise<string>;
  /**
   * Set the device `decommissioning` (as alice) and play the retirement through: the wipe Workflow served and run,
   * the BMC powered off, NetBox offline with the last step journalled. Returns the wipe Workflow, its actions and
   * the device's journal.
   */
  retire(reason: string): Promise<{ wipe: string; actions: string[]; journal: JournalRecord[] }>;
  /**
   * Real agent: ask for `action` and wait for its Workflow to end (SUCCESS or FAILED after an action ran), asking
   * again (at most 3 times) when Tinkerbell fails the boot Job by itself. Returns the Workflow's name.
   */
  ranToEnd(action: string, timeoutMs?: number): Promise<string>;
  /**
   * Real agent: wait for `wf` (one fleetd started itself, e.g. admission's) to end SUCCESS, FAILED or TIMEOUT; a boot
   * Job Tinkerbell failed by itself is left to fleetd, which starts the Workflow again (bootRetries). Returns the state.
   */
  endOf(wf: string, timeoutMs?: number): Promise<string>;
  /**
   * Wait for the admission an intake confirm runs: its journal line on the node, and the names of the node's
   * provision Workflows (fleetd's, label fleetd.io/node) once it is there.
   */
  admitted(timeoutMs?: number): Promise<{ line: JournalRecord; provisions: string[] }>;
  /**
   * After the outcome loop journalled provision Workflow `wf`'s success: wait for the Rufio Job fleetd created to
   * boot the installed OS (`<wf>-boot-disk`: off, boot device disk, on) to complete (once more if Rufio fails it by
   * its own Task race); returns the Job's name and the BMC's boot device and power state after it.
   */
  bootedInstalledOs(wf: string, timeoutMs?: number): Promise<{ job: string; bootDevice: string | undefined; power: string }>;
  stop(): Promise<void>;
}

/** The scratch install disk: 1 MiB of random bytes at the start and at the end (GPT backup) over a sparse file. */
async function scratchDisk(path: string, size: number): Promise<void> {
  const mib = 1 << 20;
  await new Promise<void>((res, rej) => {
    const out = createWriteStream(path);
    out.on("error", rej);
    out.write(randomBytes(mib));
    out.end(() => res());
  });
  await new Promise<void>((res, rej) => {
    const out = createWriteStream(path, { flags: "r+", start: size - mib });
    out.on("error", rej);
    out.write(randomBytes(mib));
    out.end(() => res());
  });
}

async function startRealAgentLab(dir: string, bmc: RedfishEmulator, grpcServer: string, stops: (() => Promise<void> | void)[], lldp: boolean): Promise<RealAgentLab> {
  const agentId = bmc.mac.toLowerCase();
  const timings: Record<string, number> = {};
  const timed = async <T>(what: string, f: () => Promise<T>): Promise<T> => {
    const t0 = Date.now();
    try {
      return await f();
    } finally {
      timings[what] = Date.now() - t0;
    }
  };
  const built = readBuiltImages();
  const lab = readBuiltLabImages();
  const registry: LocalRegistry = await timed("registry", () => startRegistry(join(dir, "registry")));
  stops.push(() => registry.stop());
  const p = podman({ insecureRegistries: [registry.host] });
  const pin = async (local: string, path: string): Promise<string> => `${registry.host}/${path}@${await pushImage(p, local, `${registry.host}/${path}:lab`)}`;
  const images = await timed("push", async () => ({
    action: await pin(builtImage(built, "tink-action").ref, "fleetd/tink-action"),
    wipe: await pin(builtLabImage(lab, "wipe").ref, "fleetd/lab-wipe"),
    image2disk: await pin(builtLabImage(lab, "image2disk").ref, "fleetd/lab-image2disk"),
  }));
  const service: PodmanService = await timed("podman service", () => startPodmanService(p, join(dir, "podman")));
  stops.push(() => service.stop());

  const os = await labOsImage();
  const diskFile = join(dir, "install-disk.img");
  const size = Math.max(128 << 20, Math.ceil(os.layout.size / (1 << 20)) * (1 << 20) + (16 << 20));
  await scratchDisk(diskFile, size);
  const disk = attachLoop(diskFile);
  stops.push(() => disk.detach());
  const diskSha256 = await timed("disk sha256", () => sha256File(disk.device));
  const osImage = await serveFile(os.gz);
  stops.push(() => osImage.close());
  const tpm = await timed("swtpm", () => startSwtpm({ unixSocket: true }));
  stops.push(() => tpm.stop());
  const workerDir = join(dir, "worker");
  mkdirSync(workerDir, { recursive: true });

  // The machine booted HookOS: its PCRs carry the boot (extended through the swtpm's socket), its event log is in
  // its sysfs; the site's Secure Boot authorities are the keys that boot was signed with.
  const keys = await makeLabKeys();
  const siteDir = writeSiteAuthorities(join(dir, "site"), keys);
  const boot = bootScenario("hookos", keys, {});
  // What the firmware measures at each boot: the scenario's events, plus (unloggedMeasurement) a PCR 7 extend its
  // event log does not record — something booted that the log hides.
  let unlogged = false;
  const measureBoot = async (): Promise<void> => {
    const tc = new TpmClient(new UnixTransport(tpm.socketPath));
    try {
      for (const e of boot.extends()) await pcrExtend(tc, e.pcr, [...e.digests].map(([hashAlg, digest]) => ({ hashAlg, digest })));
      if (unlogged) await pcrExtend(tc, 7, [{ hashAlg: TPM_ALG.SHA256, digest: new Uint8Array(randomBytes(32)) }, { hashAlg: TPM_ALG.SHA1, digest: new Uint8Array(randomBytes(20)) }]);
    } finally {
      await tc.close();
    }
  };
  await measureBoot();
  /**
   * A reboot as the TPM sees it: TPM2_Shutdown(CLEAR) (orderly: a TPM reset without it counts as a dictionary-attack
   * failure, and the swtpm locked its EK out after the third), TPM_Init (the platform reset), TPM2_Startup(CLEAR), then
   * the boot measured again.
   */
  const resetTpm = async (): Promise<void> => {
    await tpm.tpm2("shutdown", ["-c"]);
    const init = await runProcess("swtpm_ioctl", ["--unix", tpm.ctrlSocketPath, "-i"], { timeoutMs: 30_000 });
    if (init.code !== 0) throw new Error(`swtpm_ioctl -i: ${init.stderr.toString()}`);
    await tpm.tpm2("startup", ["-c"]);
    await measureBoot();
  };
  const bindingOf = async (index: number) => {
    const out = join(dir, `ek-${index.toString(16)}.crt`);
    await tpm.tpm2("nvread", [`0x${index.toString(16)}`, "-C", "o", "-o", out]);
    return ekBindingFromCertificate(readCertificate(new Uint8Array(readFileSync(out))).cert);
  };
  const ekBindings = { rsa: await bindingOf(tpm.ek.rsa.certIndex), ecc: await bindingOf(tpm.ek.ecc.certIndex) };
  const switchPort = lldp ? await timed("lldp switch port", () => startLldpSwitchPort({ device: "tor-a1", port: "ethernet1/1/5" })) : undefined;
  if (switchPort) stops.push(() => switchPort.stop());

  // its boot NIC, named as the host end of the veth its LLDP arrives on (the claim's bootMac is then this MAC)
  const nic = switchPort?.iface ?? "eno1";
  const machineRoot = writeFakeRoot(join(dir, "machine-root"), {
    serial: MACHINE.serial,
    uuid: MACHINE.uuid.toUpperCase(),
    nics: [{ name: nic, mac: agentId }],
    defaultRoute: nic,
    eventLog: boot.bytes(),
  });

  // The attestation server's socket listens from here (its URL goes into the Templates); its app is attached once
  // NetBox holds the nodes (attachAttestationServer).
  const http = createServer();
  await new Promise<void>((res) => http.listen(0, "127.0.0.1", res));
  stops.push(() => new Promise<void>((res) => {
    http.closeAllConnections();
    http.close(() => res());
  }));
  const serverUrl = `http://127.0.0.1:${(http.address() as { port: number }).port}`;

  const agents: TinkAgent[] = [];
  const boots: string[] = [];
  let running: TinkAgent | undefined;
  const bootHookOs = async (): Promise<TinkAgent> => {
    const a = await timed(`tink-agent start ${agents.length + 1}`, () => startTinkAgent({ id: agentId, grpcServer, runtime: { kind: "docker", socket: service.socketPath } }));
    agents.push(a);
    running = a;
    return a;
  };
  // The machine follows its BMC's power state (polled; Rufio's Jobs wait for each power task, so an off lasts
  // seconds): off stops its agent, on again boots HookOS again.
  let watching = false;
  let watcher: Promise<void> | undefined;
  const watch = async (): Promise<void> => {
    let wasOn = true;
    while (watching) {
      const on = await bmc.powerState().then((p) => p !== "Off", () => wasOn);
      if (!on && running) {
        await running.stop();
        running = undefined;
      } else if (on && !wasOn && !running) {
        boots.push(`off→on at ${new Date().toISOString()}${unlogged ? " (an unlogged PCR 7 measurement)" : ""}`);
        await resetTpm();
        await bootHookOs();
      }
      wasOn = on;
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  stops.push(async () => {
    watching = false;
    await watcher;
    for (const a of agents) await a.stop();
  });
  const startAgent = async (): Promise<TinkAgent> => {
    if (agents.length > 0) return agents[agents.length - 1]!;
    const a = await bootHookOs();
    watching = true;
    watcher = watch();
    return a;
  };
  return {
    get agent(): TinkAgent {
      const a = agents[agents.length - 1];
      if (!a) throw new Error("the machine's tink-agent has not started (startAgent)");
      return a;
    },
    agents,
    boots,
    startAgent,
    unloggedMeasurement: (on: boolean) => {
      unlogged = on;
    },
    disk, diskSha256, images, osImage, tpm, workerDir, machineRoot, switchPort, ekBindings, serverUrl, actionOut: join(workerDir, "fleetd"), http, siteDir, timings };
}

/**
 * talos-config-server's app (tests/src/attestation/world.ts `attestationServer`: the attestation service with the
 * test settings, SQLite state, the outbox to NetBox) over this world's NetBox, a CA key on a SoftHSM token, the swtpm's
 * manufacturer CA as the EK roots and the real Workflow gate over the management cluster's tinkerbell namespace.
 * Admission is talos-config-server's: TinkerbellAdmission over the Tinkerbell effects the site configuration makes
 * (server.ts), so an intake confirm creates the node's Hardware and provision Workflow.
 */
async function attachAttestationServer(real: RealAgentLab, f: Fleet, env: Env, site: SiteConfig, inventory: NetBoxInventory, dir: string, stops: (() => Promise<void> | void)[]): Promise<void> {
  const hsm = await startSoftHsm([{ label: "fleetd-ca", pin: "123456", soPin: "12345678", keys: [{ label: "ca", id: "01", type: "ec-p256" }] }]);
  stops.push(() => hsm.close());
  const now = () => new Date();
  const { signer, ca } = await createSoftHsmCa(hsm, { token: "fleetd-ca", key: "ca", commonName: "fleetd lab CA", notBefore: new Date(Date.now() - 3600_000), lifetimeDays: 365 });
  stops.push(() => signer.close());
  const store = new CountingStore(join(dir, "attestation-state.db"));
  stops.push(() => store.close());
  const bootstrapTokens = new Map<string, string>();
  const log = pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" });
  const fx = tinkerbellEffectsFromConfig(site, { kube: kubeFromConfig(env.kc) });
  assert.ok(fx.effects, `the site configuration makes Tinkerbell effects: ${fx.reason ?? ""}`);
  const { app, outbox } = attestationServer({
    store,
    inventory,
    netbox: f.client(f.handler.token),
    issuer: bundleInMemoryIssuer({ signer, caPem: ca.pem, now }),
    bootstrapTokens: { create: async (node, token) => void bootstrapTokens.set(token.id, node), delete: async (id) => bootstrapTokens.delete(id) },
    siteAuthoritiesDir: real.siteDir,
    ekCaDir: real.tpm.caDir,
    talosVersion: TALOS_VERSION,
    log,
    metrics: createMetrics(),
    now,
    workflows: new TinkerbellWorkflowGate(fx.effects.objects),
    admission: new TinkerbellAdmission(fx.effects, inventory, netboxPlatformFieldCheck(f.client(f.handler.token), f.apply.username), log),
  });
  stops.push(() => outbox.stop());
  real.http.on("request", app);
}

/**
 * `lldp` (default true): rack-1's switch
 * port speaks LLDP to the machine's boot interface; false: no switch port (the server refuses provision at its
 * switch-port gate).
 */
export async function startPlatformWorld(opts: { lldp?: boolean } = {}): Promise<PlatformWorld> {
  const [f, env, bmc] = await Promise.all([startFleet(), startEnv(NS, { autoEnrollment: true }), startRedfishEmulator({ powerState: "On" })]);
  const notes: string[] = [];
  const decisions = new Decisions();
  let handler: Handler | undefined;
  const dir = mkdtempSync(join(tmpdir(), "fleetd-platform-"));
  const labStops: (() => Promise<void> | void)[] = [];
  let real: RealAgentLab | undefined;
  const stop = async () => {
    await handler?.stop();
    for (const s of labStops.reverse()) {
      try {
        await s();
      } catch (e) {
        notes.push(`stopping the lab: ${(e as Error).message}`);
      }
    }
    await Promise.all([f.nb.stop(), env.stop(), bmc.stop()]);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    real = await startRealAgentLab(dir, bmc, env.tb.grpcAddress, labStops, opts.lldp ?? true);
    await env.core.createNamespace({ body: { metadata: { name: "fleetd" } } });
    const adminCfg = f.configFile(f.nb.authorization.replace(/^Bearer /, ""));
    assert.equal(fleetd(["netbox", "setup", "--config", adminCfg]).code, 0);
    const nodesFile = join(f.dir, "platform-nodes.yaml");
    // rack-1 approves the lab machine's real EKs (its swtpm's certificates) when the real agent runs it
    writeFileSync(nodesFile, handlerNodesText() + nodeText(real.disk.device, [`      - { alg: rsa, sha256: ${real.ekBindings.rsa} }`, `      - { alg: ecc, sha256: ${real.ekBindings.ecc} }`].join("\n")));
    const apply = fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]);
    assert.equal(apply.code, 0, apply.stderr);
    const inv = new NetBoxInventory(f.client(f.handler.token), { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });

    // The node's own BMC Secret, kept by the operator (fleetd only references it; credentials.ts).
    await env.core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: `fleetd-bmc-${NODE}` }, stringData: { username: bmc.username, password: bmc.password } } });
    const caFile = join(f.dir, "platform-server-ca.pem");
    writeFileSync(caFile, env.cp.caPem);
    const site = f.config(f.handler.token, {
      handler: { listen: { host: "127.0.0.1", port: f.handlerPort }, stateDir: join(f.dir, "platform-state"), nodesFile, reconcileIntervalSeconds: 3600 },
      // the same cluster stands in as the workload cluster (no Node of the machine exists there)
      kubernetes: kubernetesSection(env.cp.kubeconfig, NS, caFile, {
        bmc: { redfish: { port: bmc.port, useBasicAuth: true } },
        clearTpmOnRetire: true,
        ...(real
          ? {
              server: { url: real.serverUrl, lab: true },
              images: real.images,
              talosImageUrl: real.osImage.url,
              workerDir: real.workerDir,
              tpm: { kind: "unix-socket", hostDir: dirname(real.tpm.socketPath), socket: basename(real.tpm.socketPath) },
              labMachine: real.switchPort ? { root: real.machineRoot, bootInterface: real.switchPort.iface, lldp: "lldpd" } : { root: real.machineRoot, lldp: "off" },
              // the action gives up on a pending machine after max(30, attest - 300) s
              timeouts: { attest: 120 },
              // an agent no Hardware names is enrolled into fleetd's intake Template (tink-server's auto-enrollment)
              intake: { enabled: true },
            }
          : {}),
      }),
    } as never);
    await attachAttestationServer(real, f, env, site, inv, dir, labStops);
    handler = await startHandler(toHandlerConfig(site), { logger: pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" }), onDecision: (e) => decisions.push(e) });
  } catch (e) {
    await stop();
    throw e;
  }
  const h = handler;
  const lab = real;
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

  const retire = async (reason: string): Promise<{ wipe: string; actions: string[]; journal: JournalRecord[] }> => {
    const d = await device(f, NODE);
    await patchDevice(f.client(f.alice.token), d.id, { status: "decommissioning" }, null, reason);
    const wipe = await poll(env, "the wipe Workflow", async () => {
      const items = ((await env.custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", labelSelector: `fleetd.io/node=${NODE}` })) as { items: { metadata: { name: string }; spec: { templateRef: string } }[] }).items;
      return items.find((i) => /wipe/.test(i.spec.templateRef))?.metadata.name;
    }, 120_000);
    // The agent runs it after the netboot Job's power cycle: attest in wipe mode, the whole disk, the TPM. If
    // Tinkerbell fails the boot Job by itself, the retirement platform starts the same Workflow again (endOf waits).
    const end = await endOf(wipe);
    const st = (await workflow(env, wipe)).status;
    assert.equal(end, "SUCCESS", JSON.stringify(st?.tasks?.[0]?.actions?.map((a) => [a.name, a.state, a.message])));
    const actions = (st?.tasks?.[0]?.actions ?? []).map((a) => a.name);
    await poll(env, "the BMC to be powered off", async () => ((await bmc.powerState()) === "Off" ? true : undefined), 180_000);
    await poll(env, "NetBox offline", async () => ((await device(f, NODE)).status === "offline" ? true : undefined), 120_000);
    // The status changes before the step's own journal line is written: wait for that line, not only the status.
    const journal = await poll(env, "the netbox-offline step journalled", async () => {
      const j = await readJournal(f.admin, d.id);
      return j.some((e) => e.comments.includes("retirement step netbox-offline")) ? j : undefined;
    }, 30_000);
    return { wipe, actions, journal };
  };

  const ranToEnd = async (action: string, timeoutMs = 600_000): Promise<string> => {
    for (let attempt = 1; ; attempt++) {
      const wf = await ask(action);
      const end = await poll(env, `${wf} to end`, async () => {
        const live = WorkflowObject.safeParse(await get(env, "workflows", wf).catch(() => undefined));
        if (!live.success) return undefined;
        const boot = bootFailure(live.data);
        if (boot !== undefined) return { boot };
        const st = (await workflow(env, wf)).status?.state;
        return st === "SUCCESS" || st === "FAILED" || st === "TIMEOUT" ? { state: st } : undefined;
      }, timeoutMs);
      if (!("boot" in end)) return wf;
      notes.push(`${wf} failed at its boot Job by itself: ${end.boot}`);
      assert.ok(attempt < 3, "Rufio failed the netboot Job three times");
      notes.push(`asked for ${action} again (attempt ${attempt + 1})`);
    }
  };

  const endOf = async (wf: string, timeoutMs = 600_000): Promise<string> => {
    const seen = new Set<string>();
    const lab = real;
    let lastStatus = "";
    let lastPass = 0;
    // netbox-script's reconcile pass (hourly in this world) is what starts a Workflow again after Tinkerbell failed its
    // boot Job: run it, at most every 3 s, while the Workflow is in that state
    const reconcile = async (): Promise<void> => {
      if (Date.now() - lastPass < 3000) return;
      lastPass = Date.now();
      await h.followWorkflows();
    };
    return pollValue(`${wf} to end`, async () => {
      const live = WorkflowObject.safeParse(await get(env, "workflows", wf).catch(() => undefined));
      if (!live.success) return undefined;
      const boot = bootFailure(live.data);
      if (boot !== undefined) {
        if (!seen.has(boot) && seen.add(boot)) notes.push(`${wf} failed at its boot Job by itself (fleetd starts it again): ${boot}`);
        await reconcile();
        return undefined;
      }
      const status = (await workflow(env, wf)).status;
      lastStatus = JSON.stringify(status);
      const st = status?.state;
      // FAILED before any action ran is a boot Job failure whose condition tink-controller has not written yet
      const noneRan = (status?.tasks?.[0]?.actions ?? []).every((a) => a.state === "PENDING");
      if (st === "FAILED" && noneRan) {
        await reconcile();
        return undefined;
      }
      return st === "SUCCESS" || st === "FAILED" || st === "TIMEOUT" ? st : undefined;
    }, {
      timeoutMs,
      context: () => `workflow: ${lastStatus}\n--- tink-agent\n${lab.agent.log().slice(-5000)}\n${env.logs().slice(-3000)}`,
    });
  };

  const admitted = async (timeoutMs = 300_000): Promise<{ line: JournalRecord; provisions: string[] }> => {
    const d = await device(f, NODE);
    const line = await poll(env, "admission journalled", async () => (await readJournal(f.admin, d.id)).find((e) => e.comments.includes("admission")), timeoutMs);
    const wfs = (await list(env, "workflows")) as { metadata: { name: string; labels?: Record<string, string> }; spec: { templateRef: string } }[];
    const provisions = wfs.filter((x) => x.metadata.labels?.["fleetd.io/node"] === NODE && x.spec.templateRef === "fleetd-provision").map((x) => x.metadata.name);
    return { line, provisions };
  };

  const bootedInstalledOs = async (wf: string, timeoutMs = 180_000): Promise<{ job: string; bootDevice: string | undefined; power: string }> => {
    const job = `${wf}-boot-disk`;
    for (let attempt = 1; ; attempt++) {
      const conditions = await poll(env, `Job ${job} Completed or Failed`, async () => {
        const c = BmcJob.safeParse(await get(env, "jobs", job).catch(() => undefined));
        const cs = c.success ? (c.data.status?.conditions ?? []) : [];
        return condition(cs, "Completed")?.status === "True" || condition(cs, "Failed")?.status === "True" ? cs : undefined;
      }, timeoutMs);
      const failed = condition(conditions, "Failed")?.message;
      if (failed === undefined) break;
      // Rufio's own Task race: delete the Job; fleetd's next outcome pass does not make it again (the Workflow is
      // journalled), so the world makes the same Job again, as an operator would
      assert.ok(attempt < 3 && RUFIO_TASK_RACE.test(failed), `Rufio failed ${job}: ${failed}`);
      notes.push(`Rufio failed ${job} by itself (${failed}); made again`);
      const spec = (BmcJob.parse(await get(env, "jobs", job))).spec;
      await env.custom.deleteNamespacedCustomObject({ group: "bmc.tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "jobs", name: job });
      await poll(env, `Job ${job} gone`, async () => ((await get(env, "jobs", job).catch(() => undefined)) === undefined ? true : undefined), 60_000);
      await create(env, "jobs", { apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Job", metadata: { name: job, namespace: NS, labels: { "fleetd.io/owner": "fleetd" } }, spec });
    }
    return { job, bootDevice: (await bmc.bootSource()).target, power: await bmc.powerState() };
  };

  return { f, env, bmc, real: lab, handler: h, decisions, notes, ask, ranToEnd, endOf, admitted, bootedInstalledOs, retire, stop };
}
