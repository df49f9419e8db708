/** `fleetd-tink-action`'s exit codes come from fleetd's one table (EXIT, @fleetd/platform/cmd), for every subcommand. */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { createServer } from "node:net";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { EXIT, EXIT_CODES_HELP } from "@fleetd/platform/cmd";

const cli = resolve(fileURLToPath(import.meta.url), "../cli.js");
const action = (args: string[], env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: "utf8", env: { PATH: process.env["PATH"] ?? "", ...env } });

test("--help, top level and per subcommand, lists the exit-code table", () => {
  for (const args of [["--help"], ["attest", "--help"], ["write-meta", "--help"], ["clear-tpm", "--help"], ["lldp", "--help"]]) {
    const r = action(args);
    assert.equal(r.status, EXIT.ok, r.stderr);
    assert.ok(r.stdout.includes(EXIT_CODES_HELP), args.join(" "));
  }
});

test("usage 2 for an unknown command or option; a TPM that does not answer is 5 (unavailable) in clear-tpm too", async () => {
  assert.equal(action(["no-such-command"]).status, EXIT.usage);
  assert.equal(action(["write-meta", "--bogus"]).status, EXIT.usage);
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  const r = action(["clear-tpm"], { FLEETD_CLEAR_TPM: "yes", FLEETD_TPM: `swtpm:127.0.0.1:${port}` });
  assert.equal(r.status, EXIT.unavailable, r.stdout + r.stderr);
});
