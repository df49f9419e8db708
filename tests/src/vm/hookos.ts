/**
 * What a lab machine needs from the rest of the lab to boot HookOS and run fleetd's action:
 *  - `declareNodes`: its node in NetBox, as an operator declares one: the world's nodes file gets a node per
 *    machine (a copy of worker-1 with its own serial, switch port, addresses, and the machine TPM's EK bindings
 *    approved) and the apply account applies it (`fleetd inventory apply`), exactly the production path;
 *  - `serveHookos`: what its boot server serves it (its own TFTP directory): the image its firmware boots, the
 *    job its HookOS fetches and, in direct mode, the action bundle. The job is either the action's FLEETD_*
 *    environment (as a Tinkerbell Template's action carries it) with the steps to run directly, or the agent
 *    mode's (`AgentJob`): where the real tink-agent in the HookOS finds tink-server and the lab registry;
 *  - `actionBundle`: the action as the image ships it (tink-action/scripts/bundle.mjs: one ES module, no
 *    node_modules), from the compiled workspace.
 *
 * In agent mode the real Tinkerbell agent replaces the direct steps (tink-server sends the Workflow's actions; the
 * agent pulls each action's image from the lab registry and runs it privileged through podman's Docker API) — see
 * the lab HookOS's /init, tests/scripts/vm/hookos-init.sh. Smee may replace dnsmasq as the boot server
 * (bootNetwork.ts says why the lab starts with dnsmasq).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { ESM_NODE_BUNDLE } from "../../../shared/scripts/bundle.mjs";
import { parse as parseYaml, stringify } from "yaml";
import type { Mode } from "@fleetd/platform/protocol";
import { fleetd } from "../netbox/fixture.js";
import { runProcess } from "../harness/process.js";
import type { World } from "../attestation/world.js";
import type { BootNetwork } from "./bootNetwork.js";
import type { MachineTpm } from "./machineTpm.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");

export interface DeclaredNode {
  name: string;
  serial: string;
  switch: { device: string; port: string };
}

/**
 * Adds a node per entry to the world's nodes file (each approving `ek`'s bindings: the TPM of the machine that
 * will claim the node, or of another one) and applies the file as the apply account. `n` picks the node's
 * serial suffix, switch port and addresses (distinct from the world's own nodes: 70 and up).
 */
export function declareNodes(w: World, nodes: Record<string, { n: number; ek: MachineTpm["ek"] }>): Record<string, DeclaredNode> {
  const file = join(w.dir, "nodes.yaml");
  const doc = parseYaml(readFileSync(file, "utf8")) as { nodes: Record<string, Record<string, unknown>> };
  const w1 = doc.nodes["worker-1"];
  if (!w1) throw new Error("the world's nodes file lacks worker-1");
  const out: Record<string, DeclaredNode> = {};
  for (const [name, { n, ek }] of Object.entries(nodes)) {
    if (doc.nodes[name]) throw new Error(`the world already has a node ${name}`);
    const serial = `LAB-VM-${n}`;
    const sw = { device: (w1["switch"] as { device: string }).device, port: `ethernet1/1/${n}` };
    doc.nodes[name] = {
      ...structuredClone(w1),
      serial,
      switch: sw,
      address: { cidr: `10.20.0.${n}/24`, gateway: "10.20.0.1" },
      bmc: { type: "redfish", address: `10.20.1.${n}`, credentials: `secret:tinkerbell/fleetd-bmc-${name}` },
      ek: [
        { alg: "rsa", sha256: ek.rsa.binding },
        { alg: "ecc", sha256: ek.ecc.binding },
      ],
    };
    out[name] = { name, serial, switch: sw };
  }
  writeFileSync(file, stringify(doc));
  const r = fleetd(["inventory", "apply", file, "--config", w.fleet.configFile(w.fleet.apply.token)]);
  if (r.code !== 0) throw new Error(`fleetd inventory apply: ${r.stderr}`);
  return out;
}

export interface HookosJob {
  mode: Mode;
  workflow: string;
  /** The attestation API as the machine reaches it (a gateway of the boot network). */
  server: string;
  /** How long the action keeps retrying a pending machine (FLEETD_TIMEOUT_SECONDS). */
  timeoutSeconds?: number;
  lldpWaitSeconds?: number;
  /** The actions, in order (default: attest alone); the HookOS stops at the first that fails. */
  steps?: readonly ("attest" | "write-meta")[];
}

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

/** The action's environment: FLEETD_* lines the lab HookOS exports (it takes no other line). */
export function jobEnv(job: HookosJob): string {
  const env: Record<string, string> = {
    FLEETD_SERVER: job.server,
    FLEETD_ALLOW_HTTP: "lab", // the gateway is plain HTTP on the boot network: lab only
    FLEETD_MODE: job.mode,
    FLEETD_WORKFLOW: job.workflow,
    FLEETD_TIMEOUT_SECONDS: String(job.timeoutSeconds ?? 600),
    FLEETD_LLDP_WAIT_SECONDS: String(job.lldpWaitSeconds ?? 40),
    FLEETD_OUT: "/worker/fleetd",
    FLEETD_LOG_LEVEL: "info",
    FLEETD_STEPS: (job.steps ?? ["attest"]).join(","),
  };
  return envLines(env);
}

/**
 * The boot server serves `mac`: `image` as the boot file, then (when given) its job — the direct steps (`job`, with
 * the action `bundle`) or the agent mode (`agent`).
 */
export function serveHookos(net: BootNetwork, mac: string, o: { image: string; bootFile: string; job?: HookosJob; agent?: AgentJob; bundle?: string }): void {
  if (o.job && o.agent) throw new Error("a HookOS job is either the direct steps or the agent mode, not both");
  net.serveTo(mac, {
    [o.bootFile]: { copyOf: o.image },
    ...(o.job ? { "job.env": jobEnv(o.job) } : {}),
    ...(o.agent ? { "job.env": agentJobEnv(o.agent) } : {}),
    ...(o.bundle ? { "action.mjs": { copyOf: o.bundle } } : {}),
  });
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
