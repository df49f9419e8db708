import { strict as assert } from "node:assert";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { ActionConfigError } from "@fleetd/tink-action/config";
import { loadRenewConfig } from "@fleetd/tink-action/renewConfig";
import { parseSignalSpec, signalSpireAgent } from "@fleetd/tink-action/spireSignal";

const lab = { FLEETD_SERVER: "http://127.0.0.1:8080", FLEETD_ALLOW_HTTP: "lab" };
const refused = (env: NodeJS.ProcessEnv, pattern: RegExp, flags = {}) =>
  assert.throws(() => loadRenewConfig(env, flags), (e: unknown) => e instanceof ActionConfigError && e.issues.some((i) => pattern.test(i)), `expected a refusal matching ${pattern}`);

test("renew configuration: the defaults are the Talos paths, the TPM resource manager, three failures", () => {
  const c = loadRenewConfig({ ...lab, PATH: "/usr/bin", FLEETD_SPIRE_SIGNAL: "" });
  assert.equal(c.seedDir, "/var/lib/fleetd/seed");
  assert.equal(c.devidDir, "/var/lib/fleetd/devid");
  assert.deepEqual(c.tpm, { kind: "device", path: "/dev/tpmrm0" });
  assert.equal(c.eventLog, "/sys/kernel/security/tpm0/binary_bios_measurements");
  assert.equal(c.failuresForVerdict, 3);
  assert.deepEqual(c.backoff, { baseMs: 30_000, capMs: 3_600_000 });
  assert.deepEqual(c.spireSignal, { kind: "none" });
  assert.equal(c.healthPort, undefined);
});

test("renew configuration: flags win over the environment and are named in refusals", () => {
  const c = loadRenewConfig({ ...lab, FLEETD_DEVID_DIR: "/a", FLEETD_RENEW_FAILURES: "5" }, { devid: "/b", tpm: "unix:/run/swtpm.sock", "spire-signal": "process:spire-agent", "health-port": "8095" });
  assert.equal(c.devidDir, "/b");
  assert.equal(c.failuresForVerdict, 5);
  assert.deepEqual(c.tpm, { kind: "unix", path: "/run/swtpm.sock" });
  assert.deepEqual(c.spireSignal, { kind: "process", name: "spire-agent", signal: "SIGTERM" });
  assert.equal(c.healthPort, 8095);
  refused(lab, /^--failures \(FLEETD_RENEW_FAILURES\): /, { failures: "0" });
  refused(lab, /^--devid \(FLEETD_DEVID_DIR\): must be an absolute path/, { devid: "relative/dir" });
});

test("renew configuration: each bad value names its variable", () => {
  refused({}, /^FLEETD_SERVER: is required/);
  refused({ FLEETD_SERVER: "http://x:1" }, /^FLEETD_SERVER: plain http:\/\/ is refused/);
  refused({ FLEETD_SERVER: "https://x:1" }, /^FLEETD_SERVER_CA: required for https/);
  refused({ ...lab, FLEETD_SEED_DIR: "seed" }, /^FLEETD_SEED_DIR: must be an absolute path/);
  refused({ ...lab, FLEETD_SEED_DIR: "/x", FLEETD_DEVID_DIR: "/x" }, /^FLEETD_DEVID_DIR: must not be the seed directory/);
  refused({ ...lab, FLEETD_TPM: "swtpm:host" }, /^FLEETD_TPM: expected swtpm:HOST:PORT/);
  refused({ ...lab, FLEETD_RENEW_FAILURES: "three" }, /^FLEETD_RENEW_FAILURES: must be a whole number/);
  refused({ ...lab, FLEETD_RENEW_BACKOFF_BASE_SECONDS: "600", FLEETD_RENEW_BACKOFF_CAP_SECONDS: "60" }, /^FLEETD_RENEW_BACKOFF_CAP_SECONDS: must be at least/);
  refused({ ...lab, FLEETD_SPIRE_SIGNAL: "kill-all" }, /^FLEETD_SPIRE_SIGNAL: expected none, process:<name>/);
  refused({ ...lab, FLEETD_SPIRE_SIGNAL: "pidfile:run/x.pid" }, /^FLEETD_SPIRE_SIGNAL: pidfile "run\/x.pid" must be an absolute path/);
  refused({ ...lab, FLEETD_SPIRE_SIGNAL: "process:spire-agent:SIGKILL" }, /^FLEETD_SPIRE_SIGNAL: signal SIGKILL is not one of/);
  refused({ ...lab, FLEETD_HEALTH_PORT: "70000" }, /^FLEETD_HEALTH_PORT: /);
  refused({ ...lab, FLEETD_LOG_LEVEL: "loud" }, /^FLEETD_LOG_LEVEL: /);
});

const dir = mkdtempSync(join(tmpdir(), "fleetd-signal-"));
after(() => rmSync(dir, { recursive: true, force: true }));

test("spire-agent signal: process:<name> signals exactly the processes of that name (not itself); pidfile: the one PID; none: nothing", () => {
  const proc = join(dir, "proc");
  const mk = (pid: number, comm: string) => {
    const p = join(proc, String(pid));
    mkdirp(p);
    writeFileSync(join(p, "comm"), `${comm}\n`);
  };
  mk(1, "pause");
  mk(7, "spire-agent");
  mk(8, "spire-agent-x");
  mk(9, "spire-agent");
  mk(42, "spire-agent"); // this process (as if it were named so): never signalled
  mkdirp(join(proc, "self"));
  const sent: [number, string][] = [];
  const deps = { kill: (pid: number, sig: string) => void sent.push([pid, sig]), procRoot: proc, selfPid: 42 };
  assert.deepEqual(signalSpireAgent(parseSignalSpec("process:spire-agent"), deps).pids.sort(), [7, 9]);
  assert.deepEqual(sent.sort(), [[7, "SIGTERM"], [9, "SIGTERM"]]);
  sent.length = 0;
  const pidfile = join(dir, "agent.pid");
  writeFileSync(pidfile, "1234\n");
  assert.deepEqual(signalSpireAgent(parseSignalSpec(`pidfile:${pidfile}:SIGINT`), deps).pids, [1234]);
  assert.deepEqual(sent, [[1234, "SIGINT"]]);
  sent.length = 0;
  writeFileSync(pidfile, "garbage");
  assert.match(signalSpireAgent(parseSignalSpec(`pidfile:${pidfile}`), deps).note ?? "", /does not hold a process ID/);
  assert.match(signalSpireAgent(parseSignalSpec("process:other"), deps).note ?? "", /no process named other/);
  assert.deepEqual(signalSpireAgent(parseSignalSpec("none"), deps).pids, []);
  assert.deepEqual(sent, [], "nothing else was signalled");
  // a process that exited in between is not an error
  const gone = { ...deps, kill: () => { throw Object.assign(new Error("no such process"), { code: "ESRCH" }); } };
  assert.deepEqual(signalSpireAgent(parseSignalSpec("process:spire-agent"), gone).pids, []);
});

function mkdirp(p: string): void {
  mkdirSync(p, { recursive: true });
}
