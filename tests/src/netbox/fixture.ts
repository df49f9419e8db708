/**
 * A fleetd-ready NetBox for integration tests: the harness NetBox, the operators group, service accounts
 * (apply, handler), two human users (alice in the group, mallory not), and configuration files.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { createNetBox, type NetBox } from "@fleetd/platform/netbox";
import { parseSiteConfig, type SiteConfig } from "@fleetd/platform/fleet";
import { startNetBox, type NetBoxInstance, type NetBoxServerOptions } from "../harness/netbox.js";
import { createAccount, createGroup, SERVICE_OBJECT_TYPES, type Account } from "../harness/netboxAccounts.js";
import { freePort } from "../harness/ports.js";

export const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");
export const EXAMPLE_NODES = join(repoRoot, "tests/examples/nodes.yaml");
export const GROUP = "fleetd-operators";

export interface Fleet {
  nb: NetBoxInstance;
  dir: string;
  apply: Account;
  handler: Account;
  alice: Account;
  mallory: Account;
  webhookSecret: string;
  handlerPort: number;
  /** A site configuration whose token is `token` (default: the apply account's). */
  config(token?: string, extra?: Partial<SiteConfig>): SiteConfig;
  /** Writes a configuration file and returns its path. */
  configFile(token?: string, extra?: Record<string, unknown>): string;
  client(token: string): NetBox;
  admin: NetBox;
}

export async function startFleet(netbox: NetBoxServerOptions = {}): Promise<Fleet> {
  const nb = await startNetBox(netbox);
  const dir = mkdtempSync("/tmp/fleetd-nbtest-");
  const group = await createGroup(nb, GROUP);
  const deviceOnly = ["dcim.device", "extras.journalentry"];
  const [apply, handler, alice, mallory] = [
    await createAccount(nb, "fleetd-apply", { objectTypes: SERVICE_OBJECT_TYPES }),
    await createAccount(nb, "fleetd-handler", { objectTypes: SERVICE_OBJECT_TYPES }),
    await createAccount(nb, "alice", { groups: [group], objectTypes: deviceOnly }),
    await createAccount(nb, "mallory", { objectTypes: deviceOnly }),
  ];
  const webhookSecret = `whsec-${Math.random().toString(36).slice(2)}-${Math.random().toString(36).slice(2)}-0123456789`;
  const handlerPort = await freePort();
  const base = (token: string): Record<string, unknown> => ({
    netbox: { url: nb.url, token },
    accounts: { apply: apply.username, handler: handler.username },
    authorizedGroup: GROUP,
    webhook: { url: `http://127.0.0.1:${handlerPort}/netbox/events`, secret: webhookSecret, maxAgeSeconds: 300 },
  });
  let n = 0;
  return {
    nb, dir, apply, handler, alice, mallory, webhookSecret, handlerPort,
    config: (token = apply.token, extra = {}) => parseSiteConfig({ ...base(token), ...extra }),
    configFile: (token = apply.token, extra = {}) => {
      const p = join(dir, `fleetd-${++n}.yaml`);
      writeFileSync(p, stringify({ ...base(token), ...extra }));
      return p;
    },
    client: (token) => createNetBox({ url: nb.url, token }),
    admin: createNetBox({ url: nb.url, token: nb.authorization }),
  };
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `fleetd <args>` as a separate process, the way an operator does. */
export function fleetd(args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): CliResult {
  const r = spawnSync(process.execPath, [join(repoRoot, "shared/cli/dist/main.js"), ...args], {
    encoding: "utf8",
    env: { ...process.env, ...env },
    timeout: timeoutMs,
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr + (r.signal ? `\n(killed by ${r.signal} after ${timeoutMs} ms)` : "") };
}

export function exampleNodesText(): string {
  return readFileSync(EXAMPLE_NODES, "utf8");
}

/** Number of change-log records in NetBox (anything written shows up here). */
export async function changeCount(f: Fleet): Promise<number> {
  const r = await fetch(`${f.nb.url}/api/core/object-changes/?limit=1`, { headers: { authorization: f.nb.authorization } });
  return ((await r.json()) as { count: number }).count;
}
