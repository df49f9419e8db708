import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { ActionConfigError, loadConfig, parseTpmSpec } from "./config.js";
import { selfSigned } from "./testing/selfSigned.js";

const ca = selfSigned("fleetd test CA");
const dir = mkdtempSync(join(tmpdir(), "fleetd-config-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const base = { FLEETD_SERVER: "https://fleetd.example:8443", FLEETD_SERVER_CA: ca.cert, FLEETD_MODE: "provision", FLEETD_WORKFLOW: "wf-worker-1" };

function refused(env: NodeJS.ProcessEnv, pattern: RegExp): void {
  assert.throws(() => loadConfig(env), (e: unknown) => e instanceof ActionConfigError && e.issues.some((i) => pattern.test(i)), `expected a refusal matching ${pattern}`);
}

test("https with an inline pinned CA; the defaults", () => {
  const c = loadConfig({ ...base, PATH: "/usr/bin", FLEETD_BOOT_INTERFACE: "" });
  assert.equal(c.server.origin, "https://fleetd.example:8443");
  assert.match(c.ca ?? "", /^-----BEGIN CERTIFICATE-----/);
  assert.equal(c.mode, "provision");
  assert.deepEqual(c.tpm, { kind: "device", path: "/dev/tpmrm0" });
  assert.equal(c.out, "/worker/fleetd");
  assert.equal(c.timeoutSeconds, 600);
  assert.equal(c.root, "/");
  assert.equal(c.lldp, "lldpd");
  assert.equal(c.lldpWaitSeconds, 35);
  assert.equal(c.bootInterface, undefined, "an empty value counts as unset");
});

test("the CA from a file; a file or inline text without a certificate, or with a broken one, is refused", () => {
  const f = join(dir, "ca.pem");
  writeFileSync(f, "junk before\n" + ca.cert);
  assert.equal(loadConfig({ ...base, FLEETD_SERVER_CA: f }).ca, ca.cert.trim() + "\n");
  writeFileSync(join(dir, "empty.pem"), "no certificate here\n");
  refused({ ...base, FLEETD_SERVER_CA: join(dir, "empty.pem") }, /no PEM certificate/);
  refused({ ...base, FLEETD_SERVER_CA: join(dir, "absent.pem") }, /cannot read .*ENOENT/);
  refused({ ...base, FLEETD_SERVER_CA: "ca.pem" }, /neither PEM nor an absolute file path/);
  refused({ ...base, FLEETD_SERVER_CA: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----" }, /does not parse/);
  refused({ ...base, FLEETD_SERVER_CA: undefined }, /FLEETD_SERVER_CA: required for https/);
});

test("plain http only with FLEETD_ALLOW_HTTP=lab; other schemes, URL credentials and other ALLOW values are refused", () => {
  refused({ ...base, FLEETD_SERVER: "http://127.0.0.1:8080" }, /plain http:\/\/ is refused/);
  assert.equal(loadConfig({ ...base, FLEETD_SERVER: "http://127.0.0.1:8080", FLEETD_SERVER_CA: undefined, FLEETD_ALLOW_HTTP: "lab" }).ca, undefined);
  refused({ ...base, FLEETD_SERVER: "http://127.0.0.1:8080", FLEETD_ALLOW_HTTP: "yes" }, /FLEETD_ALLOW_HTTP: only "lab"/);
  refused({ ...base, FLEETD_SERVER: "ftp://fleetd.example" }, /FLEETD_SERVER: must be an https/);
  refused({ ...base, FLEETD_SERVER: "https://user:pw@fleetd.example" }, /credentials in the URL/);
});

test("required values, modes, numbers and interface names are checked", () => {
  refused({ ...base, FLEETD_WORKFLOW: undefined }, /FLEETD_WORKFLOW: is required/);
  refused({ ...base, FLEETD_SERVER: undefined }, /FLEETD_SERVER: is required/);
  refused({ ...base, FLEETD_MODE: "install" }, /FLEETD_MODE: must be one of intake, provision, attest, wipe/);
  refused({ ...base, FLEETD_TIMEOUT_SECONDS: "10m" }, /FLEETD_TIMEOUT_SECONDS: must be a whole number/);
  refused({ ...base, FLEETD_TIMEOUT_SECONDS: "0" }, /FLEETD_TIMEOUT_SECONDS/);
  refused({ ...base, FLEETD_BOOT_INTERFACE: "eth0*" }, /FLEETD_BOOT_INTERFACE/);
  refused({ ...base, FLEETD_OUT: "relative/dir" }, /FLEETD_OUT: must be an absolute path/);
  refused({ ...base, FLEETD_LLDP: "tcpdump" }, /FLEETD_LLDP/);
  assert.equal(loadConfig({ ...base, FLEETD_TIMEOUT_SECONDS: "45", FLEETD_LLDP: "off" }).timeoutSeconds, 45);
});

test("TPM paths: a device, swtpm's TCP port, a Unix socket; anything else is refused", () => {
  assert.deepEqual(parseTpmSpec("/dev/tpm0"), { kind: "device", path: "/dev/tpm0" });
  assert.deepEqual(parseTpmSpec("swtpm:127.0.0.1:2321"), { kind: "tcp", host: "127.0.0.1", port: 2321 });
  assert.deepEqual(parseTpmSpec("swtpm:[::1]:2321"), { kind: "tcp", host: "::1", port: 2321 });
  assert.deepEqual(parseTpmSpec("unix:/run/swtpm.sock"), { kind: "unix", path: "/run/swtpm.sock" });
  for (const bad of ["swtpm:127.0.0.1", "swtpm:host:70000", "tpmrm0", "unix:relative.sock", "mssim:127.0.0.1:2321"]) {
    assert.throws(() => parseTpmSpec(bad), ActionConfigError, bad);
  }
});
