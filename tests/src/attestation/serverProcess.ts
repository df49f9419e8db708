/**
 * talos-config-server as an operator runs it, over the attestation world: `node talos-config-server/dist/main.js
 * --config FILE` in a process of its own, HTTPS with a certificate made by openssl here, the CA key on the
 * world's SoftHSM2 token (PIN by environment), the NetBox token by environment, a SQLite state file, the
 * world's NetBox, Kubernetes (management and workload) and site authorities. Used by the process suites
 * (server.it: start-up and configuration; restart.it: killed at exact points and restarted on its state).
 */
import { strict as assert } from "node:assert";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import { stringify } from "yaml";
import { addCa, emptyBundleState, serializeBundleState } from "@fleetd/platform/pki";
import type { ServerTransport } from "@fleetd/platform/protocol/client";
import { siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { ManagedProcess } from "../harness/managedProcess.js";
import { openssl } from "../harness/openssl.js";
import { freePort, waitFor } from "../harness/ports.js";
import { GROUP, repoRoot } from "../netbox/fixture.js";
import type { World } from "./world.js";

export const MAIN = join(repoRoot, "talos-config-server/dist/main.js");

/** An HTTPS request that trusts exactly `ca` (the server's self-signed certificate). */
export function httpsRequest(target: string, opts: { method?: string; body?: string; ca: string }): Promise<{ status: number; contentType: string; text: string; headers: Record<string, string | string[] | undefined> }> {
  return new Promise((resolve, reject) => {
    const req = request(target, { method: opts.method ?? "GET", ca: opts.ca, agent: false /* a connection each: no race with the server closing an idle keep-alive socket */, headers: opts.body ? { "content-type": "application/json" } : {} }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, contentType: String(res.headers["content-type"] ?? ""), text: Buffer.concat(chunks).toString("utf8"), headers: res.headers }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(opts.body);
  });
}

export function makeCert(dir: string, name: string, san: string): { cert: string; key: string } {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  const r = openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", `/CN=${name}`, "-addext", `subjectAltName=${san}`]);
  assert.equal(r.status, 0, r.stderr);
  return { cert, key };
}

export interface ServerProcess {
  url: string;
  /** The server certificate (PEM): the only CA its clients trust. */
  certPem: string;
  dir: string;
  bundleFile: string;
  /** The configuration every process of this harness starts with; writeConfig derives files from it. */
  baseConfig: Record<string, unknown>;
  configFile: string;
  /** The environment the processes get (NetBox token; SoftHSM2's from this process). */
  env: NodeJS.ProcessEnv;
  proc: ManagedProcess;
  /** A configuration file: the base with `over` applied. */
  writeConfig(over?: (c: Record<string, unknown>) => void): string;
  /** Start a process (after the previous one is gone) with extra environment, and wait for /healthz. */
  start(extraEnv?: NodeJS.ProcessEnv): Promise<ManagedProcess>;
  /** The server over HTTPS with the world's Workflows (the handler's part); network errors are thrown. */
  transport(): ServerTransport;
  stop(): Promise<void>;
}

let started = 0;

export async function startServerProcess(w: World, opts: { name?: string; over?: (c: Record<string, unknown>) => void; env?: NodeJS.ProcessEnv } = {}): Promise<ServerProcess> {
  const dir = join(w.dir, opts.name ?? "server");
  mkdirSync(dir);
  const tls = makeCert(dir, "talos-config-server.test", "IP:127.0.0.1");
  const certPem = readFileSync(tls.cert, "utf8");
  const bundleFile = join(dir, "ca-bundle.json");
  writeFileSync(bundleFile, serializeBundleState(addCa(emptyBundleState(), w.caPem, new Date(Date.now() - 3600_000))));
  const talosSite = join(dir, "talos-site.yaml");
  writeFileSync(talosSite, stringify(siteConfigFixture(w.talosVersion)));
  const port = await freePort();
  const url = `https://127.0.0.1:${port}`;
  const baseConfig: Record<string, unknown> = {
    netbox: { url: w.fleet.nb.url },
    accounts: { apply: w.fleet.apply.username, handler: w.fleet.handler.username },
    // the management cluster: the server's Workflow gate reads the claimed Workflows there
    kubernetes: { management: { kubeconfig: w.cp.kubeconfig, namespace: w.tinkerbellNamespace }, workload: { kubeconfig: w.cp.kubeconfig } },
    authorizedGroup: GROUP,
    server: {
      listen: { host: "127.0.0.1", port },
      tls: { certFile: tls.cert, keyFile: tls.key },
      stateDb: join(dir, "state", "state.db"),
      roleSlugs: { worker: "worker", "control-plane": "control-plane" },
      ekRootsDir: w.tpm.caDir,
      siteAuthoritiesDir: w.siteAuthoritiesDir,
      ca: { signer: w.hsm.signerConfig("fleetd-ca", "ca"), bundleStateFile: bundleFile, ldevidLifetimeDays: 7 },
      talos: { siteFile: talosSite },
      logLevel: "info",
    },
  };
  opts.over?.(baseConfig);
  let n = 0;
  const writeConfig = (over: (c: Record<string, unknown>) => void = () => undefined): string => {
    const c = structuredClone(baseConfig);
    over(c);
    const p = join(dir, `config-${++n}.yaml`);
    writeFileSync(p, stringify(c));
    return p;
  };
  const configFile = writeConfig();
  // SOFTHSM2_CONF and the PIN variable are in this process's environment (the harness set them)
  const env: NodeJS.ProcessEnv = { ...process.env, FLEETD_NETBOX_TOKEN: w.fleet.handler.token, FLEETD_CONFIG: "", FLEETD_FAILPOINTS: "", ...opts.env };
  const sp: ServerProcess = {
    url,
    certPem,
    dir,
    bundleFile,
    baseConfig,
    configFile,
    env,
    proc: undefined as unknown as ManagedProcess,
    writeConfig,
    async start(extraEnv = {}) {
      await sp.proc?.stop();
      const proc = new ManagedProcess("talos-config-server", join(dir, `server-${++started}.log`), process.execPath, [MAIN, "--config", configFile], { env: { ...env, ...extraEnv } });
      sp.proc = proc;
      await waitFor("talos-config-server /healthz over TLS", 60_000, async () => (await httpsRequest(`${url}/healthz`, { ca: certPem })).status === 200, () => proc.deadReason());
      return proc;
    },
    transport: () =>
      w.withWorkflows({
        async post(path, body) {
          const r = await httpsRequest(url + path, { method: "POST", body: JSON.stringify(body), ca: certPem });
          return { status: r.status, body: JSON.parse(r.text) as unknown };
        },
      }),
    async stop() {
      await sp.proc?.stop();
    },
  };
  await sp.start();
  return sp;
}
