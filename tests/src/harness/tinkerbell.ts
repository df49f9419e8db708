/**
 * The real Tinkerbell on loopback for tests and the lab: the `tinkerbell` program of the
 * github.com/tinkerbell/tinkerbell module (built by tests/go/tinkerbell-bin/build.sh, cached) running ONLY
 * tink-server (the agents' gRPC service), tink-controller (renders Workflows, drives their boot Jobs) and Rufio
 * (the BMC controller), against a control plane from ./kube.ts. Smee (DHCP/TFTP/iPXE on privileged ports),
 * Tootles, SecondStar and the UI are disabled, and the program does not install CRDs itself: the tests install
 * the module's v1alpha1 CRDs with installTinkerbellCrds() (tinkerbellCrds.ts). Every listener is on 127.0.0.1.
 *
 * Identity: the program uses the control plane's admin kubeconfig (group system:masters). That is a test
 * harness shortcut; a deployment gives it a ServiceAccount with the RBAC of upstream's Helm chart.
 */
import { join } from "node:path";
import type { ControlPlane } from "./kube.js";
import { freeLoopbackPorts, startDaemon, waitFor, type Daemon } from "./process.js";
import { runSetupScript } from "./setupScript.js";
import { portOpen } from "./ports.js";


const runScript = (name: string, progress: string): Promise<string> =>
  runSetupScript(`tests/go/tinkerbell-bin/${name}`, { ...(progress ? { progress } : {}), needs: "Go >= 1.26 and the Go module proxy" });

/** The directory holding the `tinkerbell` program; builds it on first use (minutes cold, then cached). */
export function tinkerbellBinDir(): Promise<string> {
  return runScript("build.sh", "# [tinkerbell build] ");
}

/**
 * The module-cache directory of the pinned github.com/tinkerbell/tinkerbell version: the CRDs are in
 * `crd/bases/v1alpha1`, the agent protocol in `pkg/proto`. Nothing of it is copied into the repository.
 */
export function tinkerbellModuleDir(): Promise<string> {
  return runScript("moddir.sh", "");
}

export interface Tinkerbell {
  /** 127.0.0.1:<port> of tink-server's gRPC service (plaintext; the agent protocol of pkg/proto). */
  readonly grpcAddress: string;
  /** http://127.0.0.1:<port>: /healthz, /metrics (Smee and Tootles routes are off). */
  readonly httpUrl: string;
  /** The namespace the program's kube backend watches. */
  readonly namespace: string;
  /** The exact arguments the program runs with. */
  readonly args: readonly string[];
  /** The last output of the program (JSON logs), for failure messages. */
  logs(): string;
  stop(): Promise<void>;
}

export interface TinkerbellOptions {
  /** The namespace for Hardware, Templates, Workflows, Machines and Jobs (the kube backend watches it). */
  namespace: string;
  /** Global log level (0 = info; 1 adds tink-server's per-request journals). Default 0. */
  logLevel?: number;
  /**
   * tink-server's auto-enrollment (`--tink-server-auto-enrollment-enabled`): an agent no Workflow or Hardware
   * names is matched against the namespace's WorkflowRuleSets (fleetd's intake rule set), which creates its
   * `enrollment-<agent ID>` Workflow. Default off.
   */
  autoEnrollment?: boolean;
  /**
   * How often Rufio re-reads every Machine's power state. Upstream's default is 30 min; the default here,
   * 5 s, lets a test see Machine.status follow the BMC.
   */
  rufioPowerCheckInterval?: string;
  /** Readiness timeout; default 60 s. */
  timeoutMs?: number;
}

/**
 * Start tink-server, tink-controller and Rufio (one `tinkerbell` process) against `cp`. The ports are picked
 * free but can be taken before the program binds them: such a start is retried (three attempts in all).
 */
export async function startTinkerbell(cp: ControlPlane, opts: TinkerbellOptions): Promise<Tinkerbell> {
  const bin = join(await tinkerbellBinDir(), "tinkerbell");
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(bin, cp, opts);
    } catch (e) {
      if (attempt >= 3 || !/address already in use/.test((e as Error).message)) throw e;
    }
  }
}

/** The inherited environment minus anything the program reads as configuration (TINKERBELL_*, KUBECONFIG). */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith("TINKERBELL_") || k === "KUBECONFIG" || k.startsWith("OTEL_")) continue;
    env[k] = v;
  }
  return env;
}

async function startOnce(bin: string, cp: ControlPlane, opts: TinkerbellOptions): Promise<Tinkerbell> {
  const [grpcPort, httpPort, httpsPort] = await freeLoopbackPorts(3) as [number, number, number];
  const args = [
    // only the three services; no CRD installation by the program itself
    "--enable-tink-server=true", "--enable-tink-controller=true", "--enable-rufio-controller=true",
    "--enable-smee=false", "--enable-tootles=false", "--enable-secondstar=false", "--enable-ui=false",
    "--enable-crd-migrations=false",
    // the kube backend: the test control plane, one namespace
    "--backend=kube", `--backend-kube-config=${cp.kubeconfig}`, `--backend-kube-namespace=${opts.namespace}`,
    // every listener on loopback
    "--bind-address=127.0.0.1", "--public-ipv4=127.0.0.1", `--http-port=${httpPort}`, `--https-port=${httpsPort}`,
    "--tink-server-bind-addr=127.0.0.1", `--tink-server-bind-port=${grpcPort}`,
    `--rufio-power-check-interval=${opts.rufioPowerCheckInterval ?? "5s"}`,
    `--log-level=${opts.logLevel ?? 0}`,
    // tink-server looks up an agent's Hardware (spec.agentID) only in the auto-discovery namespace, even with
    // discovery off: unless that is the namespace holding fleetd's Hardware, every agent without a current Workflow
    // is enrolled again, admitted machines too
    ...(opts.autoEnrollment ? ["--tink-server-auto-enrollment-enabled=true", `--tink-server-auto-discovery-namespace=${opts.namespace}`] : []),
  ];
  const d: Daemon = startDaemon("tinkerbell", bin, args, { env: cleanEnv() });
  const died = () => (d.hasExited() ? `tinkerbell exited:\n${d.output().slice(-3000)}` : undefined);
  const httpUrl = `http://127.0.0.1:${httpPort}`;
  try {
    const timeoutMs = opts.timeoutMs ?? 60_000;
    await waitFor("tinkerbell /healthz", async () => (await fetch(`${httpUrl}/healthz`)).ok, { timeoutMs, intervalMs: 200, abort: died });
    await waitFor("tink-server gRPC port", () => portOpen(grpcPort), { timeoutMs, intervalMs: 200, abort: died });
  } catch (e) {
    await d.stop(5000);
    throw new Error(`${(e as Error).message}\n${d.output().slice(-3000)}`);
  }
  return {
    grpcAddress: `127.0.0.1:${grpcPort}`,
    httpUrl,
    namespace: opts.namespace,
    args,
    logs: () => d.output(),
    stop: () => d.stop(10_000),
  };
}
