/** The `fleetd` process's exit codes come from the one table (EXIT, @fleetd/platform/cmd): usage 2, outage 5. */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";
import { EXIT, EXIT_CODES_HELP } from "@fleetd/platform/cmd";

const cli = resolve(fileURLToPath(import.meta.url), "../main.js");
const dir = mkdtempSync(join(tmpdir(), "fleetd-cli-exit-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const fleetd = (args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: "utf8", env: { PATH: process.env["PATH"] ?? "" } });

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

test("fleetd --help and a command's --help list the exit-code table", () => {
  for (const args of [["--help"], ["netbox", "setup", "--help"]]) {
    const r = fleetd(args);
    assert.equal(r.status, EXIT.ok, r.stderr);
    assert.ok(r.stdout.includes(EXIT_CODES_HELP), args.join(" "));
  }
});

test("usage errors are 2: no command, an unknown command or option, a configuration that is missing or wrong", () => {
  assert.equal(fleetd([]).status, EXIT.usage);
  assert.equal(fleetd(["no-such-command"]).status, EXIT.usage);
  assert.equal(fleetd(["netbox", "setup", "--bogus"]).status, EXIT.usage);
  const missing = fleetd(["netbox", "setup", "--config", join(dir, "none.yaml")]);
  assert.equal(missing.status, EXIT.usage, missing.stderr);
  assert.match(missing.stderr, /ConfigError: cannot read configuration .*none\.yaml: ENOENT/);
  assert.equal(fleetd(["kube", "setup", "--kubeconfig", join(dir, "none.kubeconfig")]).status, EXIT.usage);
});

test("NetBox not answering is 5 (unavailable), not a usage error", async () => {
  const config = join(dir, "fleetd.yaml");
  writeFileSync(
    config,
    `netbox: { url: "http://127.0.0.1:${await closedPort()}", token: "nbt_abc.def", timeoutMs: 5000 }\naccounts: { apply: fleetd-apply, handler: fleetd-handler }\nauthorizedGroup: fleetd-operators\nwebhook: { secret: "${"s".repeat(32)}", url: "http://127.0.0.1:1/netbox/events" }\n`,
  );
  const r = fleetd(["netbox", "setup", "--config", config]);
  assert.equal(r.status, EXIT.unavailable, r.stderr);
  assert.match(r.stderr, /NetBoxError/);
});
