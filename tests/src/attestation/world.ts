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
 */
import { createServer, type Server } from "node:http";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import pino, { type Logger } from "pino";
import type { internalRouter } from "@fleetd/talos-config-server/ha/internalApi";
import { parse as parseYaml, stringify } from "yaml";
import { ekBindingFromCertificate } from "@fleetd/shared/ek/binding";
import { readCertificate } from "@fleetd/shared/ek/certificateInput";
import { loadCaStore } from "@fleetd/shared/ek/store";
import type { NetBox } from "@fleetd/shared/netbox/client";
import { NetBoxInventory } from "@fleetd/shared/netbox/attestationInventory";
import { addCa, emptyBundleState } from "@fleetd/shared/pki/bundle";
import type { BundleState } from "@fleetd/shared/pki/bundleState";
import type { CertificateSigner } from "@fleetd/shared/pki/signer";
import type { ServerTransport } from "@fleetd/shared/protocol/client/attest";
import type { Claims } from "@fleetd/shared/protocol/messages";
import { PkiIssuer } from "@fleetd/shared/protocol/server/adapters/issuer";
import { PolicyMeasuredBoot } from "@fleetd/shared/protocol/server/adapters/measuredBoot";
import { TalosRenderer } from "@fleetd/shared/protocol/server/adapters/renderer";
import { type BootstrapTokens, DEFAULT_MODE_GATES, type Issuer } from "@fleetd/shared/protocol/server/deps";
import type { AttestationStore } from "@fleetd/shared/state/store";
import { AttestationService } from "@fleetd/shared/protocol/server/service";
import type { InstallCodeRecord } from "@fleetd/shared/state/store";
import { SqliteAttestationStore } from "@fleetd/shared/state/sqliteStore";
import { bootScenario, makeLabKeys, writeSiteAuthorities, type LabKeys, type ScenarioOptions } from "@fleetd/shared/testing/bootScenarios";
import { siteConfigFixture } from "@fleetd/shared/talos/config/testkit";
import { pcrExtend, TcpTransport, TpmClient } from "@fleetd/shared/tpmclient/index";
import { createApp } from "@fleetd/talos-config-server/app";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { FailureLimiter } from "@fleetd/talos-config-server/rateLimit";
import { EXAMPLE_NODES, fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { createSoftHsmCa, startSoftHsm, type SoftHsm } from "../harness/softhsm.js";
import { startSwtpm, type PcrBank, type SwtpmTcp } from "../harness/swtpm.js";

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
  /** Further machines by node name (not worker-1, which always exists). */
  machines?: Record<string, MachineSpec>;
  /** Where the rendered configs' bootstrap token Secrets go (default: recorded in memory, no cluster). */
  bootstrapTokens?: BootstrapTokens;
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
  /** NetBox as its admin (for edits an operator makes, and for reading journals). */
  admin: NetBox;
  /** Signatures the CA key has made since the world started (the CA certificate excluded). */
  signatures: () => number;
  /** Install codes the server has stored since the world started. */
  installCodesIssued: () => number;
  lab: LabKeys;
  /** The CA certificate (PEM) whose key is on the SoftHSM token "fleetd-ca", key "ca". */
  caPem: string;
  /** Site Secure Boot authorities of the HookOS boot (the policy's `site:` sets). */
  siteAuthoritiesDir: string;
  stop(): Promise<void>;
}

/** The SQLite store, counting the install codes put into it. */
class CountingStore extends SqliteAttestationStore {
  installCodes = 0;
  override async putInstallCode(r: Omit<InstallCodeRecord, "claimedBy" | "claimedAt">): Promise<void> {
    this.installCodes++;
    return super.putInstallCode(r);
  }
}

const swtpmOptions = { pcrBanks: ["sha1", "sha256"] } as const;

/** What a test server is made of besides the world's fixed parts (the attestation tests and the HA replicas). */
export interface AttestationServerParts {
  store: AttestationStore;
  inventory: NetBoxInventory;
  issuer: Issuer;
  bootstrapTokens: BootstrapTokens;
  siteAuthoritiesDir: string;
  /** The manufacturer store holds the world's EK CA only: foreign TPMs do not chain. */
  ekCaDir: string;
  talosVersion: string;
  log: Logger;
  metrics: ReturnType<typeof createMetrics>;
  now: () => Date;
  /** HA: the leader's internal endpoint. */
  internal?: ReturnType<typeof internalRouter>;
}

/** The attestation service and talos-config-server's app over `parts`, with the test settings. */
export function attestationServer(parts: AttestationServerParts): { service: AttestationService; app: ReturnType<typeof createApp> } {
  const { store, inventory, log, now } = parts;
  const service = new AttestationService({
    store,
    inventory,
    journal: inventory,
    measuredBoot: new PolicyMeasuredBoot(parts.siteAuthoritiesDir),
    issuer: parts.issuer,
    renderer: new TalosRenderer(siteConfigFixture(parts.talosVersion), 24 * 3600_000, now),
    bootstrapTokens: parts.bootstrapTokens,
    admission: { admit: async () => undefined },
    ekRoots: loadCaStore(parts.ekCaDir),
    settings: { sessionTtlMs: 5 * 60_000, installCodeTtlMs: 2 * 3600_000, provisioningProfile: "hookos", gates: DEFAULT_MODE_GATES, allowExpiredEkCertificates: false },
    now,
    random: (n) => new Uint8Array(randomBytes(n)),
  });
  const app = createApp({
    service,
    store,
    limiter: new FailureLimiter(5, 60_000),
    log,
    metrics: parts.metrics,
    delivered: (node) => inventory.markActive(node),
    now: () => Date.now(),
    staleClaimMs: 60_000,
    bodyLimit: "2mb",
    ...(parts.internal ? { internal: parts.internal } : {}),
  });
  return { service, app };
}

export async function startWorld(opts: WorldOptions): Promise<World> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-world-"));
  const specs = Object.entries(opts.machines ?? {});
  if (specs.some(([name]) => name === NODE)) throw new Error(`${NODE} is the world's own machine; ask for other nodes`);
  // Foreign TPMs have a CA of their own (startSwtpm's default), so they start with everything else; the world's
  // TPMs share the first TPM's CA directory and start one after another once it exists.
  const optionsOf = (s: MachineSpec) => (s.pcrBanks ? { ...swtpmOptions, pcrBanks: s.pcrBanks } : swtpmOptions);
  const foreign = new Map(specs.filter(([, s]) => s.manufacturer === "foreign").map(([name, s]) => [name, startSwtpm(optionsOf(s))] as const));
  const [fleet, tpm] = await Promise.all([startFleet(), startSwtpm(swtpmOptions)]);
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
      bmc: { type: "redfish", address: `10.20.1.${n}`, credentials: `vault:kv/fleetd/bmc/${name}` },
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
    const r = fleetd(args);
    if (r.code !== 0) throw new Error(`fleetd ${args.join(" ")}: ${r.stderr}`);
  }

  // Each machine booted HookOS (its own way): the measurements are in its TPM and in its event log.
  const keys = await makeLabKeys();
  const site = writeSiteAuthorities(join(dir, "site"), keys);
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

  // The CA on a PKCS#11 token; every signature it makes from here on is counted.
  const hsm = await startSoftHsm([{ label: "fleetd-ca", pin: "123456", soPin: "12345678", keys: [{ label: "ca", id: "01", type: "ec-p256" }] }]);
  const now = () => new Date();
  const { signer, ca } = await createSoftHsmCa(hsm, { token: "fleetd-ca", key: "ca", commonName: "fleetd lab CA", notBefore: new Date(Date.now() - 3600_000), lifetimeDays: 365 });
  let signatures = 0;
  const countingSigner: CertificateSigner = {
    publicKey: signer.publicKey,
    signatureAlgorithm: signer.signatureAlgorithm,
    sign: (data) => {
      signatures++;
      return signer.sign(data);
    },
  };
  let bundle: BundleState = addCa(emptyBundleState(), ca.pem, new Date(Date.now() - 3600_000));

  const store = new CountingStore(join(dir, "state.db"));
  const bootstrapTokens = new Map<string, string>();
  const inventory = new NetBoxInventory(fleet.client(fleet.handler.token), { applyAccount: fleet.apply.username, roleSlugs: { worker: "worker", "control-plane": "control-plane" } });
  const log = pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" });
  const metrics = createMetrics();
  const { service, app } = attestationServer({
    store,
    inventory,
    issuer: new PkiIssuer({ signer: countingSigner, state: () => bundle, save: async (s) => void (bundle = s), lifetimeDays: 30, now }),
    // without a workload cluster (the default) the token Secrets are recorded, not created
    bootstrapTokens: opts.bootstrapTokens ?? { create: async (node, token) => void bootstrapTokens.set(token.id, node), delete: async (id) => bootstrapTokens.delete(id) },
    siteAuthoritiesDir: site,
    ekCaDir: tpm.caDir,
    talosVersion: opts.talosVersion,
    log,
    metrics,
    now,
  });
  const server = createServer(app);
  await new Promise<void>((res) => server.listen(0, "127.0.0.1", res));
  const baseUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const transport: ServerTransport = {
    async post(path, body) {
      const r = await fetch(baseUrl + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    },
  };

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
        workflow: `wf-${name}`,
        ...over,
      }),
      client: () => new TpmClient(new TcpTransport(t.host, t.port)),
      eventLog: logs.get(name) as Uint8Array,
    };
  });
  const main = machines[NODE] as WorldMachine;
  return {
    fleet,
    tpm,
    hsm,
    store,
    inventory,
    server,
    baseUrl,
    bindings: main.bindings,
    claims: main.claims,
    client: main.client,
    transport,
    eventLog: main.eventLog,
    dir,
    machines,
    admin: fleet.client(fleet.nb.authorization.replace(/^Bearer /, "")),
    signatures: () => signatures,
    installCodesIssued: () => store.installCodes,
    lab: keys,
    caPem: ca.pem,
    siteAuthoritiesDir: site,
    async stop() {
      await new Promise<void>((res) => server.close(() => res()));
      await signer.close();
      await store.close();
      hsm.close();
      // The world's TPMs share the first one's CA directory: stop the others first.
      for (const [name, t] of [...tpms].reverse()) if (name !== NODE) await t.stop();
      await tpm.stop();
      await fleet.nb.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
