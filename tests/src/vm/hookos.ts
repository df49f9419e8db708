/**
 * What a lab machine needs from the rest of the lab to boot HookOS and run fleetd's action:
 *  - `agentJobEnv`: the job its HookOS fetches from its boot server (beside the image its firmware boots): where
 *    the real tink-agent in the HookOS finds tink-server and the lab registry;
 *  - `serveLabos`: what the installed lab OS fetches from its boot server (the node's DaemonSets' parts);
 *  - `actionBundle`: the action as the image ships it (tink-action/scripts/bundle.mjs: one ES module, no
 *    node_modules), from the compiled workspace.
 *
 * In agent mode the real Tinkerbell agent replaces the direct steps (tink-server sends the Workflow's actions; the
 * agent pulls each action's image from the lab registry and runs it privileged through podman's Docker API) — see
 * the lab HookOS's /init, tests/scripts/vm/hookos-init.sh. Smee may replace dnsmasq as the boot server
 * (bootNetwork.ts says why the lab starts with dnsmasq).
 */
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { ESM_NODE_BUNDLE } from "../../../shared/scripts/bundle.mjs";
import { runProcess } from "../harness/process.js";
import type { BootNetwork } from "./bootNetwork.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");

/**
 * The agent mode's job (hookos-init.sh, FLEETD_AGENT=tink-agent): the real tink-agent in the HookOS, its ID the
 * machine's boot MAC, runs the Workflow tink-server serves it, pulling the action images from the lab registry.
 */
export interface AgentJob {
  /** tink-server's gRPC (plaintext) as the machine reaches it, host:port (e.g. `exposeTcp` at LAB_TINK_GRPC_PORT). */
  tinkServer: string;
  /** The lab registry (plain HTTP, insecure for the HookOS's podman) as the machine reaches it, host:port. */
  registry: string;
}

/** FLEETD_* lines the lab HookOS exports (it takes no other line, and no value with other characters). */
function envLines(env: Record<string, string>): string {
  for (const [k, v] of Object.entries(env)) if (!/^[A-Za-z0-9_.:/@,+=-]*$/.test(v)) throw new Error(`${k}: ${v} has characters the lab HookOS does not take`);
  return Object.entries(env).map(([k, v]) => `${k}=${v}\n`).join("");
}

/** The agent mode's job file. */
export function agentJobEnv(job: AgentJob): string {
  for (const [k, v] of Object.entries(job)) if (!/^[^\s:/]+:\d{1,5}$/.test(v)) throw new Error(`${k}: expected host:port, got ${JSON.stringify(v)}`);
  return envLines({ FLEETD_AGENT: "tink-agent", FLEETD_TINK_SERVER: job.tinkServer, FLEETD_REGISTRY: job.registry });
}

/** What the node's DaemonSets get on Talos, served to the lab OS by its boot server (tests/scripts/vm/labos-init.sh). */
export interface LabosServed {
  /** The node agent's FLEETD_* environment (the renew DaemonSet's `env:`). */
  env: Record<string, string>;
  /** The action bundle (its `renew` command is the node agent). */
  bundle: string;
  /** spire-agent's config: the shipped agent.conf with the site's server address and port. */
  agentConf: string;
  /** The SPIRE server's trust bundle (PEM) the site distributes to its agents. */
  spireBundle: string;
  /** The kubelet's TLS bootstrap (kubeletBootstrapBundle): the lab OS's stand-in for the kubelet's first start. */
  kubeletBootstrap: string;
}

/** The boot server serves `mac`'s lab OS its node agent's env, the action bundle, agent.conf and the SPIRE bundle. */
export function serveLabos(net: BootNetwork, mac: string, o: LabosServed): void {
  for (const [k, v] of Object.entries(o.env)) {
    if (!/^FLEETD_[A-Z0-9_]+$/.test(k) || !/^[A-Za-z0-9_.:/@,+=-]*$/.test(v)) throw new Error(`${k}=${v}: not a line the lab OS takes`);
  }
  net.serveTo(mac, {
    "labos.env": Object.entries(o.env).map(([k, v]) => `${k}=${v}\n`).join(""),
    "action.mjs": { copyOf: o.bundle },
    "agent.conf": o.agentConf,
    "spire-bundle.pem": o.spireBundle,
    "kubelet-bootstrap.mjs": { copyOf: o.kubeletBootstrap },
  });
}

/**
 * Bundles the compiled kubelet bootstrap client (./kubeletBootstrap.ts and the yaml and zod it imports; run
 * `pnpm -s build` first) into `out`: one ES module the lab OS's Node.js runs.
 */
export async function kubeletBootstrapBundle(out: string): Promise<string> {
  await build({ ...ESM_NODE_BUNDLE, entryPoints: [fileURLToPath(new URL("./kubeletBootstrap.js", import.meta.url))], outfile: out });
  return out;
}

/** Bundles the compiled action (run `pnpm -s build` first) into `out`, as the image build (tests/src/images/build.ts) does. */
export async function actionBundle(out: string): Promise<string> {
  const r = await runProcess(process.execPath, [join(repo, "tink-action/scripts/bundle.mjs"), out], { timeoutMs: 120_000 });
  if (r.code !== 0) throw new Error(`bundling the action failed: ${r.stderr.toString()}`);
  return out;
}
