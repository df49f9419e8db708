/**
 * `pnpm -s fleetd lab …` (shared/cli/src/lab.ts loads this from the checkout):
 *   up [--nodes N] [--json]        start the lab (./daemon.ts, detached) or find it running; print its endpoints
 *   provision|attest|wipe NODE     set NetBox desired_action on NODE, as an operator (alice) does in the UI
 *   retire NODE                    set NODE's status to decommissioning, as an operator does
 *   console NODE                   follow NODE's serial console (its current boot; Ctrl-C to stop)
 *   down                           stop the lab and remove what it made
 */
import { spawn } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CliUsageError, EXIT, parseOptions, type CliCommand, type ExitCode } from "@fleetd/platform/cmd";
import { createNetBox, listDevices, patchDevice } from "@fleetd/platform/netbox";
import { labDir, LOG_FILE, PID_FILE, readLabState, type LabState } from "./labDir.js";

const DAEMON = fileURLToPath(new URL("./daemon.js", import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function daemonPid(dir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dir, PID_FILE), "utf8").trim());
    return Number.isInteger(pid) && pid > 0 && alive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

function printEndpoints(s: LabState, json: boolean): void {
  if (json) {
    process.stdout.write(`${JSON.stringify(s, null, 2)}\n`);
    return;
  }
  const e = s.endpoints as Record<string, unknown> & LabState["endpoints"];
  const lines = [
    `fleetd lab up (pid ${s.pid}, ready in ${s.readyInSeconds} s, ${s.dir})`,
    `  NetBox             ${e.netbox.url}  (user ${e.netbox.user}, token ${e.netbox.token})`,
    `  attestation API    ${JSON.stringify(e["attestationApi"])}`,
    `  kubeconfig         ${String(e["kubeconfig"])}`,
    `  SPIRE              ${JSON.stringify(e["spire"])}`,
    `  files              ${JSON.stringify(e["files"])}  (fleetd inventory check <nodesFile> --config <siteConfig>; fleetd pending --config <stateConfig>)`,
    ...Object.entries(e.machines).map(([n, m]) => `  ${n.padEnd(18)} ${m.kind} ${m.mac} serial ${m.serial}; console: pnpm -s fleetd lab console ${n}`),
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}

const up: CliCommand = {
  usage: "[--nodes N] [--json]",
  async run(args): Promise<ExitCode> {
    const { values } = parseOptions(args, { json: { type: "boolean" }, nodes: { type: "string" } });
    const nodes = values["nodes"] === undefined ? 1 : Number(values["nodes"]);
    if (!Number.isInteger(nodes) || nodes < 1 || nodes > 8) throw new CliUsageError("--nodes: a number of machines from 1 to 8 (each a QEMU machine: 1 vCPU, 1 GiB)");
    const dir = labDir();
    mkdirSync(dir, { recursive: true });
    const running = daemonPid(dir);
    const state = readLabState(dir);
    if (running && state) {
      printEndpoints(state, values["json"] === true);
      return EXIT.ok;
    }
    if (running) throw new CliUsageError(`a lab is starting (pid ${running}); wait for it, or: pnpm -s fleetd lab down`);
    rmSync(join(dir, "state.json"), { force: true });
    const logFile = join(dir, LOG_FILE);
    writeFileSync(logFile, "");
    const out = openSync(logFile, "a");
    const child = spawn(process.execPath, [DAEMON], { detached: true, stdio: ["ignore", out, out], env: { ...process.env, FLEETD_LAB_NODES: String(nodes) } });
    closeSync(out);
    if (child.pid === undefined) throw new Error("could not start the lab's daemon");
    writeFileSync(join(dir, PID_FILE), String(child.pid));
    child.unref();
    // progress: the daemon's log lines, as they come (on stderr: stdout is the endpoints)
    let offset = 0;
    const follow = () => {
      const size = statSync(logFile).size;
      if (size <= offset) return;
      const fd = openSync(logFile, "r");
      const buf = Buffer.alloc(size - offset);
      readSync(fd, buf, 0, buf.length, offset);
      closeSync(fd);
      offset = size;
      process.stderr.write(buf.toString("utf8"));
    };
    for (;;) {
      follow();
      const s = readLabState(dir);
      if (s) {
        printEndpoints(s, values["json"] === true);
        return EXIT.ok;
      }
      if (!alive(child.pid)) {
        follow();
        process.stderr.write(`the lab did not start (its log: ${logFile})\n`);
        return EXIT.unavailable;
      }
      await sleep(1000);
    }
  },
};

const down: CliCommand = {
  usage: "",
  async run(args): Promise<ExitCode> {
    parseOptions(args, {});
    const dir = labDir();
    const pid = daemonPid(dir);
    if (pid) {
      process.kill(pid, "SIGTERM");
      process.stderr.write(`stopping the lab (pid ${pid}) …\n`);
      for (let i = 0; i < 240 && alive(pid); i++) await sleep(500);
      if (alive(pid)) {
        process.kill(pid, "SIGKILL");
        process.stderr.write("it did not stop within 2 minutes: killed\n");
      }
    }
    for (const f of ["state.json", PID_FILE]) rmSync(join(dir, f), { force: true });
    rmSync(join(dir, "consoles"), { recursive: true, force: true });
    process.stdout.write(pid ? "the lab is down\n" : "no lab was running\n");
    return EXIT.ok;
  },
};

function running(): LabState {
  const s = readLabState();
  if (!s || !alive(s.pid)) throw new CliUsageError("no lab is up: pnpm -s fleetd lab up");
  return s;
}

async function deviceOf(s: LabState, node: string) {
  if (!Object.hasOwn(s.endpoints.machines, node)) throw new CliUsageError(`no lab machine ${node} (${Object.keys(s.endpoints.machines).join(", ")})`);
  const nb = createNetBox({ url: s.endpoints.netbox.url, token: s.endpoints.netbox.token });
  const [d] = await listDevices(nb, { name: node });
  if (!d) throw new Error(`NetBox has no device ${node}`);
  return { nb, d };
}

/** A command on one lab machine's NetBox device, as the lab's operator (alice) acts in the UI: `patch` and what to say. */
const onDevice = (patch: Parameters<typeof patchDevice>[2], said: (node: string, s: LabState, id: number) => string, comment: string): CliCommand => ({
  usage: "NODE",
  async run(args): Promise<ExitCode> {
    const { positionals } = parseOptions(args, {}, [], 1);
    const node = positionals[0];
    if (!node) throw new CliUsageError("NODE is required");
    const s = running();
    const { nb, d } = await deviceOf(s, node);
    await patchDevice(nb, d.id, patch, null, comment);
    process.stdout.write(`${said(node, s, d.id)}; its journal: ${s.endpoints.netbox.url}/dcim/devices/${d.id}/journal/; its console: pnpm -s fleetd lab console ${node}\n`);
    return EXIT.ok;
  },
});

const action = (name: "provision" | "attest" | "wipe"): CliCommand =>
  onDevice({ custom_fields: { desired_action: name } }, (node, s, id) => `desired_action ${name} set on ${node} as ${s.endpoints.netbox.user} (device ${id})`, `fleetd lab ${name}`);

const retire = onDevice({ status: "decommissioning" }, (node, s) => `${node} is decommissioning (set as ${s.endpoints.netbox.user})`, "fleetd lab retire");

const consoleCmd: CliCommand = {
  usage: "NODE [--once]",
  async run(args): Promise<ExitCode> {
    const { values, positionals } = parseOptions(args, { once: { type: "boolean" } }, [], 1);
    const node = positionals[0];
    if (!node) throw new CliUsageError("NODE is required");
    const s = running();
    if (!Object.hasOwn(s.endpoints.machines, node)) throw new CliUsageError(`no lab machine ${node}`);
    const link = join(s.consoles, `${node}.log`);
    let target = "";
    let offset = 0;
    for (;;) {
      if (existsSync(link)) {
        const t = realpathSync(link);
        if (t !== target) {
          if (target) process.stdout.write(`\n--- ${node}: next boot (${t}) ---\n`);
          target = t;
          offset = 0;
        }
        const size = statSync(t).size;
        if (size > offset) {
          const fd = openSync(t, "r");
          const buf = Buffer.alloc(size - offset);
          readSync(fd, buf, 0, buf.length, offset);
          closeSync(fd);
          offset = size;
          // the console is the machine's bytes: control sequences other than newlines and tabs are not passed on
          process.stdout.write(buf.toString("latin1").replace(/[\x00-\x08\x0b-\x1f\x7f]/g, (c) => (c === "\r" ? "" : "�")));
        }
      }
      if (values["once"] === true) return EXIT.ok;
      if (!alive(s.pid)) return EXIT.ok;
      await sleep(500);
    }
  },
};

export const labCommands: Record<string, { summary: string; command: CliCommand }> = {
  up: { summary: "start the lab (or find it running) and print its endpoints", command: up },
  down: { summary: "stop the lab and remove what it made", command: down },
  provision: { summary: "set NetBox desired_action provision on NODE (as an operator)", command: action("provision") },
  attest: { summary: "set NetBox desired_action attest on NODE", command: action("attest") },
  wipe: { summary: "set NetBox desired_action wipe on NODE", command: action("wipe") },
  retire: { summary: "set NODE decommissioning (retirement)", command: retire },
  console: { summary: "follow NODE's serial console", command: consoleCmd },
};
