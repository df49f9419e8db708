/**
 * The lab's world: ONE set of platforms and real lab machines, for the lab's continuous story (`pnpm lab`, `pnpm -s
 * fleetd lab up`) and its end-to-end test.
 *
 * Platforms, all real and on this host: NetBox 4.7 (fleetd setup, the lab's nodes file applied), one Kubernetes
 * control plane (etcd, kube-apiserver, kube-controller-manager) that is both the management cluster — Tinkerbell
 * v0.25.0's tink-server (auto-enrollment into fleetd's intake rule set), tink-controller and Rufio — and the
 * nodes' workload cluster (fleetd's CSR gate, Talos's bootstrap RBAC), netbox-script (the handler: requests,
 * admission's Workflows, Workflow outcomes, retirement, the SPIRE node list), the attestation server
 * (talos-config-server's app: SoftHSM2 CA, SQLite state, Tinkerbell admission and Workflow gate, renewal with
 * runtime attestation, bootstrap tokens as Secrets in the workload cluster), spire-server v1.13.3 (the shipped
 * server.conf) with fleetd's spire-plugin, a local registry holding fleetd's images, and one Redfish BMC
 * (sushy-tools) per machine with a BMC, whose state drives its QEMU machine (tests/src/vm/bmcMachine.ts).
 *
 * The machines (tests/src/vm/): QEMU/TCG + OVMF with the lab's Secure Boot keys + swtpm manufactured with EK
 * certificates, on the boot network (a namespace: dnsmasq DHCP/TFTP, a switch port per machine speaking LLDP as
 * NetBox cables it). Everything a machine reaches is exposed on the boot network's gateway 10.99.0.1: the
 * attestation API (:80), tink-server's gRPC (:42113), the registry (:5000), the OS image (:8080), SPIRE's agent
 * port (:8081), the workload cluster's API server (:6443). Netboot follows the machine's Hardware as Smee does
 * (the boot network serves the signed HookOS to a MAC no Hardware names, or whose Hardware allows PXE; once
 * tink-controller turns netboot off the firmware's PXE finds no boot file and goes on to the disk).
 *
 * Why dnsmasq, not Smee: OVMF boots the lab-signed HookOS UKI straight from TFTP, so the Secure Boot chain is
 * firmware → UKI; Smee would hand out its embedded iPXE binaries, which the lab's db does not sign (Secure Boot on
 * refuses them). The one Smee decision that matters here — whether a machine netboots — is made the same way.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, truncateSync, writeFileSync, writeSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { z } from "zod";
import { pino } from "pino";
import { stringify } from "yaml";
import { startHandler, toHandlerConfig, type Handler } from "@fleetd/netbox-script";
import { DEFAULT_RUNTIME_PROFILES } from "@fleetd/platform/fleet";
import { KubeBootstrapTokens, kubeFromConfig, type Kube } from "@fleetd/platform/kube";
import { listDevices, NetBoxInventory, netboxPlatformFieldCheck, patchDevice, readJournal, type JournalRecord } from "@fleetd/platform/netbox";
import { certificatesFromPem } from "@fleetd/platform/pki";
import { profileSelection } from "@fleetd/platform/protocol/server";
import { TinkerbellAdmission, TinkerbellWorkflowGate, tinkerbellEffectsFromConfig } from "@fleetd/platform/tinkerbell";
import { ProfileCache } from "@fleetd/platform/trust";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { bundleInMemoryIssuer, countingSigner } from "@fleetd/testkit/memoryAdapters";
import { siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { parseSpirePluginConfig, startSpirePlugin, type SpirePlugin } from "@fleetd/spire-plugin";
import { attestationServer } from "../attestation/world.js";
import { CountingStore } from "../attestation/testServer.js";
import { podman, pushImage, startRegistry, type LocalRegistry } from "../harness/podman.js";
import { startRedfishEmulator, type RedfishEmulator } from "../harness/redfish.js";
import { labOsImage, serveFile, type ServedFile } from "../harness/loopDisk.js";
import { createSoftHsmCa, startSoftHsm } from "../harness/softhsm.js";
import { AGENT_CONF_SUBSTITUTABLE, renderSpireConf, SHIPPED_AGENT_CONF, startSpireServer, type SpireServer } from "../harness/spire.js";
import type { SpireServerClient } from "@fleetd/platform/spire";
import { builtImage, builtLabImage, readBuiltImages, readBuiltLabImages } from "../images/built.js";
import { fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { Decisions } from "../netbox/handlerFixture.js";
import { TALOS_VERSION } from "../talos/goTools.js";
import { kubernetesSection, startEnv, type Env } from "../tinkerbell/fixtures.js";
import { followBmc, type BmcMachine } from "../vm/bmcMachine.js";
import { LAB_API_PORT, LAB_REGISTRY_PORT, LAB_SEGMENT, LAB_TINK_GRPC_PORT, startBootNetwork, type BootNetwork, type Gateway, type SwitchPort, type TcpGateway } from "../vm/bootNetwork.js";
import { actionBundle, agentJobEnv, kubeletBootstrapBundle, serveLabos } from "../vm/hookos.js";
import { labKit, type LabKit, type VarsStore } from "../vm/kit.js";
import { startMachine, type Machine } from "../vm/machine.js";
import { manufactureMachineTpm, type MachineTpm } from "../vm/machineTpm.js";
import { startWorkloadCluster, type WorkloadCluster } from "../vm/workloadCluster.js";

export const NS = "tinkerbell";
const BOOT_FILE = "hookos.efi";
const GATEWAY = `${LAB_SEGMENT}.1`;
/** Where machines reach the platforms (the boot network's gateway). */
export const LAB_PORTS = { api: LAB_API_PORT, tink: LAB_TINK_GRPC_PORT, registry: LAB_REGISTRY_PORT, osImage: 8080, spire: 8081, kube: 6443 } as const;

/** What a lab machine is in the story. */
export type LabMachineKind =
  /** Secure Boot on, the signed HookOS, a TPM its node approves, a BMC: goes all the way. */
  | "good"
  /** Its node approves another TPM's EKs (a motherboard swap): waits as pending, disk untouched. */
  | "unapproved-tpm"
  /** Secure Boot off in its variable store: refused by the `hookos` profile, journalled, disk untouched. */
  | "secure-boot-off"
  /** Netbooted a HookOS signed by a key no db lists: the firmware refuses to run it; the server never hears of it. */
  | "unlisted-key"
  /** Netbooted a HookOS that is not signed at all: the firmware refuses to run it; the server never hears of it. */
  | "unsigned-image";

export interface LabMachine {
  node: string;
  kind: LabMachineKind;
  mac: string;
  serial: string;
  uuid: string;
  tpm: MachineTpm;
  /** Its disk image (random bytes first and last MiB). */
  disk: string;
  /** SHA-256 of the disk as the world made it. */
  diskSha256: string;
  port: SwitchPort;
  /** Its BMC and the machine following it (good machines); others are powered on by the lab directly. */
  bmc?: { emulator: RedfishEmulator; follower: BmcMachine };
  /** Boots without a BMC (started by `powerOn`). */
  boots: Machine[];
}

export interface LabWorld {
  dir: string;
  kit: LabKit;
  f: Fleet;
  env: Env;
  net: BootNetwork;
  handler: Handler;
  decisions: Decisions;
  spire: SpireServer;
  spirePlugin: SpirePlugin;
  /** An admin client of spire-server (its admin socket), closed with the world. */
  spireClient: SpireServerClient;
  workload: WorkloadCluster;
  /** The attestation API as machines reach it (every request recorded). */
  api: Gateway;
  relays: Record<"tink" | "registry" | "spire" | "kube", TcpGateway>;
  /** The attestation server's state (pending EKs, sessions, bootstrap tokens). */
  store: CountingStore;
  /** The lab's nodes file (applied to NetBox). */
  nodesFile: string;
  /** The CA's certificate (PEM): SPIRE's devid CA bundle. */
  caPem: string;
  osImage: ServedFile;
  machines: Record<string, LabMachine>;
  /** The management = workload cluster as fleetd's server and CSR gate use it. */
  kube: Kube;
  /** The kubelet TLS bootstrap's CSR flow (tests/src/vm/kubeletBootstrap.ts), as the lab OS runs it. */
  kubeletBundle: string;
  /** NetBox's device ID of a node. */
  deviceId(node: string): Promise<number>;
  /** LDevID/LAK signatures the CA made so far. */
  signatures(): number;
  /** Press the machine's power button: through its BMC (Redfish ComputerSystem.Reset On), or start it directly. */
  powerOn(node: string): Promise<void>;
  /** Set NetBox `desired_action` as alice (an operator in the UI). */
  ask(node: string, action: "provision" | "attest" | "wipe"): Promise<void>;
  /** Set the device `decommissioning` as alice. */
  retire(node: string, reason: string): Promise<void>;
  journal(node: string): Promise<JournalRecord[]>;
  status(node: string): Promise<string | undefined>;
  /** The files an operator runs fleetd's CLI with against the lab (also in `endpoints()`). */
  files: LabFiles;
  /** What a reader needs to use the running lab (`fleetd lab up --json`). */
  endpoints(): Record<string, unknown>;
  notes: string[];
  stop(): Promise<void>;
}

/** What a reader of `fleetd lab up --json` runs fleetd's CLI with. */
export interface LabFiles {
  /** The lab's working directory (removed when the lab stops). */
  dir: string;
  nodesFile: string;
  /** The site configuration as the apply account, with the management cluster (`fleetd inventory check|apply`, `fleetd retire status`). */
  siteConfig: string;
  /** The attestation server's state (`fleetd pending`). */
  stateConfig: string;
  /** The EK manufacturer's CA directory (`fleetd verify ek --roots`). */
  manufacturerCa: string;
  /** The CA bundle SPIRE's tpm_devid checks LDevIDs against. */
  devidCa: string;
  /** netbox-script's SPIRE node list (spire-nodes.json). */
  spireNodeList: string;
}

export interface LabWorldOptions {
  /** LDevID/LAK lifetime (days); the story's renewal comes due at two thirds of it. Default 15 minutes. */
  ldevidLifetimeDays?: number;
  /** The machines (default: worker-1 good, worker-2 unapproved TPM, worker-3 Secure Boot off, worker-4 a HookOS signed by an unlisted key, worker-5 an unsigned HookOS). */
  machines?: Record<string, LabMachineKind>;
  progress?: (line: string) => void;
}

const macOf = (n: number) => `52:54:00:fd:10:${n.toString(16).padStart(2, "0")}`;

/** A disk image with random bytes in its first and last MiB over a sparse file ("untouched" compares all of it). */
function newDisk(path: string, mib = 256): string {
  const one = 1 << 20;
  const fd = openSync(path, "w");
  try {
    writeSync(fd, randomBytes(one), 0, one, 0);
    writeSync(fd, randomBytes(one), 0, one, (mib - 1) * one);
  } finally {
    closeSync(fd);
  }
  truncateSync(path, mib * one);
  return path;
}

/** SHA-256 of a file (a disk image: "untouched" compares all of it). */
export const fileSha256 = (f: string) => createHash("sha256").update(readFileSync(f)).digest("hex");

export async function startLabWorld(o: LabWorldOptions = {}): Promise<LabWorld> {
  const say = o.progress ?? (() => undefined);
  const notes: string[] = [];
  const stops: (() => Promise<void> | void)[] = [];
  const stopAll = async () => {
    for (const s of stops.reverse()) {
      try {
        await s();
      } catch (e) {
        notes.push(`stopping: ${(e as Error).message}`);
      }
    }
  };
  const dir = mkdtempSync(join(tmpdir(), "fleetd-lab-"));
  stops.push(() => rmSync(dir, { recursive: true, force: true }));
  try {
    const kit = await labKit();
    say("platforms: NetBox, Kubernetes + Tinkerbell + Rufio, the boot network, a registry");
    const [f, env, net, registry] = await Promise.all([
      startFleet(),
      startEnv(NS, { autoEnrollment: true, controlPlane: { apiserverSans: [`IP:${GATEWAY}`] } }),
      startBootNetwork({ bootFile: BOOT_FILE }),
      startRegistry(join(dir, "registry")),
    ]);
    stops.push(() => f.nb.stop(), () => env.stop(), () => net.stop(), () => registry.stop());

    // fleetd's images in the registry, pinned by digest; machines pull them through the gateway's relay
    say("fleetd's images pushed to the lab registry");
    const images = await pushImages(registry);
    const relays = {
      tink: await net.exposeTcp(env.tb.grpcAddress, LAB_PORTS.tink),
      registry: await net.exposeTcp(registry.host, LAB_PORTS.registry),
      kube: await net.exposeTcp(new URL(env.cp.server).host, LAB_PORTS.kube),
    };

    // the OS image the provision Workflow's install-talos streams: the kit's lab OS disk, gzipped (scripts/lab-os)
    const labOs = await labOsImage();
    const osImage = await serveFile(labOs.gz);
    stops.push(() => osImage.close());
    await net.expose(new URL(osImage.url).origin, LAB_PORTS.osImage);

    // the machines' TPMs (one manufacturer), EK bindings, disks, switch ports
    const kinds = o.machines ?? { "worker-1": "good", "worker-2": "unapproved-tpm", "worker-3": "secure-boot-off", "worker-4": "unlisted-key", "worker-5": "unsigned-image" };
    const manufacturer = join(dir, "manufacturer");
    const first = await manufactureMachineTpm({ caDir: manufacturer });
    const rest = await Promise.all(Object.keys(kinds).slice(1).map(() => manufactureMachineTpm({ caDir: manufacturer })));
    const tpms = [first, ...rest];
    const approvedElsewhere = Object.values(kinds).includes("unapproved-tpm") ? await manufactureMachineTpm({ caDir: manufacturer }) : undefined;
    for (const t of [...tpms, ...(approvedElsewhere ? [approvedElsewhere] : [])]) stops.push(() => t.remove());

    const machines: Record<string, LabMachine> = {};
    const nodes: Record<string, unknown> = {};
    let i = 0;
    let bmcPort: number | undefined;
    for (const [node, kind] of Object.entries(kinds)) {
      const n = ++i;
      const tpm = tpms[n - 1] as MachineTpm;
      const sw = { device: "tor-lab", port: `ethernet1/1/${n}` };
      const port = await net.addPort({ lldp: sw });
      const mac = macOf(n);
      const disk = newDisk(join(dir, `${node}.img`));
      const approved = kind === "unapproved-tpm" ? (approvedElsewhere as MachineTpm).ek : tpm.ek;
      // every BMC on one port (the site configuration's), each on its own loopback address, as a site's BMCs are
      const bmc = kind === "good" ? await startRedfishEmulator({ powerState: "Off", mac, host: `127.0.0.${10 + n}`, ...(bmcPort ? { port: bmcPort } : {}) }) : undefined;
      bmcPort ??= bmc?.port;
      if (bmc) stops.push(() => bmc.stop());
      nodes[node] = {
        serial: `LAB-${String(n).padStart(4, "0")}`,
        model: "lab-vm",
        class: "talos",
        role: "worker",
        switch: sw,
        address: { cidr: `10.20.0.${50 + n}/24`, gateway: "10.20.0.1" },
        installDisk: "/dev/vda",
        bmc: bmc ? { type: "redfish", address: bmc.host, credentials: `secret:${NS}/fleetd-bmc-${node}` } : { type: "none" },
        tpm: "2.0",
        ek: [{ alg: "rsa", sha256: approved.rsa.binding }, { alg: "ecc", sha256: approved.ecc.binding }],
      };
      machines[node] = { node, kind, mac, serial: `LAB-${String(n).padStart(4, "0")}`, uuid: randomUUID(), tpm, disk, diskSha256: fileSha256(disk), port, boots: [], ...(bmc ? { bmc: { emulator: bmc, follower: undefined as unknown as BmcMachine } } : {}) };
      if (bmc) await env.core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: `fleetd-bmc-${node}` }, stringData: { username: bmc.username, password: bmc.password } } });
    }
    const bmcs = Object.values(machines).flatMap((m) => (m.bmc ? [m.bmc.emulator] : []));
    const nodesFile = join(dir, "nodes.yaml");
    writeFileSync(nodesFile, stringify({
      version: 1,
      site: { name: "fleetd lab", slug: "fleetd-lab" },
      models: { "lab-vm": { manufacturer: "QEMU", model: "lab machine (q35, OVMF, swtpm)" }, s5248: { manufacturer: "Dell", model: "S5248F-ON" } },
      switches: { "tor-lab": { model: "s5248" } },
      nodes,
    }));
    say("NetBox: fleetd setup, the lab's nodes file applied (planned devices)");
    for (const args of [["netbox", "setup", "--config", f.configFile(f.nb.authorization.replace(/^Bearer /, ""))], ["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]]) {
      const r = fleetd(args, {}, 180_000);
      if (r.code !== 0) throw new Error(`fleetd ${args.join(" ")}: ${r.stderr}`);
    }

    // the attestation server's socket first: its gateway URL goes into the Templates
    const http: Server = createServer();
    await new Promise<void>((res) => http.listen(0, "127.0.0.1", res));
    stops.push(() => new Promise<void>((res) => {
      http.closeAllConnections();
      http.close(() => res());
    }));
    const api = await net.expose(`http://127.0.0.1:${(http.address() as { port: number }).port}`, LAB_PORTS.api);

    // the CA, the SPIRE server (fleetd's CA bundle is its devid CA, the manufacturer's issuer its endorsement CA)
    const hsm = await startSoftHsm([{ label: "fleetd-ca", pin: "123456", soPin: "12345678", keys: [{ label: "ca", id: "01", type: "ec-p256" }] }]);
    stops.push(() => hsm.close());
    const { signer, ca } = await createSoftHsmCa(hsm, { token: "fleetd-ca", key: "ca", commonName: "fleetd lab CA", notBefore: new Date(Date.now() - 3600_000), lifetimeDays: 365 });
    stops.push(() => signer.close());
    const counted = countingSigner(signer);
    const devidCa = join(dir, "devid-ca.pem");
    writeFileSync(devidCa, ca.pem);
    say("spire-server v1.13.3 (shipped server.conf) and fleetd's spire-plugin");
    const spire = await startSpireServer({ devidCaPath: devidCa, endorsementCaPath: join(first.caDir, "issuercert.pem") });
    stops.push(() => spire.stop());
    const spireRelay = await net.exposeTcp(`127.0.0.1:${spire.port}`, LAB_PORTS.spire);
    // a workload on each node, as an operator registers one: under the node's entry (fleetd's sync makes that one),
    // told apart by uid 0 (the lab OS runs no kubelet for the k8s workload attestor)
    const spireAdmin = spire.client();
    stops.push(() => spireAdmin.close());
    const workloads = Object.entries(kinds).filter(([, k]) => k === "good").map(([node]) => ({ spiffeId: `spiffe://${spire.trustDomain}/workload/${node}/labos`, parentId: `spiffe://${spire.trustDomain}/node/${node}`, selectors: [{ type: "unix", value: "uid:0" }] }));
    if (workloads.length > 0) {
      const made = await spireAdmin.batchCreateEntry(workloads);
      const bad = made.filter((m) => m.status.codeName !== "OK");
      if (bad.length > 0) throw new Error(`registering the workload entries: ${JSON.stringify(bad)}`);
    }

    // the site configuration netbox-script and the attestation server read
    const caFile = join(dir, "management-ca.pem");
    writeFileSync(caFile, env.cp.caPem);
    const spireList = { file: join(dir, "spire-nodes", "spire-nodes.json") };
    const spireStatus = { file: join(dir, "spire-nodes", "spire-sync-status.json") };
    mkdirSync(join(dir, "spire-nodes"), { recursive: true });
    const bmc = bmcs[0];
    const kubernetes = kubernetesSection(env.cp.kubeconfig, NS, caFile, {
      ...(bmc ? { bmc: { redfish: { port: bmc.port, useBasicAuth: true } } } : {}),
      clearTpmOnRetire: true,
      server: { url: api.url, lab: true },
      images,
      talosImageUrl: `http://${GATEWAY}:${LAB_PORTS.osImage}/${basename(labOs.gz)}`,
      intake: { enabled: true },
    });
    const site = f.config(f.handler.token, {
      handler: {
        listen: { host: "127.0.0.1", port: f.handlerPort }, stateDir: join(dir, "handler-state"), nodesFile, reconcileIntervalSeconds: 15,
        spireNodes: { trustDomain: spire.trustDomain, caBundle: devidCa, list: spireList, status: spireStatus },
      },
      kubernetes,
    } as never);

    const stateDb = join(dir, "attestation-state.db");
    const store = new CountingStore(stateDb);
    stops.push(() => store.close());
    const kube: Kube = kubeFromConfig(env.kc);
    const inventory = new NetBoxInventory(f.client(f.handler.token), { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
    const log = pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" });
    const fx = tinkerbellEffectsFromConfig(site, { kube });
    if (!fx.effects) throw new Error(`the site configuration makes no Tinkerbell effects: ${fx.reason ?? ""}`);
    const profiles = new ProfileCache();
    const talos = siteConfigFixture(TALOS_VERSION);
    const { app, outbox } = attestationServer({
      store,
      inventory,
      netbox: f.client(f.handler.token),
      issuer: bundleInMemoryIssuer({ signer: counted.signer, caPem: ca.pem, now: () => new Date(), lifetimeDays: o.ldevidLifetimeDays ?? 15 / 1440 }),
      bootstrapTokens: new KubeBootstrapTokens(kube),
      siteAuthoritiesDir: kit.siteAuthoritiesDir,
      ekCaDir: first.caDir,
      talosVersion: TALOS_VERSION,
      talosSite: { ...talos, cluster: { ...talos.cluster, endpoint: `https://${GATEWAY}:${LAB_PORTS.kube}`, kubernetesCaCert: env.cp.caPem } },
      log,
      metrics: createMetrics(),
      now: () => new Date(),
      workflows: new TinkerbellWorkflowGate(fx.effects.objects),
      admission: new TinkerbellAdmission(fx.effects, inventory, netboxPlatformFieldCheck(f.client(f.handler.token), f.apply.username), log),
      renewal: {
        caBundle: () => certificatesFromPem(ca.pem),
        profiles: DEFAULT_RUNTIME_PROFILES,
        selection: (profile) => profileSelection(profiles.load(profile)),
        onQuarantine: (node) => void notes.push(`quarantined ${node.name}`),
        onAlert: (node) => void notes.push(`alert for ${node.name}`),
      },
      workload: kube,
    });
    stops.push(() => outbox.stop());
    http.on("request", app);

    say("netbox-script (requests, admission's Workflows, outcomes, retirement, the SPIRE node list), the CSR gate");
    const decisions = new Decisions();
    const handler = await startHandler(toHandlerConfig(site), { logger: log, onDecision: (e) => decisions.push(e) });
    stops.push(() => handler.stop());
    const spirePlugin = await startSpirePlugin(parseSpirePluginConfig({ trustDomain: spire.trustDomain, devidCaPath: devidCa, socketPath: spire.socketPath, list: spireList, status: spireStatus, intervalSeconds: 30, listen: { host: "127.0.0.1", port: 0 } }), { logger: log });
    stops.push(() => spirePlugin.stop());
    const workload = await startWorkloadCluster({ kube, store, inventory, cp: env.cp });
    stops.push(() => workload.stop());

    // what every machine is served: the HookOS (netboot, as Smee decides), the lab OS's files (from its disk boot)
    const bundle = await actionBundle(join(dir, "fleetd-tink-action.mjs"));
    const kubeletBundle = await kubeletBootstrapBundle(join(dir, "kubelet-bootstrap.mjs"));
    const agentConf = renderSpireConf(readFileSync(SHIPPED_AGENT_CONF, "utf8"), { server_address: GATEWAY, server_port: String(LAB_PORTS.spire) }, AGENT_CONF_SUBSTITUTABLE);
    const spireBundle = await spire.bundlePem();
    for (const m of Object.values(machines)) {
      serveLabos(net, m.mac, {
        env: { FLEETD_SERVER: api.url, FLEETD_ALLOW_HTTP: "lab", FLEETD_LOG_LEVEL: "info", FLEETD_SPIRE_SIGNAL: "process:spire-agent", FLEETD_LABOS_KEEP_RUNNING: "yes" },
        bundle, agentConf, spireBundle, kubeletBootstrap: kubeletBundle,
      });
    }
    // what each machine netboots: the signed HookOS; worker-4's is signed by a key no db lists, worker-5's by none
    const hookosOf = (k: LabMachineKind) => kit.image(k === "unlisted-key" ? "hookos-rogue" : k === "unsigned-image" ? "hookos-unsigned" : "hookos");
    const gate = startNetbootGate(kube, net, Object.values(machines).map((m) => ({ mac: m.mac, image: hookosOf(m.kind) })), hookosJob(), notes);
    stops.push(() => gate.stop());

    const varsOf = (m: LabMachine): VarsStore => (m.kind === "secure-boot-off" ? "secureboot-off" : "secureboot");
    const bootOf = (m: LabMachine) => (from: "network" | "disk", n: number) =>
      startMachine({ name: `${m.node}-${n}`, kit, network: net, port: m.port, tpm: m.tpm, vars: varsOf(m), mac: m.mac, smbios: { serial: m.serial, uuid: m.uuid }, disk: m.disk, bootFrom: from });
    for (const m of Object.values(machines)) {
      if (!m.bmc) continue;
      m.bmc.follower = followBmc({ name: m.node, bmc: m.bmc.emulator, defaultBoot: "network", boot: bootOf(m) });
      const follower = m.bmc.follower;
      stops.push(() => follower.stop());
    }
    stops.push(async () => {
      for (const m of Object.values(machines)) for (const b of m.boots) await b.stop();
    });

    const admin = f.client(f.nb.authorization.replace(/^Bearer /, ""));
    const deviceOf = async (node: string) => {
      const [d] = await listDevices(admin, { name: node });
      if (!d) throw new Error(`no device ${node} in NetBox`);
      return d;
    };
    const machine = (node: string): LabMachine => {
      const m = machines[node];
      if (!m) throw new Error(`no lab machine ${node} (${Object.keys(machines).join(", ")})`);
      return m;
    };
    // What a reader of `fleetd lab up --json` runs fleetd's CLI with: the site configuration as the apply account
    // (`fleetd inventory check|apply`, `fleetd retire status`), the attestation server's state (`fleetd pending`),
    // the nodes file.
    const labFiles: LabFiles = {
      dir,
      nodesFile,
      siteConfig: f.configFile(f.apply.token, { kubernetes }),
      stateConfig: join(dir, "fleetd-state.yaml"),
      manufacturerCa: manufacturer,
      devidCa,
      spireNodeList: spireList.file,
    };
    writeFileSync(labFiles.stateConfig, stringify({ server: { stateDb } }));
    return {
      dir, kit, f, env, net, handler, decisions, spire, spirePlugin, workload, api, relays: { ...relays, spire: spireRelay }, osImage, machines, notes, store, nodesFile, caPem: ca.pem, kube, kubeletBundle, files: labFiles, spireClient: spireAdmin,
      deviceId: async (node) => (await deviceOf(node)).id,
      signatures: () => counted.signatures(),
      async powerOn(node) {
        const m = machine(node);
        if (m.bmc) {
          const r = await m.bmc.emulator.request("POST", `/redfish/v1/Systems/${m.bmc.emulator.systemId}/Actions/ComputerSystem.Reset`, { ResetType: "On" });
          if (r.status >= 300) throw new Error(`${node}'s BMC: power on: HTTP ${r.status} ${r.body.slice(0, 200)}`);
          return;
        }
        m.boots.push(await bootOf(m)("network", m.boots.length + 1));
      },
      async ask(node, action) {
        const d = await deviceOf(node);
        await patchDevice(f.client(f.alice.token), d.id, { custom_fields: { desired_action: action } }, null, `lab: ${action}`);
      },
      async retire(node, reason) {
        const d = await deviceOf(node);
        await patchDevice(f.client(f.alice.token), d.id, { status: "decommissioning" }, null, reason);
      },
      journal: async (node) => readJournal(admin, (await deviceOf(node)).id),
      status: async (node) => (await deviceOf(node)).status,
      endpoints: () => ({
        netbox: { url: f.nb.url, token: f.alice.token, user: "alice" },
        files: labFiles,
        attestationApi: { host: `http://127.0.0.1:${(http.address() as { port: number }).port}`, machines: api.url },
        kubeconfig: env.cp.kubeconfig,
        spire: { adminSocket: spire.socketPath, trustDomain: spire.trustDomain },
        machines: Object.fromEntries(Object.values(machines).map((m) => [m.node, {
          kind: m.kind, mac: m.mac, serial: m.serial, disk: m.disk,
          console: (m.bmc?.follower.current()?.machine ?? m.boots.at(-1))?.consoleFile,
          tpm: m.tpm.dir,
          ...(m.bmc ? { bmc: m.bmc.emulator.url } : {}),
        }])),
      }),
      stop: stopAll,
    };
  } catch (e) {
    await stopAll();
    throw e;
  }
}

/** fleetd's images from the build (`pnpm -s images`, run by .ci/setup) pushed to the lab registry; refs as machines pull them. */
async function pushImages(registry: LocalRegistry): Promise<{ action: string; wipe: string; image2disk: string }> {
  const built = readBuiltImages();
  const lab = readBuiltLabImages();
  const p = podman({ insecureRegistries: [registry.host] });
  const pin = async (local: string, path: string) => `${GATEWAY}:${LAB_PORTS.registry}/${path}@${await pushImage(p, local, `${registry.host}/${path}:lab`)}`;
  return {
    action: await pin(builtImage(built, "tink-action").ref, "fleetd/tink-action"),
    wipe: await pin(builtLabImage(lab, "wipe").ref, "fleetd/lab-wipe"),
    image2disk: await pin(builtLabImage(lab, "image2disk").ref, "fleetd/lab-image2disk"),
  };
}

/** The HookOS job every machine gets: the agent mode (the real tink-agent; its ID is the boot MAC), where tink-server and the registry are. */
function hookosJob(): (mac: string) => string {
  const job = agentJobEnv({ tinkServer: `${GATEWAY}:${LAB_PORTS.tink}`, registry: `${GATEWAY}:${LAB_PORTS.registry}` });
  return () => job;
}

const HardwareList = z.object({
  items: z.array(z.object({ spec: z.object({ interfaces: z.array(z.object({ dhcp: z.object({ mac: z.string().optional() }).passthrough().optional(), netboot: z.object({ allowPXE: z.boolean().optional() }).passthrough().optional() }).passthrough()).optional() }).passthrough() }).passthrough()),
});

/**
 * Netboot as Smee decides it: a MAC no Hardware names (an unknown machine: tink-server enrolls it) or whose
 * Hardware interface allows PXE is served the signed HookOS and its job; any other is served no boot file.
 */
function startNetbootGate(kube: Kube, net: BootNetwork, machines: { mac: string; image: string }[], job: (mac: string) => string, notes: string[]): { stop(): Promise<void> } {
  const list = async () => {
    const raw = (await kube.custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "hardware" })) as unknown;
    return HardwareList.parse(raw).items;
  };
  let active = true;
  const served = new Map<string, boolean>();
  const tick = async () => {
    const hw = await list();
    for (const { mac, image } of machines) {
      const iface = hw.flatMap((h) => h.spec.interfaces ?? []).find((x) => x.dhcp?.mac?.toLowerCase() === mac);
      const allow = iface === undefined || iface.netboot?.allowPXE === true;
      if (served.get(mac) === allow) continue;
      served.set(mac, allow);
      if (allow) net.serveTo(mac, { [BOOT_FILE]: { copyOf: image }, "job.env": job(mac) });
      else net.unserve(mac, [BOOT_FILE]);
      notes.push(`${new Date().toISOString()} netboot ${allow ? "served" : "off"} for ${mac}${iface ? " (its Hardware)" : " (no Hardware: enrollment)"}`);
    }
  };
  const loop = (async () => {
    while (active) {
      await tick().catch((e: unknown) => void notes.push(`netboot gate: ${(e as Error).message}`));
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  return { stop: async () => { active = false; await loop; } };
}

