/**
 * talos-config-server as an operator runs it: `node talos-config-server/dist/main.js --config FILE`, a separate
 * process with HTTPS (a certificate made by openssl here), the CA key on SoftHSM2 through PKCS#11 (PIN by
 * environment variable), the NetBox token by environment variable, the attestation world's NetBox, swtpm and
 * site authorities. Checked: /healthz over TLS pinned to that certificate (another CA fails); a full intake and
 * provision through the process, the bundle state file rewritten after issuance, the LDevID lifetime from the
 * configuration; an unknown TPM's challenge listed by `fleetd pending` from the same configuration file; the
 * start-up refusals (plain HTTP outside the lab, bad fields with their path, a token in the file); SIGTERM.
 */
import { issued } from "./machine.js";
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ekBindingFromCertificate, readCertificate } from "@fleetd/verify/ek";
import { listDevices } from "@fleetd/platform/netbox";
import { parseBundleState } from "@fleetd/platform/pki";
import { attest, AttestationRefused, type ServerTransport } from "@fleetd/platform/protocol/client";
import { TcpTransport, TpmClient } from "@fleetd/platform/tpmclient";
import { ManagedProcess } from "../harness/managedProcess.js";
import { freePort, waitFor } from "../harness/ports.js";
import { startSwtpm } from "../harness/swtpm.js";
import { fleetd } from "../netbox/fixture.js";
import { httpsRequest, MAIN, makeCert, startServerProcess, type ServerProcess } from "./serverProcess.js";
import { NODE, startWorld, type World } from "./world.js";
import { TALOS_VERSION } from "../talos/goTools.js";

let w: World;
let sp: ServerProcess;
let dir: string;
let certPem: string;
let otherCaPem: string;
let configFile: string;
let bundleFile: string;
let url: string;
let proc: ManagedProcess;
let env: NodeJS.ProcessEnv;
let writeConfig: ServerProcess["writeConfig"];

const transport = (): ServerTransport => sp.transport();

/** Runs main.js to completion (for configurations that must be refused at start-up). */
function startupRefusal(file: string, extraEnv: NodeJS.ProcessEnv = {}): { code: number | null; stderr: string; stdout: string } {
  const r = spawnSync(process.execPath, [MAIN, "--config", file], { encoding: "utf8", env: { ...env, ...extraEnv }, timeout: 60_000 });
  return { code: r.status, stderr: r.stderr, stdout: r.stdout };
}

const server = (c: Record<string, unknown>) => c["server"] as Record<string, unknown>;

before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION });
  sp = await startServerProcess(w);
  ({ dir, certPem, configFile, bundleFile, url, env, proc, writeConfig } = sp);
  otherCaPem = readFileSync(makeCert(dir, "someone-else.test", "IP:127.0.0.1").cert, "utf8");
}, { timeout: 20 * 60_000 });

after(async () => {
  await sp?.stop();
  await w?.stop();
});

test("/healthz over TLS, pinned to the server's certificate; another CA's trust fails", async () => {
  const ok = await httpsRequest(`${url}/healthz`, { ca: certPem });
  assert.equal(ok.status, 200);
  assert.deepEqual(JSON.parse(ok.text), { ok: true });
  await assert.rejects(httpsRequest(`${url}/healthz`, { ca: otherCaPem }), (e: NodeJS.ErrnoException) => /self[- ]signed|unable to verify|UNABLE_TO_VERIFY|DEPTH_ZERO/i.test(`${e.code} ${e.message}`));
  const plain = await fetch(url.replace("https:", "http:") + "/healthz").then((r) => r.status, () => "refused");
  assert.notEqual(plain, 200, "no plain HTTP on the TLS port");
});

test("intake and provision through the server process: certificates with the configured 7-day lifetime, bundle state saved, config once", async () => {
  assert.equal(parseBundleState(readFileSync(bundleFile, "utf8")).cas[0]?.lastIssuance, null, "nothing issued yet");
  const run = async (mode: "intake" | "provision") => {
    const tpm = w.client();
    try {
      return await attest({ tpm, server: transport(), claims: w.claims({ mode }), eventLog: w.eventLog });
    } finally {
      await tpm.close();
    }
  };
  assert.equal((await run("intake")).mode, "intake");
  const p = await run("provision");
  const ldevid = new X509Certificate(Buffer.from(issued(p).ldevid.certificate));
  const days = (Date.parse(ldevid.validTo) - Date.parse(ldevid.validFrom)) / 86_400_000;
  assert.ok(days > 6.9 && days <= 7.01, `LDevID lives 7 days as configured (${days})`);
  assert.ok(ldevid.checkIssued(new X509Certificate(w.caPem)), "issued by the CA on the token");
  const saved = parseBundleState(readFileSync(bundleFile, "utf8"));
  assert.ok(saved.cas[0]?.lastIssuance, "the issuance was recorded in the bundle state file");
  assert.equal(saved.cas[0]?.lastNotAfter?.toISOString(), new Date(ldevid.validTo).toISOString());
  const cfg = await httpsRequest(`${url}/talos/config?uuid=${w.claims().uuid}&code=${p.installCode}`, { ca: certPem });
  assert.equal(cfg.status, 200);
  assert.match(cfg.text, new RegExp(`hostname: ${NODE}`));
  assert.equal((await httpsRequest(`${url}/talos/config?uuid=${w.claims().uuid}&code=${p.installCode}`, { ca: certPem })).status, 404);
  const admin = w.fleet.client(w.fleet.nb.authorization.replace(/^Bearer /, ""));
  for (let i = 0; i < 50 && (await listDevices(admin, { name: NODE }))[0]?.status !== "active"; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal((await listDevices(admin, { name: NODE }))[0]?.status, "active");
  const spec = await httpsRequest(`${url}/openapi.yaml`, { ca: certPem });
  assert.equal(spec.status, 200);
  assert.match(spec.text, /^openapi: 3\.1\./);
});

test("an unknown TPM's challenge is pending; `fleetd pending` lists it from the same configuration file", async () => {
  const other = await startSwtpm({ pcrBanks: ["sha1", "sha256"] });
  const bindings: string[] = [];
  try {
    for (const index of [other.ek.rsa.certIndex, other.ek.ecc.certIndex]) {
      const out = join(dir, `other-ek-${index.toString(16)}.crt`);
      await other.tpm2("nvread", [`0x${index.toString(16)}`, "-C", "o", "-o", out]);
      bindings.push(ekBindingFromCertificate(readCertificate(new Uint8Array(readFileSync(out))).cert));
    }
    const claims = w.claims({ serial: "STRANGER-42", macs: ["02:00:00:00:00:42", "02:00:00:00:00:43"] });
    for (let i = 0; i < 2; i++) {
      const tpm = new TpmClient(new TcpTransport(other.host, other.port));
      try {
        await assert.rejects(attest({ tpm, server: transport(), claims, eventLog: w.eventLog }), (e) => e instanceof AttestationRefused && e.status === 403 && e.pending);
      } finally {
        await tpm.close();
      }
    }
  } finally {
    await other.stop();
  }
  // no NetBox token needed: pending reads the state database named by the configuration file
  const cliEnv = { FLEETD_NETBOX_TOKEN: "", FLEETD_CONFIG: "" };
  const json = fleetd(["pending", "--config", configFile, "--json"], cliEnv);
  assert.equal(json.code, 0, json.stderr);
  const rows = (JSON.parse(json.stdout) as { pending: { ekBinding: string; serial: string; macs: string[]; sourceAddress: string; firstSeen: string; lastSeen: string; count: number }[] }).pending;
  assert.deepEqual(rows.map((r) => r.ekBinding).sort(), [...bindings].sort(), "both EKs of the unknown TPM, by binding");
  for (const r of rows) {
    assert.equal(r.serial, "STRANGER-42");
    assert.deepEqual(r.macs, ["02:00:00:00:00:42", "02:00:00:00:00:43"]);
    assert.match(r.sourceAddress, /127\.0\.0\.1$/);
    assert.equal(r.count, 2, "seen twice");
    assert.ok(Date.parse(r.firstSeen) < Date.parse(r.lastSeen), "first and last seen differ");
  }
  const table = fleetd(["pending", "--config", configFile], cliEnv);
  assert.equal(table.code, 0, table.stderr);
  const lines = table.stdout.trim().split("\n");
  assert.match(lines[0] ?? "", /^EK BINDING\s+CLAIMED SERIAL\s+CLAIMED MACS\s+SOURCE\s+FIRST SEEN\s+LAST SEEN\s+COUNT$/);
  for (const b of bindings) assert.ok(lines.some((l) => l.startsWith(b) && l.includes("STRANGER-42") && l.includes("02:00:00:00:00:42,02:00:00:00:00:43") && /\s2$/.test(l)), `a row for ${b}`);
  assert.match(lines.at(-1) ?? "", /^2 pending EKs/);
  const metrics = await httpsRequest(`${url}/metrics`, { ca: certPem });
  assert.match(metrics.text, /^fleetd_attestation_pending_eks 2$/m);

  const missing = fleetd(["pending", "--config", writeConfig((c) => void delete server(c)["stateDb"]), "--json"], cliEnv);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /server\.stateDb/);
  const nodb = fleetd(["pending", "--config", writeConfig((c) => void (server(c)["stateDb"] = join(dir, "nothing-here.db")))], cliEnv);
  assert.equal(nodb.code, 2);
  assert.match(nodb.stderr, /no state database at .*nothing-here\.db/);
});

test("plain HTTP without mode: lab is refused at start-up, with the reason", () => {
  const r = startupRefusal(writeConfig((c) => void delete server(c)["tls"]));
  assert.equal(r.code, 2);
  assert.match(r.stderr, /server\.tls: required: plain HTTP is allowed only with server\.mode: lab/);
  assert.equal(r.stdout, "", "nothing started, nothing logged");
});

test("mode: lab serves plain HTTP; the NetBox token may come from netbox.tokenFile", async () => {
  const port = await freePort();
  const tokenFile = join(dir, "netbox-token");
  writeFileSync(tokenFile, `${w.fleet.handler.token}\n`, { mode: 0o600 });
  const file = writeConfig((c) => {
    const s = server(c);
    s["mode"] = "lab";
    delete s["tls"];
    s["listen"] = { host: "127.0.0.1", port };
    s["stateDb"] = join(dir, "lab-state", "state.db");
    (c["netbox"] as Record<string, unknown>)["tokenFile"] = tokenFile;
  });
  const lab = new ManagedProcess("talos-config-server-lab", join(dir, "lab.log"), process.execPath, [MAIN, "--config", file], { env: { ...env, FLEETD_NETBOX_TOKEN: "" } });
  try {
    await waitFor("lab server", 60_000, async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).status === 200, () => lab.deadReason());
    assert.match(readFileSync(join(dir, "lab.log"), "utf8"), /lab mode: serving plain HTTP/);
  } finally {
    await lab.stop();
  }
  assert.equal(lab.exit?.code, 0);
});

test("a bad configuration is refused with the field's path; secrets never appear in messages", () => {
  const cases: [string, (c: Record<string, unknown>) => void, RegExp][] = [
    ["port not a number", (c) => void ((server(c)["listen"] as Record<string, unknown>)["port"] = "eighty"), /server\.listen\.port: .*expected number/],
    ["LDevID lifetime over 30 days", (c) => void ((server(c)["ca"] as Record<string, unknown>)["ldevidLifetimeDays"] = 45), /server\.ca\.ldevidLifetimeDays: .*30/],
    ["no state database", (c) => void delete server(c)["stateDb"], /server\.stateDb: /],
    ["unknown key", (c) => void (server(c)["tlsCert"] = "x"), /server: .*tlsCert/],
    ["PIN written into the file", (c) => void ((server(c)["ca"] as { signer: Record<string, unknown> }).signer["pin"] = "123456"), /server\.ca\.signer\.pin: /],
    ["mode misspelt", (c) => void (server(c)["mode"] = "prod"), /server\.mode: /],
    ["NetBox token in the file", (c) => void ((c["netbox"] as Record<string, unknown>)["token"] = w.fleet.handler.token), /netbox\.token: talos-config-server takes the NetBox token only from FLEETD_NETBOX_TOKEN or netbox\.tokenFile/],
    ["Talos site file broken", (c) => void ((server(c)["talos"] as Record<string, unknown>)["siteFile"] = configFile), /invalid Talos site file .*config-1\.yaml: /],
    ["TLS key missing", (c) => void ((server(c)["tls"] as Record<string, unknown>)["keyFile"] = join(dir, "none.key")), /server\.tls\.keyFile: cannot read .*none\.key: ENOENT/],
  ];
  for (const [what, mutate, message] of cases) {
    const r = startupRefusal(writeConfig(mutate));
    assert.equal(r.code, 2, `${what}: exit code (${r.stderr})`);
    assert.match(r.stderr, message, what);
    assert.ok(!r.stderr.includes(w.fleet.handler.token) && !r.stderr.includes("123456"), `${what}: no secret in the message`);
  }
  const notYaml = join(dir, "broken.yaml");
  writeFileSync(notYaml, "server: [unclosed\n");
  const y = startupRefusal(notYaml);
  assert.equal(y.code, 2);
  assert.match(y.stderr, /broken\.yaml is not valid YAML/);
  const noToken = startupRefusal(configFile, { FLEETD_NETBOX_TOKEN: "" });
  assert.equal(noToken.code, 2);
  assert.match(noToken.stderr, /netbox\.token: /);
  const unreadable = startupRefusal(writeConfig((c) => void ((c["netbox"] as Record<string, unknown>)["tokenFile"] = join(dir, "no-such-token"))), { FLEETD_NETBOX_TOKEN: "" });
  assert.equal(unreadable.code, 2);
  assert.match(unreadable.stderr, /netbox\.tokenFile: cannot read .*no-such-token: ENOENT/);
});

test("SIGTERM: stops accepting, closes the PKCS#11 session and the state, exits 0; no secret in its log", async () => {
  await proc.stop("SIGTERM");
  assert.deepEqual(proc.exit, { code: 0, signal: null });
  const log = readFileSync(proc.logFile, "utf8");
  assert.match(log, /talos-config-server stopped: listener closed, PKCS#11 session closed, state closed/);
  assert.ok(!log.includes(w.fleet.handler.token), "the NetBox token is never logged");
  assert.ok(!log.includes(process.env[w.hsm.pinEnv("fleetd-ca")] ?? "123456"), "the PIN is never logged");
  assert.ok(!/"code"\s*:\s*"[0-9a-f]{64}"/.test(log) && !/code=[0-9a-f]{64}/.test(log), "no install code in the log");
  await assert.rejects(httpsRequest(`${url}/healthz`, { ca: certPem }), "no longer listening");
});
