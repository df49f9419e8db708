/**
 * The attestation world for end-to-end tests and the lab, all real and on loopback: NetBox (with fleetd's
 * setup and a nodes file applied), a software TPM manufactured with EK certificates whose PCRs carry a HookOS
 * boot, a CA key in SoftHSM2 behind PKCS#11, the attestation server (express) with its SQLite state, and
 * fleetd's TPM client playing the machine.
 *
 * `worker-1` is always there (`w.tpm`, `w.claims`, `w.client`, `w.eventLog`, `w.bindings`). More machines are
 * asked for by node name in `machines`: each gets its own swtpm, its own boot (e.g. Secure Boot off), its own
 * manufacturer (the world's EK CA, which the server trusts, or a CA of its own, which it does not), and its
 * EKs approved on that node (`chain: false` if asked). A node the example nodes file lacks is a copy of
 * worker-1 with its own serial, switch port and addresses.
 *
 * Tinkerbell's objects live in a real kube-apiserver with Tinkerbell's CRDs (no controllers: nothing runs a
 * Workflow). The server's Workflow gate reads them, so the world plays the part of the NetBox handler and of
 * tink-server's enrollment: `transport` (and `withWorkflows(t)`) creates, before each challenge, the Workflow
 * the machine claims — the enrollment Workflow for intake, a fleetd Workflow for the node otherwise — and
 * deletes the node's other fleetd Workflows, as the handler does when it starts one. `rawTransport` does not.
 */
import { createServer, type Server } from "node:http";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino, { type Logger } from "pino";
import { parse as parseYaml, stringify } from "yaml";
import { ekBindingFromCertificate, readCertificate } from "@fleetd/verify/ek";
import { loadCaStore } from "@fleetd/platform/trust";
import { type NetBox, NetBoxOutboxDelivery, NetBoxInventory, deviceIdByName } from "@fleetd/platform/netbox";
import { OutboxWorker } from "@fleetd/platform/outbox";
import type { ServerTransport } from "@fleetd/platform/protocol/client";
import type { Claims } from "@fleetd/platform/protocol";
import { PolicyMeasuredBoot, profileSelection, type AttestationService, type PkiIssuer, type RenewalSettings } from "@fleetd/platform/protocol/server";
import { ProfileCache } from "@fleetd/platform/trust";
import { certificatesFromPem } from "@fleetd/platform/pki";
import { DEFAULT_RUNTIME_PROFILES } from "@fleetd/platform/fleet";
import { execFileSync } from "node:child_process";
import { JournalOnlyAdmission, type Admission, type BootstrapTokens, type Issuer } from "@fleetd/platform/fleet";
import type { AttestationStore, SqliteAttestationStore } from "@fleetd/platform/state";
import { bootScenario, makeLabKeys, writeSiteAuthorities, type LabKeys, type ScenarioOptions, type ScenarioProfile } from "@fleetd/testkit/bootScenarios";
import { siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { bundleInMemoryIssuer, countingSigner } from "@fleetd/testkit/memoryAdapters";
import type { TalosSiteConfig } from "@fleetd/platform/talos/config";
import { pcrExtend, pcrRead, TcpTransport, TpmClient } from "@fleetd/platform/tpmclient";
import { createHash } from "node:crypto";
import type { createApp } from "@fleetd/talos-config-server/app";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { EXAMPLE_NODES, fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { CountingStore, testAttestationService, testConfigApp, type TestLimits } from "./testServer.js";
import { createSoftHsmCa, startSoftHsm, type SoftHsm } from "../harness/softhsm.js";
import type { NetBoxServerOptions } from "../harness/netbox.js";
import { startSwtpm, type PcrBank, type SwtpmTcp } from "../harness/swtpm.js";
import { startSwtpm12, type Swtpm12 } from "../harness/swtpm12.js";
import { Tpm12Client, type Tpm12Secrets } from "@fleetd/platform/tpm12client";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { installTinkerbellCrds } from "../harness/tinkerbellCrds.js";
import { KubeBootstrapTokens, kubeFromConfig, KubeNodeQuarantine, type Kube } from "@fleetd/platform/kube";
import * as k8s from "@kubernetes/client-node";
import {
  LABEL_MODE, ownedLabels, WORKFLOW, WorkflowObject, enrollmentWorkflowName, Objects, templateName,
  TinkerbellWorkflowGate,
} from "@fleetd/platform/tinkerbell";

export const NODE = "worker-1";

/** A further machine of the world, on the node it is named after. */
export interface MachineSpec {
  /** Options of the HookOS boot its PCRs and event log carry (default: the good boot). */
  boot?: ScenarioOptions;
  /** Who made its TPM: the world's EK CA, which the server trusts (default), or a CA of its own, which it does not. */
  manufacturer?: "world" | "foreign";
  /** The node approves its EKs with `chain: false` (default: true, a manufacturer chain is required). */
  chain?: boolean;
  /** PCR banks its TPM allocates (default sha1 + sha256). Its boot extends only the banks `boot.banks` names. */
  pcrBanks?: readonly PcrBank[];
}

export interface WorldOptions {
  talosVersion: string;
  /** How NetBox's web server runs (default: runserver, as every test runs it; the benchmark asks for gunicorn). */
  netbox?: NetBoxServerOptions;
  /**
   * TPM 1.2 machines by node name: each a copy of worker-1 with `tpm: "1.2"`, its own swtpm TPM 1.2 (the world's
   * EK CA manufactured its EK certificate) whose SHA-1 PCRs carry its HookOS boot, its EK approved on the node.
   */
  tpm12Machines?: Record<string, { boot?: ScenarioOptions }>;
  /** Further machines by node name (not worker-1, which always exists). */
  machines?: Record<string, MachineSpec>;
  /** Where the rendered configs' bootstrap token Secrets go (default: recorded in memory, no cluster). */
  bootstrapTokens?: BootstrapTokens;
  /** The site's Talos settings (default: siteConfigFixture, which renders workers only). */
  talosSite?: TalosSiteConfig;
  /**
   * Lifetime of the LDevID/LAK certificates the CA issues (default 30 days). The node agent's real-platform test
   * uses minutes, so that renewal comes due while every certificate stays valid by the real clock (which the real
   * spire-server and spire-agent check); moving the server's clock by days would issue certificates that start in
   * the future for them.
   */
  ldevidLifetimeDays?: number;
  /**
   * The world's kube-apiserver plays the nodes' workload cluster: its serving certificate also names `apiserverSans`,
   * the rendered configs name `endpoint` (where machines reach it, e.g. through the lab's boot network) as the
   * cluster endpoint and its CA as the Kubernetes CA, and the bootstrap tokens are Secrets in it (fleetd's
   * KubeBootstrapTokens), so that a node's kubelet bootstrap runs against it. Default: none of this (configs name
   * talosSite's cluster; tokens are recorded in memory).
   */
  workloadCluster?: { endpoint: string; apiserverSans: readonly string[] };
  /**
   * The site's Secure Boot authorities (the policy's `site:` sets) the server judges boots by. Default: the test
   * keys the simulated boots are signed with; lab machines with real firmware bring the lab kit's (tests/src/vm/kit.ts).
   */
  siteAuthoritiesDir?: string;
}

/** A TPM 1.2 machine of the world. */
export interface World12Machine {
  node: string;
  tpm: Swtpm12;
  binding: string;
  claims: (over?: Partial<Claims>) => Claims;
  client: () => Tpm12Client;
  secrets: Tpm12Secrets;
  /** Its SHA-1 format event log. */
  eventLog: Uint8Array;
}

/** A machine of the world: its TPM, what it claims and the log of its boot. */
export interface WorldMachine {
  node: string;
  tpm: SwtpmTcp;
  bindings: { rsa: string; ecc: string };
  claims: (over?: Partial<Claims>) => Claims;
  client: () => TpmClient;
  eventLog: Uint8Array;
}

export interface World {
  fleet: Fleet;
  tpm: SwtpmTcp;
  hsm: SoftHsm;
  store: SqliteAttestationStore;
  inventory: NetBoxInventory;
  /** The inventory's NetBox client (the attestation account). */
  netbox: NetBox;
  /** The Talos version configs are rendered for. */
  talosVersion: string;
  /** The server's outbox worker (delivers what the steps committed to NetBox). */
  outbox: OutboxWorker;
  server: Server;
  baseUrl: string;
  bindings: { rsa: string; ecc: string };
  claims: (over?: Partial<Claims>) => Claims;
  client: () => TpmClient;
  transport: ServerTransport;
  eventLog: Uint8Array;
  dir: string;
  /** Every machine, worker-1 included, by node name. */
  machines: Record<string, WorldMachine>;
  /** The TPM 1.2 machines (WorldOptions.tpm12Machines), by node name. */
  tpm12: Record<string, World12Machine>;
  /** NetBox as its admin (for edits an operator makes, and for reading journals). */
  admin: NetBox;
  /** The management cluster (kube-apiserver with Tinkerbell's CRDs) and the namespace of Tinkerbell's objects. */
  cp: ControlPlane;
  kube: Kube;
  tinkerbellNamespace: string;
  /** The transport without the handler's part: no Workflow is created for a challenge. */
  rawTransport: ServerTransport;
  /** `t` with the handler's part: before each challenge the claimed Workflow exists for the claimed mode. */
  withWorkflows(t: ServerTransport): ServerTransport;
  /** The Workflow a machine of `node` claims in `mode` exists (and the node's other fleetd Workflows are gone). */
  ensureWorkflow(node: string, claims: Pick<Claims, "workflow" | "mode" | "macs" | "bootMac">): Promise<void>;
  /** The NetBox device ID of a node (the key of its attestation state). */
  deviceId(name: string): Promise<number>;
  /** Bootstrap token Secrets that exist (in memory, without a workload cluster; empty with `workloadCluster`, whose tokens are Secrets in the cluster): token id → node. */
  liveTokens(): Map<string, string>;
  /** Another server over the same store, NetBox and CA, with other limits (on its own loopback port). */
  serverWith(limits: Pick<TestLimits, "attestRequestsPerMinute" | "unauthenticatedJournalWindowMs" | "maxPendingEks">): Promise<ExtraServer>;
  /** Signatures the CA key has made since the world started (the CA certificate excluded). */
  signatures: () => number;
  /** Install codes the server has stored since the world started. */
  installCodesIssued: () => number;
  /** Fault injection at exact points of the server's steps (each hook runs once). */
  hooks: FaultHooks;
  lab: LabKeys;
  /** The CA certificate (PEM) whose key is on the SoftHSM token "fleetd-ca", key "ca". */
  caPem: string;
  /** Site Secure Boot authorities of the HookOS boot (the policy's `site:` sets). */
  siteAuthoritiesDir: string;
  /**
   * Power-cycles the machine's swtpm (PCRs reset, transient objects gone, persistent keys and NV kept) and boots
   * `profile` (e.g. the installed Talos) into it: returns that boot's event log (the machine's `eventLog` is not
   * changed).
   */
  reboot(name: string, profile: ScenarioProfile, options?: ScenarioOptions): Promise<Uint8Array>;
  /** Moves the server's clock (ms; certificates keep the validity they were issued with). */
  advanceClock(ms: number): void;
  /** What the server's renewal reported: quarantined workers and alerted control planes, by node name. */
  quarantines: string[];
  alerts: string[];
  stop(): Promise<void>;
}

/** Points in the server's steps where a test injects a fault (e.g. stops NetBox); each runs once when set. */
export interface FaultHooks {
  /** After the CA signed a step's certificates, before anything records them. */
  afterIssue?: () => Promise<void>;
  /** After a provision confirm created its bootstrap token (a worker's), before it records anything. */
  afterBootstrapToken?: () => Promise<void>;
}

/** Runs the hook `name` once (it is cleared first). */
async function fire(hooks: FaultHooks, name: keyof FaultHooks): Promise<void> {
  const h = hooks[name];
  delete hooks[name];
  await h?.();
}


const swtpmOptions = { pcrBanks: ["sha1", "sha256"] } as const;

/** What a test server is made of besides the world's fixed parts (the attestation tests and the HA replicas). */
export interface AttestationServerParts extends TestLimits {
  store: AttestationStore;
  inventory: NetBoxInventory;
  /** The inventory's NetBox client (the attestation account): the outbox delivers through it. */
  netbox: NetBox;
  issuer: Issuer;
  bootstrapTokens: BootstrapTokens;
  siteAuthoritiesDir: string;
  /** The manufacturer store holds the world's EK CA only: foreign TPMs do not chain. */
  ekCaDir: string;
  talosVersion: string;
  /** The site's Talos settings (default: siteConfigFixture(talosVersion)). */
  talosSite?: TalosSiteConfig;
  log: Logger;
  metrics: ReturnType<typeof createMetrics>;
  now: () => Date;
  /** The Workflow gate (the world's Tinkerbell objects). */
  workflows: TinkerbellWorkflowGate;
  /**
   * Intake confirmed → admission. The Tinkerbell world (tinkerbell/platformWorld.ts) passes talos-config-server's
   * real TinkerbellAdmission; absent, talos-config-server's JournalOnlyAdmission (what it does without
   * Tinkerbell effects): the world plays the handler's part and creates each mode's Workflow itself.
   */
  admission?: Admission;
  /** Renewal with runtime attestation (absent: the renewal endpoints refuse). */
  renewal?: RenewalSettings;
  /** The workload cluster whose Nodes quarantine cordons (absent: cordons are dropped). */
  workload?: Kube;
}

/** A second attestation server over the world's state, NetBox and CA with other limits (World.serverWith). */
export interface ExtraServer {
  baseUrl: string;
  transport: ServerTransport;
  close(): Promise<void>;
}

/** The attestation service and talos-config-server's app over `parts`, with the test settings. */
export function attestationServer(parts: AttestationServerParts): { service: AttestationService; app: ReturnType<typeof createApp>; outbox: OutboxWorker } {
  const { store, inventory, log, now } = parts;
  // what the steps commit for NetBox (and the token clean-ups), delivered by the server's own worker, as server.ts does
  const outbox = new OutboxWorker({
    store,
    delivery: new NetBoxOutboxDelivery({ nb: parts.netbox, inventory, bootstrapTokens: parts.bootstrapTokens, store, ...(parts.workload ? { quarantine: new KubeNodeQuarantine(parts.workload) } : {}) }),
    log,
    onDelivery: (kind, outcome) => parts.metrics.outboxDeliveries.inc({ kind, outcome }),
    intervalMs: 200,
    staleMs: parts.claimStaleMs ?? 60_000,
  });
  outbox.start();
  const service = testAttestationService(
    {
      store,
      inventory,
      journal: inventory,
      measuredBoot: new PolicyMeasuredBoot(parts.siteAuthoritiesDir),
      issuer: parts.issuer,
      bootstrapTokens: parts.bootstrapTokens,
      // without one, what talos-config-server does without Tinkerbell effects: the operator is asked to provision
      admission: parts.admission ?? new JournalOnlyAdmission(inventory, "the attestation world has no Tinkerbell effects"),
      workflows: parts.workflows,
      ekRoots: loadCaStore(parts.ekCaDir),
      outbox,
      now,
      ...(parts.renewal ? { renewal: parts.renewal } : {}),
    },
    parts.talosSite ?? siteConfigFixture(parts.talosVersion),
    parts,
  );
  const app = testConfigApp({ service, store, inventory, log, metrics: parts.metrics, outbox, limits: parts });
  return { service, app, outbox };
}

/** The site's Talos settings with the world's cluster as the workload cluster (WorldOptions.workloadCluster). */
function workloadSite(site: TalosSiteConfig, wc: WorldOptions["workloadCluster"], cp: ControlPlane): TalosSiteConfig {
  return wc ? { ...site, cluster: { ...site.cluster, endpoint: wc.endpoint, kubernetesCaCert: cp.caPem } } : site;
}

export async function startWorld(opts: WorldOptions): Promise<World> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-world-"));
  const specs = Object.entries(opts.machines ?? {});
  if (specs.some(([name]) => name === NODE)) throw new Error(`${NODE} is the world's own machine; ask for other nodes`);
  // Foreign TPMs have a CA of their own (startSwtpm's default), so they start with everything else; the world's
  // TPMs share the first TPM's CA directory and start one after another once it exists.
  const optionsOf = (s: MachineSpec) => (s.pcrBanks ? { ...swtpmOptions, pcrBanks: s.pcrBanks } : swtpmOptions);
  const foreign = new Map(specs.filter(([, s]) => s.manufacturer === "foreign").map(([name, s]) => [name, startSwtpm(optionsOf(s))] as const));
  const [fleet, tpm, cp] = await Promise.all([startFleet(opts.netbox), startSwtpm(swtpmOptions), startControlPlane(opts.workloadCluster ? { apiserverSans: opts.workloadCluster.apiserverSans } : {})]);
  await installTinkerbellCrds(cp);
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  const kube = kubeFromConfig(kc);
  const tinkerbellNamespace = "tinkerbell";
  await kube.core.createNamespace({ body: { metadata: { name: tinkerbellNamespace } } });
  const objects = new Objects(kube, tinkerbellNamespace);
  const tpms = new Map<string, SwtpmTcp>([[NODE, tpm]]);
  for (const [name, s] of specs) {
    tpms.set(name, s.manufacturer === "foreign" ? await (foreign.get(name) as Promise<SwtpmTcp>) : await startSwtpm({ ...optionsOf(s), caDir: tpm.caDir }));
  }

  // EK bindings from the certificates each TPM was manufactured with.
  const bindingsOf = async (t: SwtpmTcp, node: string) => {
    const one = async (index: number) => {
      const out = join(dir, `ek-${node}-${index.toString(16)}.crt`);
      await t.tpm2("nvread", [`0x${index.toString(16)}`, "-C", "o", "-o", out]);
      return ekBindingFromCertificate(readCertificate(new Uint8Array(readFileSync(out))).cert);
    };
    return { rsa: await one(t.ek.rsa.certIndex), ecc: await one(t.ek.ecc.certIndex) };
  };
  const bindings = new Map<string, { rsa: string; ecc: string }>();
  for (const [name, t] of tpms) bindings.set(name, await bindingsOf(t, name));
  // TPM 1.2 machines: the world's manufacturer (its CA directory) made their EK certificates too.
  const specs12 = Object.entries(opts.tpm12Machines ?? {});
  const tpms12 = new Map<string, Swtpm12>();
  for (const [name] of specs12) tpms12.set(name, await startSwtpm12({ caDir: tpm.caDir }));
  const bindings12 = new Map([...tpms12].map(([name, t]) => [name, ekBindingFromCertificate(readCertificate(new Uint8Array(readFileSync(t.ekCertFile))).cert)] as const));

  // The nodes file: the example rack, each machine's node approving its TPM's EKs.
  const nodes = parseYaml(readFileSync(EXAMPLE_NODES, "utf8")) as { nodes: Record<string, Record<string, unknown>> };
  const w1 = nodes.nodes[NODE];
  if (!w1) throw new Error(`example nodes file lacks ${NODE}`);
  specs.forEach(([name], i) => {
    if (nodes.nodes[name]) return;
    const n = 40 + i;
    nodes.nodes[name] = {
      ...structuredClone(w1),
      serial: `${String(w1["serial"])}-${n}`,
      switch: { ...(w1["switch"] as object), port: `ethernet1/1/${n}` },
      address: { cidr: `10.20.0.${n}/24`, gateway: "10.20.0.1" },
      bmc: { type: "redfish", address: `10.20.1.${n}`, credentials: `secret:tinkerbell/fleetd-bmc-${name}` },
    };
  });
  specs12.forEach(([name], i) => {
    const n = 60 + i;
    nodes.nodes[name] = {
      ...structuredClone(w1),
      serial: `${String(w1["serial"])}-${n}`,
      switch: { ...(w1["switch"] as object), port: `ethernet1/1/${n}` },
      address: { cidr: `10.20.0.${n}/24`, gateway: "10.20.0.1" },
      bmc: { type: "redfish", address: `10.20.1.${n}`, credentials: `secret:tinkerbell/fleetd-bmc-${name}` },
      tpm: "1.2",
      ek: [{ alg: "rsa", sha256: bindings12.get(name) as string }],
    };
  });
  const specOf = (name: string): MachineSpec => (name === NODE ? {} : (opts.machines?.[name] ?? {}));
  for (const [name, b] of bindings) {
    const chain = specOf(name).chain === false ? { chain: false } : {};
    (nodes.nodes[name] as Record<string, unknown>)["ek"] = [
      { alg: "rsa", sha256: b.rsa, ...chain },
      { alg: "ecc", sha256: b.ecc, ...chain },
    ];
  }
  const nodesFile = join(dir, "nodes.yaml");
  writeFileSync(nodesFile, stringify(nodes));
  const adminCfg = fleet.configFile(fleet.nb.authorization.replace(/^Bearer /, ""));
  const applyCfg = fleet.configFile(fleet.apply.token);
  for (const args of [["netbox", "setup", "--config", adminCfg], ["inventory", "apply", nodesFile, "--config", applyCfg]]) {
    const r = fleetd(args, {}, 120_000 + 3_000 * specs.length); // applying a big rack takes its time
    if (r.code !== 0) throw new Error(`fleetd ${args.join(" ")}: ${r.stderr}`);
  }

  // Each machine booted HookOS (its own way): the measurements are in its TPM and in its event log.
  const keys = await makeLabKeys();
  const site = opts.siteAuthoritiesDir ?? writeSiteAuthorities(join(dir, "site"), keys);
  const logs = new Map<string, Uint8Array>();
  for (const [name, t] of tpms) {
    const boot = bootScenario("hookos", keys, specOf(name).boot ?? {});
    const tc = new TpmClient(new TcpTransport(t.host, t.port));
    try {
      for (const e of boot.extends()) await pcrExtend(tc, e.pcr, [...e.digests].map(([hashAlg, digest]) => ({ hashAlg, digest })));
    } finally {
      await tc.close();
    }
    logs.set(name, boot.bytes());
  }
  const logs12 = new Map<string, Uint8Array>();
  for (const [name, t] of tpms12) {
    const boot = bootScenario("hookos", keys, { ...(opts.tpm12Machines?.[name]?.boot ?? {}), format: "sha1" });
    const tc = new Tpm12Client(new TcpTransport(t.host, t.port));
    try {
      for (const e of boot.extends()) {
        const d = e.digests.get(TPM_ALG.SHA1);
        if (d) await tc.extend(e.pcr, d);
      }
    } finally {
      await tc.close();
    }
    logs12.set(name, boot.bytes());
  }

  // The CA on a PKCS#11 token; every signature it makes from here on is counted.
  const hsm = await startSoftHsm([{ label: "fleetd-ca", pin: "123456", soPin: "12345678", keys: [{ label: "ca", id: "01", type: "ec-p256" }] }]);
  let clockOffset = 0;
  const now = () => new Date(Date.now() + clockOffset);
  const { signer, ca } = await createSoftHsmCa(hsm, { token: "fleetd-ca", key: "ca", commonName: "fleetd lab CA", notBefore: new Date(Date.now() - 3600_000), lifetimeDays: 365 });
  const counted = countingSigner(signer);

  const hooks: FaultHooks = {};
  const quarantines: string[] = [];
  const alerts: string[] = [];
  const store = new CountingStore(join(dir, "state.db"));
  const bootstrapTokens = new Map<string, string>();
  const attestationClient = fleet.client(fleet.handler.token);
  const inventory = new NetBoxInventory(attestationClient, {
    applyAccount: fleet.apply.username,
    attestationAccount: fleet.handler.username,
    roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" }, // the nodes file's defaults
  });
  const log = pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" });
  const metrics = createMetrics();
  const selectionProfiles = new ProfileCache(); // as talos-config-server: read again only when a profile file changes
  const parts: AttestationServerParts = {
    store,
    inventory,
    netbox: attestationClient,
    issuer: ((pki: PkiIssuer): Issuer => ({
      async issue(req) {
        const r = await pki.issue(req);
        await fire(hooks, "afterIssue");
        return r;
      },
    }))(bundleInMemoryIssuer({ signer: counted.signer, caPem: ca.pem, now, ...(opts.ldevidLifetimeDays ? { lifetimeDays: opts.ldevidLifetimeDays } : {}) })),
    // without a workload cluster (the default) the token Secrets are recorded, not created
    bootstrapTokens: ((t: BootstrapTokens): BootstrapTokens => ({
      async create(node, token, expiresAt) {
        await t.create(node, token, expiresAt);
        await fire(hooks, "afterBootstrapToken");
      },
      delete: (id) => t.delete(id),
    }))(
      opts.bootstrapTokens ??
        (opts.workloadCluster
          ? new KubeBootstrapTokens(kube)
          : { create: async (node, token) => void bootstrapTokens.set(token.id, node), delete: async (id) => bootstrapTokens.delete(id) }),
    ),
    siteAuthoritiesDir: site,
    ekCaDir: tpm.caDir,
    talosVersion: opts.talosVersion,
    ...(opts.talosSite || opts.workloadCluster ? { talosSite: workloadSite(opts.talosSite ?? siteConfigFixture(opts.talosVersion), opts.workloadCluster, cp) } : {}),
    log,
    metrics,
    now,
    workflows: new TinkerbellWorkflowGate(objects),
    renewal: {
      caBundle: () => certificatesFromPem(ca.pem),
      profiles: DEFAULT_RUNTIME_PROFILES,
      selection: (profile) => profileSelection(selectionProfiles.load(profile)),
      onQuarantine: (node) => void quarantines.push(node.name),
      onAlert: (node) => void alerts.push(node.name),
    },
    // the management cluster plays the workload cluster too: quarantine cordons its Nodes
    workload: kube,
  };
  const { app, outbox } = attestationServer(parts);
  const extraOutboxes: OutboxWorker[] = [];
  const server = createServer(app);
  await new Promise<void>((res) => server.listen(0, "127.0.0.1", res));
  const baseUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const rawTransport: ServerTransport = {
    async post(path, body) {
      const r = await fetch(baseUrl + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    },
  };
  // The NetBox handler's part (and tink-server's enrollment): the claimed Workflow exists for the claimed mode.
  const nodeBySerial = new Map(Object.entries(nodes.nodes).map(([name, n]) => [String(n["serial"]), name] as const));
  const ensureWorkflow = async (node: string, c: Pick<Claims, "workflow" | "mode" | "macs" | "bootMac">): Promise<void> => {
    const mac = c.bootMac ?? (c.macs[0] as string);
    const mine = await objects.list(WORKFLOW, `fleetd.io/owner=fleetd,fleetd.io/node=${node}`, WorkflowObject);
    const existing = await objects.get(WORKFLOW, c.workflow, WorkflowObject);
    const fits = existing && (c.mode === "intake" ? existing.spec.templateRef === templateName("intake") : existing.metadata.labels?.[LABEL_MODE] === c.mode);
    for (const o of mine) if (o.metadata.name !== c.workflow || !fits) await objects.delete(WORKFLOW, o.metadata.name, o.metadata.uid);
    if (existing && !fits && c.mode === "intake") await objects.delete(WORKFLOW, existing.metadata.name, existing.metadata.uid);
    if (fits) return;
    const base = { apiVersion: "tinkerbell.org/v1alpha1", kind: "Workflow" };
    await objects.create(
      WORKFLOW,
      c.mode === "intake"
        ? { ...base, metadata: { name: c.workflow, labels: { "tinkerbell.org/auto-enrollment": "true" } }, spec: { templateRef: templateName("intake"), hardwareMap: { device_1: mac } } }
        : {
            ...base,
            metadata: { name: c.workflow, labels: { ...ownedLabels(node), [LABEL_MODE]: c.mode } },
            spec: { templateRef: templateName(c.mode), hardwareRef: node, hardwareMap: { device_1: mac, fleetd_workflow: c.workflow } },
          },
    );
  };
  const withWorkflows = (t: ServerTransport): ServerTransport => ({
    async post(path, body) {
      if (path.endsWith("/challenge")) {
        const claims = (body as { claims?: Claims }).claims;
        const node = claims ? nodeBySerial.get(claims.serial) : undefined;
        if (claims && node && claims.workflow && claims.macs.length > 0) await ensureWorkflow(node, claims);
      }
      return t.post(path, body);
    },
  });
  const transport = withWorkflows(rawTransport);

  const machines: Record<string, WorldMachine> = {};
  [...tpms].forEach(([name, t], i) => {
    const node = nodes.nodes[name] as { serial: string; switch: { device: string; port: string } };
    const suffix = i.toString(16).padStart(2, "0");
    machines[name] = {
      node: name,
      tpm: t,
      bindings: bindings.get(name) as { rsa: string; ecc: string },
      // worker-1 keeps the values it always had; the others differ in the last byte.
      claims: (over: Partial<Claims> = {}): Claims => ({
        serial: node.serial,
        uuid: name === NODE ? "4c4c4544-0058-4b10-8032-b7c04f4d3332" : `4c4c4544-0058-4b10-8032-b7c04f4d33${suffix}`,
        macs: [name === NODE ? "b0:7b:25:00:00:21" : `b0:7b:25:00:01:${suffix}`],
        lldp: { chassisId: node.switch.device, portId: node.switch.port },
        mode: "intake",
        ...over,
        // the Workflow of the mode: tink-server's enrollment Workflow for intake, fleetd's otherwise
        workflow:
          over.workflow ??
          ((over.mode ?? "intake") === "intake"
            ? enrollmentWorkflowName(over.bootMac ?? ((over.macs ?? [name === NODE ? "b0:7b:25:00:00:21" : `b0:7b:25:00:01:${suffix}`])[0] as string))
            : `fleetd-${name}-${over.mode}-world`),
      }),
      client: () => new TpmClient(new TcpTransport(t.host, t.port)),
      eventLog: logs.get(name) as Uint8Array,
    };
  });
  const tpm12: Record<string, World12Machine> = {};
  [...tpms12].forEach(([name, t], i) => {
    const node = nodes.nodes[name] as { serial: string; switch: { device: string; port: string } };
    const suffix = (0x80 + i).toString(16);
    const mac = `b0:7b:25:00:12:${suffix}`;
    tpm12[name] = {
      node: name,
      tpm: t,
      binding: bindings12.get(name) as string,
      claims: (over: Partial<Claims> = {}): Claims => ({
        serial: node.serial,
        uuid: `4c4c4544-0058-4b10-8032-b7c04f4d12${suffix}`,
        macs: [mac],
        bootMac: mac,
        lldp: { chassisId: node.switch.device, portId: node.switch.port },
        mode: "intake",
        ...over,
        workflow: over.workflow ?? ((over.mode ?? "intake") === "intake" ? enrollmentWorkflowName(over.bootMac ?? mac) : `fleetd-${name}-${over.mode}-world`),
      }),
      client: () => new Tpm12Client(new TcpTransport(t.host, t.port)),
      secrets: { ownerAuth: t.ownerAuth, srkAuth: t.srkAuth },
      eventLog: logs12.get(name) as Uint8Array,
    };
  });
  const main = machines[NODE] as WorldMachine;
  return {
    fleet,
    tpm,
    hsm,
    store,
    inventory,
    netbox: attestationClient,
    talosVersion: opts.talosVersion,
    outbox,
    server,
    baseUrl,
    bindings: main.bindings,
    claims: main.claims,
    client: main.client,
    transport,
    eventLog: main.eventLog,
    dir,
    machines,
    tpm12,
    admin: fleet.client(fleet.nb.authorization.replace(/^Bearer /, "")),
    cp,
    kube,
    tinkerbellNamespace,
    rawTransport,
    withWorkflows,
    ensureWorkflow,
    deviceId: async (name) => {
      const id = await deviceIdByName(fleet.client(fleet.nb.authorization.replace(/^Bearer /, "")), name);
      if (id === undefined) throw new Error(`no single device named ${name}`);
      return id;
    },
    async serverWith(limits) {
      const more = attestationServer({ ...parts, ...limits, metrics: createMetrics() });
      extraOutboxes.push(more.outbox);
      const extra = createServer(more.app);
      await new Promise<void>((res) => extra.listen(0, "127.0.0.1", res));
      const url = `http://127.0.0.1:${(extra.address() as { port: number }).port}`;
      return {
        baseUrl: url,
        transport: withWorkflows({
          async post(path, body) {
            const r = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
            return { status: r.status, body: await r.json() };
          },
        }),
        close: () => new Promise<void>((res) => extra.close(() => res())),
      };
    },
    liveTokens: () => new Map(bootstrapTokens),
    signatures: counted.signatures,
    installCodesIssued: () => store.installCodes,
    hooks,
    lab: keys,
    caPem: ca.pem,
    siteAuthoritiesDir: site,
    async reboot(name, profile, options = {}) {
      const t = tpms.get(name);
      if (!t) throw new Error(`no machine ${name}`);
      // An orderly shutdown first: a TPM counts an unorderly reset against its dictionary-attack budget, and
      // a few of them lock DA-protected keys out (TPM_RC_LOCKOUT).
      await t.tpm2("shutdown", ["-c"]);
      execFileSync("swtpm_ioctl", ["--tcp", `127.0.0.1:${t.ctrlPort}`, "-i"], { timeout: 10_000 });
      await t.tpm2("startup", ["-c"]);
      const boot = bootScenario(profile, keys, options);
      const tc = new TpmClient(new TcpTransport(t.host, t.port));
      try {
        const expected = new Map<number, Uint8Array>();
        for (const e of boot.extends()) {
          await pcrExtend(tc, e.pcr, [...e.digests].map(([hashAlg, digest]) => ({ hashAlg, digest })));
          const d = e.digests.get(TPM_ALG.SHA256);
          if (d) expected.set(e.pcr, new Uint8Array(createHash("sha256").update(expected.get(e.pcr) ?? new Uint8Array(32)).update(d).digest()));
        }
        // the machine's PCRs now hold exactly this boot (a reset that did not happen would show here, not later)
        const got = (await pcrRead(tc, [{ hash: TPM_ALG.SHA256, pcrs: [...expected.keys()] }])).values.get(TPM_ALG.SHA256);
        for (const [pcr, v] of expected) {
          if (Buffer.compare(Buffer.from(got?.get(pcr) ?? []), Buffer.from(v)) !== 0) throw new Error(`${name}: after the reboot PCR ${pcr} does not hold the ${profile} boot`);
        }
      } finally {
        await tc.close();
      }
      return boot.bytes();
    },
    advanceClock: (ms) => void (clockOffset += ms),
    quarantines,
    alerts,
    async stop() {
      await new Promise<void>((res) => server.close(() => res()));
      for (const o of [outbox, ...extraOutboxes]) await o.stop();
      await signer.close();
      await store.close();
      hsm.close();
      // The world's TPMs share the first one's CA directory: stop the others first.
      for (const t of tpms12.values()) await t.stop();
      for (const [name, t] of [...tpms].reverse()) if (name !== NODE) await t.stop();
      await tpm.stop();
      await fleet.nb.stop();
      await cp.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
