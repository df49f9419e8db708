/**
 * The attestation world for end-to-end tests and the lab, all real and on loopback: NetBox (with fleetd's
 * setup and a nodes file applied), a software TPM manufactured with EK certificates whose PCRs carry a HookOS
 * boot, a CA key in SoftHSM2 behind PKCS#11, the attestation server (express) with its SQLite state, and
 * fleetd's TPM client playing the machine.
 */
import { createServer, type Server } from "node:http";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import pino from "pino";
import { parse as parseYaml, stringify } from "yaml";
import { ekBindingFromCertificate } from "@fleetd/shared/ek/binding";
import { readCertificate } from "@fleetd/shared/ek/certificateInput";
import { loadCaStore } from "@fleetd/shared/ek/store";
import { NetBoxInventory } from "@fleetd/shared/netbox/attestationInventory";
import { addCa, emptyBundleState } from "@fleetd/shared/pki/bundle";
import type { BundleState } from "@fleetd/shared/pki/bundleState";
import type { ServerTransport } from "@fleetd/shared/protocol/client/attest";
import type { Claims } from "@fleetd/shared/protocol/messages";
import { PkiIssuer } from "@fleetd/shared/protocol/server/adapters/issuer";
import { PolicyMeasuredBoot } from "@fleetd/shared/protocol/server/adapters/measuredBoot";
import { TalosRenderer } from "@fleetd/shared/protocol/server/adapters/renderer";
import { DEFAULT_MODE_GATES } from "@fleetd/shared/protocol/server/deps";
import { AttestationService } from "@fleetd/shared/protocol/server/service";
import { SqliteAttestationStore } from "@fleetd/shared/state/sqliteStore";
import { bootScenario, makeLabKeys, writeSiteAuthorities } from "@fleetd/shared/testing/bootScenarios";
import { siteConfigFixture } from "@fleetd/shared/talos/config/testkit";
import { pcrExtend, TcpTransport, TpmClient } from "@fleetd/shared/tpmclient/index";
import { createApp } from "@fleetd/talos-config-server/app";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { FailureLimiter } from "@fleetd/talos-config-server/rateLimit";
import { EXAMPLE_NODES, fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { createSoftHsmCa, startSoftHsm, type SoftHsm } from "../harness/softhsm.js";
import { startSwtpm, type SwtpmTcp } from "../harness/swtpm.js";

export const NODE = "worker-1";

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
  /** The CA certificate (PEM) whose key is on the SoftHSM token "fleetd-ca", key "ca". */
  caPem: string;
  /** Site Secure Boot authorities of the HookOS boot (the policy's `site:` sets). */
  siteAuthoritiesDir: string;
  stop(): Promise<void>;
}

export async function startWorld(opts: { talosVersion: string }): Promise<World> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-world-"));
  const [fleet, tpm] = await Promise.all([startFleet(), startSwtpm({ pcrBanks: ["sha1", "sha256"] })]);
  // EK bindings from the certificates the TPM was manufactured with.
  const bindingOf = async (index: number) => {
    const out = join(dir, `ek-${index.toString(16)}.crt`);
    await tpm.tpm2("nvread", [`0x${index.toString(16)}`, "-C", "o", "-o", out]);
    return ekBindingFromCertificate(readCertificate(new Uint8Array(readFileSync(out))).cert);
  };
  const bindings = { rsa: await bindingOf(tpm.ek.rsa.certIndex), ecc: await bindingOf(tpm.ek.ecc.certIndex) };

  // The nodes file: the example rack, with worker-1's EKs being this TPM's.
  const nodes = parseYaml(readFileSync(EXAMPLE_NODES, "utf8")) as { nodes: Record<string, Record<string, unknown>> };
  const w1 = nodes.nodes[NODE];
  if (!w1) throw new Error(`example nodes file lacks ${NODE}`);
  w1["ek"] = [
    { alg: "rsa", sha256: bindings.rsa },
    { alg: "ecc", sha256: bindings.ecc },
  ];
  const nodesFile = join(dir, "nodes.yaml");
  writeFileSync(nodesFile, stringify(nodes));
  const adminCfg = fleet.configFile(fleet.nb.authorization.replace(/^Bearer /, ""));
  const applyCfg = fleet.configFile(fleet.apply.token);
  for (const args of [["netbox", "setup", "--config", adminCfg], ["inventory", "apply", nodesFile, "--config", applyCfg]]) {
    const r = fleetd(args);
    if (r.code !== 0) throw new Error(`fleetd ${args.join(" ")}: ${r.stderr}`);
  }

  // The machine booted HookOS: its measurements are in the TPM and in the event log.
  const keys = await makeLabKeys();
  const site = writeSiteAuthorities(join(dir, "site"), keys);
  const boot = bootScenario("hookos", keys);
  const tc = new TpmClient(new TcpTransport(tpm.host, tpm.port));
  for (const e of boot.extends()) await pcrExtend(tc, e.pcr, [...e.digests].map(([hashAlg, digest]) => ({ hashAlg, digest })));
  await tc.close();

  // The CA on a PKCS#11 token.
  const hsm = await startSoftHsm([{ label: "fleetd-ca", pin: "123456", soPin: "12345678", keys: [{ label: "ca", id: "01", type: "ec-p256" }] }]);
  const now = () => new Date();
  const { signer, ca } = await createSoftHsmCa(hsm, { token: "fleetd-ca", key: "ca", commonName: "fleetd lab CA", notBefore: new Date(Date.now() - 3600_000), lifetimeDays: 365 });
  let bundle: BundleState = addCa(emptyBundleState(), ca.pem, new Date(Date.now() - 3600_000));

  const store = new SqliteAttestationStore(join(dir, "state.db"));
  const inventory = new NetBoxInventory(fleet.client(fleet.handler.token), { applyAccount: fleet.apply.username, roleSlugs: { worker: "worker", "control-plane": "control-plane" } });
  const log = pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" });
  const metrics = createMetrics();
  const service = new AttestationService({
    store,
    inventory,
    journal: inventory,
    measuredBoot: new PolicyMeasuredBoot(site),
    issuer: new PkiIssuer({ signer, state: () => bundle, save: async (s) => void (bundle = s), lifetimeDays: 30, now }),
    renderer: new TalosRenderer(siteConfigFixture(opts.talosVersion), 24 * 3600_000, now),
    admission: { admit: async () => undefined },
    ekRoots: loadCaStore(tpm.caDir),
    settings: { sessionTtlMs: 5 * 60_000, installCodeTtlMs: 2 * 3600_000, provisioningProfile: "hookos", gates: DEFAULT_MODE_GATES, allowExpiredEkCertificates: false },
    now,
    random: (n) => new Uint8Array(randomBytes(n)),
  });
  const app = createApp({
    service,
    store,
    limiter: new FailureLimiter(5, 60_000),
    log,
    metrics,
    delivered: (node) => inventory.markActive(node),
    now: () => Date.now(),
    staleClaimMs: 60_000,
    bodyLimit: "2mb",
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
  const node = nodes.nodes[NODE] as { serial: string; switch: { device: string; port: string } };
  const claims = (over: Partial<Claims> = {}): Claims => ({
    serial: node.serial,
    uuid: "4c4c4544-0058-4b10-8032-b7c04f4d3332",
    macs: ["b0:7b:25:00:00:21"],
    lldp: { chassisId: node.switch.device, portId: node.switch.port },
    mode: "intake",
    workflow: `wf-${NODE}`,
    ...over,
  });
  return {
    fleet,
    tpm,
    hsm,
    store,
    inventory,
    server,
    baseUrl,
    bindings,
    claims,
    client: () => new TpmClient(new TcpTransport(tpm.host, tpm.port)),
    transport,
    eventLog: boot.bytes(),
    dir,
    caPem: ca.pem,
    siteAuthoritiesDir: site,
    async stop() {
      await new Promise<void>((res) => server.close(() => res()));
      await signer.close();
      await store.close();
      hsm.close();
      await tpm.stop();
      await fleet.nb.stop();
    },
  };
}
