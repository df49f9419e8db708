/**
 * `fleetd-tink-action lldp` against real LLDP: lldpd as the switch in a network namespace at the far end of a
 * veth pair (tests/src/harness/lldp.ts), the action's own receive-only lldpd on the near end. Also a port whose
 * switch is silent, and a machine without lldpd: no claim, and the reason says why.
 */
import { strict as assert } from "node:assert";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startLldpSwitchPort, type LldpSwitchPort } from "../harness/lldp.js";
import { runProcess } from "../harness/process.js";

const CLI = join(resolve(fileURLToPath(import.meta.url), "../../../.."), "tink-action/dist/cli.js");
let speaking: LldpSwitchPort;
let silent: LldpSwitchPort;
before(async () => {
  speaking = await startLldpSwitchPort({ device: "tor-b2", port: "Ethernet1/17" });
  silent = await startLldpSwitchPort({ device: "unused", port: "unused", silent: true });
});
after(async () => {
  await speaking?.stop();
  await silent?.stop();
});

async function lldp(iface: string, wait: number, env: NodeJS.ProcessEnv = process.env) {
  const r = await runProcess(process.execPath, [CLI, "lldp", "--interface", iface, "--wait", String(wait)], { env, timeoutMs: 120_000 });
  return { code: r.code, out: JSON.parse(r.stdout.toString() || "{}") as { lldp: unknown; reason: string; bootInterface: unknown }, stderr: r.stderr.toString() };
}

test("the switch's system name and port ID, read from the wire by the action's receive-only lldpd", async () => {
  const r = await lldp(speaking.iface, 30);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(r.out.lldp, { chassisId: "tor-b2", portId: "Ethernet1/17" });
  assert.deepEqual(r.out.bootInterface, { name: speaking.iface, how: "configured" });
});

test("a silent port: no claim once the wait is over, and the reason names the interface", async () => {
  const r = await lldp(silent.iface, 2);
  assert.equal(r.code, 1);
  assert.equal(r.out.lldp, null);
  assert.match(r.out.reason, new RegExp(`no LLDP neighbour on ${silent.iface} within 2 s`));
});

test("no lldpd on the machine: no claim, and the reason says so", async () => {
  const r = await lldp(speaking.iface, 5, { PATH: "/nonexistent" });
  assert.equal(r.code, 1);
  assert.equal(r.out.lldp, null);
  assert.match(r.out.reason, /lldpd is not installed/);
});
