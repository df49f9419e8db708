/**
 * A real Kubernetes control plane on loopback for tests and the lab: etcd, kube-apiserver and
 * kube-controller-manager built from their Go modules by tests/go/k8s/build.sh (cached between runs),
 * with a fresh CA and certificates (openssl CLI), bootstrap-token authentication, Node+RBAC authorization,
 * and the controller manager signing CSRs with the cluster CA. Every process dies with the test process.
 */
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { runSetupScript } from "./setupScript.js";
import { CLIENT_EXT, ecKeyArgs, makeCa, makeLeaf, runOpenssl, serverExt } from "@fleetd/testkit/pki";
import { freeLoopbackPorts, registerCleanup, startDaemon, waitFor, type Daemon } from "./process.js";


export interface ControlPlane {
  /** Path of an admin kubeconfig (client certificate in group system:masters). */
  readonly kubeconfig: string;
  /** https://127.0.0.1:<port> */
  readonly server: string;
  /** The cluster CA (it signs the serving, client and CSR-issued certificates). */
  readonly caPem: string;
  /** The Kubernetes version the binaries report, e.g. "v1.36.3". */
  readonly version: string;
  /** Directory holding the CA, certificates, keys, kubeconfigs and etcd's data (removed by stop()). */
  readonly dir: string;
  /** The last output of each process, for failure messages. */
  logs(): string;
  stop(): Promise<void>;
}

/**
 * The directory with etcd, kube-apiserver and kube-controller-manager; builds them on first use (many minutes
 * cold on 2 cores, then cached under ~/.cache/fleetd/go-bin). `.ci/setup` runs the same build ahead of tests.
 */
export function kubeBinDir(): Promise<string> {
  return runSetupScript("tests/go/k8s/build.sh", { progress: "# [k8s build] ", needs: "Go >= 1.26 and the Go module proxy" });
}

async function makePki(dir: string, extraSans: readonly string[]): Promise<void> {
  await makeCa(dir, "ca", "fleetd-test-kubernetes-ca");
  await makeLeaf(dir, "ca", "apiserver", "/CN=kube-apiserver",
    serverExt([...extraSans, "IP:127.0.0.1", "IP:10.96.0.1", "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"]));
  await makeLeaf(dir, "ca", "admin", "/O=system:masters/CN=fleetd-test-admin", CLIENT_EXT);
  await makeLeaf(dir, "ca", "controller-manager", "/CN=system:kube-controller-manager", CLIENT_EXT);
  await runOpenssl(ecKeyArgs("sa.key"), dir); // service-account token signing key
  await runOpenssl(["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"], dir); // the apiserver's verification key
}

function kubeconfigYaml(server: string, dir: string, user: string): string {
  const b64 = (f: string) => readFileSync(join(dir, f)).toString("base64");
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "fleetd-test", cluster: { server, "certificate-authority-data": b64("ca.crt") } }],
    users: [{ name: user, user: { "client-certificate-data": b64(`${user}.crt`), "client-key-data": b64(`${user}.key`) } }],
    contexts: [{ name: "fleetd-test", context: { cluster: "fleetd-test", user } }],
    "current-context": "fleetd-test",
  }, null, 2) + "\n"; // JSON is YAML
}

/** GET `path` over mutual TLS as the admin; resolves with the status and body. */
function adminGet(port: number, dir: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((res, rej) => {
    const req = request({
      host: "127.0.0.1", port, path, method: "GET", timeout: 5000,
      ca: readFileSync(join(dir, "ca.crt")), cert: readFileSync(join(dir, "admin.crt")), key: readFileSync(join(dir, "admin.key")),
    }, (r) => {
      let body = "";
      r.on("data", (b: Buffer) => (body += b.toString("utf8")));
      r.on("end", () => res({ status: r.statusCode ?? 0, body }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", rej);
    req.end();
  });
}

const died = (d: Daemon) => (d.hasExited() ? `${d.name} exited:\n${d.output().slice(-3000)}` : undefined);

export interface ControlPlaneOptions {
  /** Extra kube-apiserver flags (e.g. feature gates). */
  apiserverArgs?: string[];
  /** Extra kube-controller-manager controllers (e.g. "deployment", "replicaset" for workloads that KWOK runs). */
  extraControllers?: string[];
  /**
   * More subjectAltNames of the API server's serving certificate (openssl form, e.g. "IP:10.99.0.1"): addresses
   * it is reached at through a relay (the lab's boot network).
   */
  apiserverSans?: readonly string[];
  /** Readiness timeout for each process; default 120 s (the apiserver's first start on 2 busy cores is slow). */
  timeoutMs?: number;
}

/**
 * Start etcd, kube-apiserver and kube-controller-manager on free loopback ports. The ports are picked
 * free but can be taken before the processes bind them: such a start is retried (three attempts in all).
 */
export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const bin = await kubeBinDir();
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(bin, opts);
    } catch (e) {
      if (attempt >= 3 || !/address already in use/.test((e as Error).message)) throw e;
    }
  }
}

async function startOnce(bin: string, opts: ControlPlaneOptions): Promise<ControlPlane> {
  const timeoutMs = opts.timeoutMs ?? 120_000;
  const dir = mkdtempSync(join(tmpdir(), "fleetd-k8s-"));
  const unregisterDir = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  const daemons: Daemon[] = [];
  const stop = async () => {
    for (const d of [...daemons].reverse()) await d.stop(5000);
    rmSync(dir, { recursive: true, force: true });
    unregisterDir();
  };
  try {
    await makePki(dir, opts.apiserverSans ?? []);
    const [etcdClient, etcdPeer, apiPort] = await freeLoopbackPorts(3) as [number, number, number];
    const etcdUrl = `http://127.0.0.1:${etcdClient}`;
    const peerUrl = `http://127.0.0.1:${etcdPeer}`;

    const etcd = startDaemon("etcd", join(bin, "etcd"), [
      "--name=fleetd-test", `--data-dir=${join(dir, "etcd")}`,
      `--listen-client-urls=${etcdUrl}`, `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=${peerUrl}`, `--initial-advertise-peer-urls=${peerUrl}`,
      `--initial-cluster=fleetd-test=${peerUrl}`, "--initial-cluster-state=new",
      "--unsafe-no-fsync", // throwaway test data
      "--log-level=warn",
    ]);
    daemons.push(etcd);
    await waitFor("etcd /health", async () => {
      const r = await fetch(`${etcdUrl}/health`);
      return r.ok && z.object({ health: z.string() }).parse(await r.json()).health === "true";
    }, { timeoutMs, intervalMs: 200, abort: () => died(etcd) });

    const server = `https://127.0.0.1:${apiPort}`;
    const f = (n: string) => join(dir, n);
    const apiserver = startDaemon("kube-apiserver", join(bin, "kube-apiserver"), [
      "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", `--secure-port=${apiPort}`,
      "--endpoint-reconciler-type=none", // a loopback address is not a valid Endpoints address
      `--etcd-servers=${etcdUrl}`,
      `--tls-cert-file=${f("apiserver.crt")}`, `--tls-private-key-file=${f("apiserver.key")}`,
      `--client-ca-file=${f("ca.crt")}`,
      "--enable-bootstrap-token-auth=true",
      "--authorization-mode=Node,RBAC",
      "--enable-admission-plugins=NodeRestriction",
      "--anonymous-auth=false",
      `--service-account-issuer=https://kubernetes.default.svc.cluster.local`,
      `--service-account-key-file=${f("sa.pub")}`, `--service-account-signing-key-file=${f("sa.key")}`,
      "--service-cluster-ip-range=10.96.0.0/16",
      "--profiling=false",
      ...(opts.apiserverArgs ?? []),
    ]);
    daemons.push(apiserver);
    await waitFor("kube-apiserver /readyz", async () => (await adminGet(apiPort, dir, "/readyz")).status === 200,
      { timeoutMs, intervalMs: 500, abort: () => died(apiserver) ?? died(etcd) });
    const version = z.object({ gitVersion: z.string() }).parse(JSON.parse((await adminGet(apiPort, dir, "/version")).body)).gitVersion;

    const kubeconfig = f("admin.kubeconfig");
    writeFileSync(kubeconfig, kubeconfigYaml(server, dir, "admin"), { mode: 0o600 });
    writeFileSync(f("controller-manager.kubeconfig"), kubeconfigYaml(server, dir, "controller-manager"), { mode: 0o600 });

    const kcm = startDaemon("kube-controller-manager", join(bin, "kube-controller-manager"), [
      `--kubeconfig=${f("controller-manager.kubeconfig")}`,
      "--secure-port=0", // no serving endpoint: nothing to listen on
      "--leader-elect=false",
      `--controllers=${["csrsigning,csrapproving,csrcleaner,garbagecollector,disruption,serviceaccount,serviceaccount-token,namespace,root-ca-cert-publisher,tokencleaner", ...(opts.extraControllers ?? [])].join(",")}`,
      `--cluster-signing-cert-file=${f("ca.crt")}`, `--cluster-signing-key-file=${f("ca.key")}`,
      "--use-service-account-credentials=true",
      `--service-account-private-key-file=${f("sa.key")}`, `--root-ca-file=${f("ca.crt")}`,
      "--profiling=false",
    ]);
    daemons.push(kcm);
    // No serving port: ready when its controllers' service accounts exist (the serviceaccount-token controller
    // and --use-service-account-credentials create them through the API).
    await waitFor("kube-controller-manager (its service account in kube-system)", async () =>
      (await adminGet(apiPort, dir, "/api/v1/namespaces/kube-system/serviceaccounts/certificate-controller")).status === 200,
    { timeoutMs, intervalMs: 500, abort: () => died(kcm) ?? died(apiserver) });

    return {
      kubeconfig, server, version, dir,
      caPem: readFileSync(f("ca.crt"), "utf8"),
      logs: () => daemons.map((d) => `--- ${d.name}${d.hasExited() ? " (exited)" : ""}\n${d.output()}`).join("\n"),
      stop,
    };
  } catch (e) {
    const logs = daemons.map((d) => `--- ${d.name}\n${d.output().slice(-2000)}`).join("\n");
    await stop();
    throw new Error(`${(e as Error).message}\n${logs}`);
  }
}
