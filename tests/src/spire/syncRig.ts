/**
 * The SPIRE side of the attestation world, shared by the real-platform SPIRE tests: worker-1's LDevID files as
 * tink-action writes them, a real spire-server (the shipped server.conf) and spire-agent (tpm_devid over a Unix
 * socket to worker-1's swtpm), and fleetd's sync — netbox-script (NetBox's webhook target) publishing
 * spire-nodes.json and spire-plugin reconciling it into SPIRE.
 */
import { createHash, X509Certificate } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pino } from "pino";
import { certificatesFromPem } from "@fleetd/platform/pki";
import { serverId, type SpireServerClient } from "@fleetd/platform/spire";
import { startHandler, toHandlerConfig, type Handler } from "@fleetd/netbox-script";
import { parseSpirePluginConfig, startSpirePlugin, type SpirePlugin } from "@fleetd/spire-plugin";
import { writeSuccess } from "@fleetd/tink-action/outputs";
import { exampleNodesText } from "../netbox/fixture.js";
import { issued, type runHonest } from "../attestation/machine.js";
import { NODE, type World } from "../attestation/world.js";
import { pollValue } from "../harness/ports.js";
import { startSpireAgent, startSpireServer, type DevidFiles, type SpireAgent, type SpireServer } from "../harness/spire.js";
import { tpmUnixSocket, type TpmUnixSocket } from "../harness/tpmUnixSocket.js";

export const sha1 = (der: Uint8Array) => createHash("sha1").update(der).digest("hex");
export const cnOf = (x: X509Certificate, field: "subject" | "issuer") => /(?:^|\n)CN=([^\n]+)/.exec(x[field])?.[1] ?? "";
const logger = () => pino({ level: process.env["FLEETD_TEST_LOG"] ?? "silent" });

export interface SpireStack {
  server: SpireServer;
  spire: SpireServerClient;
  door: TpmUnixSocket;
  agent: SpireAgent;
  devidFiles: DevidFiles;
  /** worker-1's LDevID leaf, and fleetd's CA (the world has one). */
  leaf: X509Certificate;
  leafDer: Uint8Array;
  caDer: Uint8Array;
  /** fleetd's CA bundle as a PEM file (the server's devid_ca_path). */
  devidCa: string;
}

/**
 * worker-1's provision result written where the shipped agent.conf reads it, a spire-server and a spire-agent that
 * attests with it (through worker-1's swtpm). The caller stops them ({@link stopSpireStack}).
 */
export async function startSpireStack(w: World, dir: string, provisioned: Awaited<ReturnType<typeof runHonest>>): Promise<SpireStack> {
  const i = issued(provisioned);
  const devidDir = join(dir, "devid");
  writeSuccess(devidDir, provisioned, { workflow: "e2e", claims: w.claims({ mode: "provision" }), attempts: 1, tpm: "swtpm" });
  const leafDer = i.ldevid.certificate;
  const bundle = certificatesFromPem(i.caBundle, "CA bundle");
  if (bundle.length !== 1) throw new Error(`the world has one CA, the bundle holds ${bundle.length}`);
  const devidCa = join(dir, "devid-ca-bundle.pem");
  writeFileSync(devidCa, i.caBundle);
  const server = await startSpireServer({ devidCaPath: devidCa, endorsementCaPath: w.tpm.caCerts.issuer });
  const spire = server.client();
  const door = await tpmUnixSocket(join(dir, "tpm.sock"), { host: w.tpm.host, port: w.tpm.port });
  const devidFiles = { cert: join(devidDir, "ldevid.crt"), pub: join(devidDir, "ldevid.pub"), priv: join(devidDir, "ldevid.priv") };
  const agent = await startSpireAgent(server, { tpmSocketPath: door.path, devid: devidFiles });
  return { server, spire, door, agent, devidFiles, leaf: new X509Certificate(Buffer.from(leafDer)), leafDer, caDer: bundle[0] as Uint8Array, devidCa };
}

export async function stopSpireStack(s: Partial<SpireStack> | undefined): Promise<void> {
  s?.spire?.close();
  await s?.agent?.stop();
  await s?.door?.close();
  await s?.server?.stop();
}

export interface Sync {
  handler: Handler;
  plugin: SpirePlugin;
  list: { file: string };
  status: { file: string };
  stop(): Promise<void>;
}

/** netbox-script (the world's handler port, NetBox's webhook target) publishing spire-nodes.json under `dir`; spire-plugin watching it. */
export async function startSync(w: World, dir: string, stack: Pick<SpireStack, "server" | "devidCa">): Promise<Sync> {
  const nodesFile = join(dir, "handler-nodes.yaml");
  writeFileSync(nodesFile, exampleNodesText());
  const list = { file: join(dir, "spire-nodes", "spire-nodes.json") };
  const status = { file: join(dir, "spire-nodes", "spire-sync-status.json") };
  const td = stack.server.trustDomain;
  const handler = await startHandler(
    toHandlerConfig(w.fleet.config(w.fleet.handler.token, {
      handler: {
        listen: { host: "127.0.0.1", port: w.fleet.handlerPort }, stateDir: join(dir, "handler-state"), nodesFile, reconcileIntervalSeconds: 3600,
        spireNodes: { trustDomain: td, caBundle: stack.devidCa, list, status },
      },
    })),
    { logger: logger() },
  );
  const plugin = await startSpirePlugin(parseSpirePluginConfig({ trustDomain: td, devidCaPath: stack.devidCa, socketPath: stack.server.socketPath, list, status, intervalSeconds: 3600, listen: { host: "127.0.0.1", port: 0 } }), { logger: logger() });
  return {
    handler, plugin, list, status,
    async stop() {
      await plugin.stop();
      await handler.stop();
    },
  };
}

/** worker-1's node entry (the sync's), once SPIRE holds it. */
export function nodeEntries(stack: Pick<SpireStack, "server" | "spire">, name = NODE) {
  return stack.spire.listEntries({ bySpiffeId: `spiffe://${stack.server.trustDomain}/node/${name}`, byParentId: serverId(stack.server.trustDomain) });
}

/** What the sync published and did last: for a poll's failure message. */
export function syncContext(sync: Sync | undefined): string {
  const last = sync?.handler.spireNodes?.last;
  return JSON.stringify({ published: last ? { nodes: last.list.nodes, excluded: last.excluded } : "nothing", sync: sync?.plugin.sync.last ?? "no pass" });
}

export { pollValue };
