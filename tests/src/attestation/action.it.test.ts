/**
 * The action as Tinkerbell runs it, end to end and real on this machine: `fleetd-tink-action attest` as a
 * separate process, reading its claims from a sysfs/procfs tree (FLEETD_ROOT) that describes worker-1 and holds
 * the HookOS event log the world's swtpm was extended with, talking to the world's server (NetBox 4.7, SoftHSM2
 * CA, SQLite) over loopback HTTP (FLEETD_ALLOW_HTTP=lab), and to swtpm through a flush-on-close transport. LLDP
 * is real too: lldpd plays the top-of-rack switch in a network namespace at the far end of a veth pair, and the
 * action's own lldpd (receive-only) reads it on the near end.
 *
 * A workflow is run the way tink-agent runs one (tinkerbell.md §3): actions in order, the first non-zero exit
 * stops it. Here: attest → wipe (zeroes the disk image) → install (writes a Talos-like GPT image) → write-meta
 * (--code-file from the shared volume); Talos's own ADV reader checks META, and the code fetches the config once.
 */
import type { Claims } from "@fleetd/platform/protocol";
import { strict as assert } from "node:assert";
import { X509Certificate, createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { decodeExact } from "@fleetd/verify/codec";
import { buildGptImage } from "@fleetd/testkit/talosMeta";
import { TPMT_PUBLIC, spkiFromTpmPublic } from "@fleetd/verify/tpm";
import { EXIT } from "@fleetd/platform/cmd";
import { writeFakeRoot } from "@fleetd/tink-action/testing/fakeRoot";
import { selfSigned } from "@fleetd/tink-action/testing/selfSigned";
import { startLldpSwitchPort, type LldpSwitchPort } from "../harness/lldp.js";
import { runProcess } from "../harness/process.js";
import { startSwtpm } from "../harness/swtpm.js";
import { advread, TALOS_VERSION } from "../talos/goTools.js";
import { NODE, startWorld, type World } from "./world.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");
const CLI = join(repo, "tink-action/dist/cli.js");

let w: World;
let sw: LldpSwitchPort;
let dir: string;
before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION });
  const node = (w.claims().lldp ?? { chassisId: "", portId: "" }) as { chassisId: string; portId: string };
  sw = await startLldpSwitchPort({ device: node.chassisId, port: node.portId });
  dir = mkdtempSync(join(tmpdir(), "fleetd-action-it-"));
}, { timeout: 20 * 60_000 });
after(async () => {
  await sw?.stop();
  await w?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** worker-1's sysfs/procfs as the action reads it; `over` changes what the machine says. */
function machineRoot(name: string, over: { serial?: string; eventLog?: Uint8Array } = {}): string {
  const c = w.claims();
  return writeFakeRoot(join(dir, `root-${name}`), {
    serial: over.serial ?? c.serial,
    uuid: c.uuid.toUpperCase(), // SMBIOS tools print it upper case; the claim is lower case
    nics: [
      ...c.macs.map((mac, i) => ({ name: `eno${8303 + i * 100}`, mac })),
      { name: "docker0", mac: "02:42:ac:11:00:01", virtual: true },
    ],
    defaultRoute: "eno8303",
    eventLog: over.eventLog ?? w.eventLog,
  });
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  logs: Record<string, unknown>[];
}

async function action(args: string[], env: Record<string, string>, script = CLI): Promise<Run> {
  // The Workflow the Template would name: the world plays the handler and creates it (the server's gate reads it).
  const m = args.indexOf("--mode");
  if (args[0] === "attest" && m >= 0 && !env["FLEETD_WORKFLOW"]) {
    const mode = args[m + 1] as Claims["mode"];
    const claims = w.claims({ mode });
    await w.ensureWorkflow(NODE, claims);
    env = { ...env, FLEETD_WORKFLOW: claims.workflow };
  }
  const r = await runProcess(process.execPath, [script, ...args], { env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", ...env }, timeoutMs: 180_000 });
  const stderr = r.stderr.toString("utf8");
  const logs = stderr
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { code: r.code, stdout: r.stdout.toString("utf8"), stderr, logs };
}

/** The environment a Template gives the action, pointed at the world. */
function attestEnv(root: string, out: string, over: Record<string, string> = {}): Record<string, string> {
  return {
    FLEETD_SERVER: w.baseUrl,
    FLEETD_ALLOW_HTTP: "lab",
    FLEETD_TPM: `swtpm:${w.tpm.host}:${w.tpm.port}`,
    FLEETD_OUT: out,
    FLEETD_ROOT: root,
    FLEETD_BOOT_INTERFACE: sw.iface,
    FLEETD_LLDP_WAIT_SECONDS: "30",
    FLEETD_TIMEOUT_SECONDS: "60",
    ...over,
  };
}

/** tink-agent's rule: actions run in order; the first that exits non-zero fails the workflow, the rest never run. */
async function runWorkflow(steps: { name: string; run: () => Promise<number | null> }[]): Promise<{ ran: string[]; failed?: string }> {
  const ran: string[] = [];
  for (const s of steps) {
    ran.push(s.name);
    if ((await s.run()) !== 0) return { ran, failed: s.name };
  }
  return { ran };
}

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");
const out = (name: string) => join(dir, `out-${name}`);

function provisionWorkflow(root: string, outDir: string, disk: string, log: Run[]) {
  return [
    {
      name: "attest",
      run: async () => {
        const r = await action(["attest", "--mode", "provision"], attestEnv(root, outDir));
        log.push(r);
        return r.code;
      },
    },
    { name: "wipe", run: async () => (writeFileSync(disk, new Uint8Array(statSync(disk).size)), 0) },
    { name: "install", run: async () => (writeFileSync(disk, buildGptImage({}).bytes), 0) },
    {
      name: "write-meta",
      run: async () => {
        const r = await runProcess(process.execPath, [CLI, "write-meta", "--disk", disk, "--code-file", join(outDir, "install-code")], { timeoutMs: 60_000 });
        log.push({ code: r.code, stdout: r.stdout.toString(), stderr: r.stderr.toString(), logs: [] });
        return r.code;
      },
    },
  ];
}

test("intake through the CLI: claims from sysfs, LLDP from the switch, LDevID + LAK on the shared volume", async () => {
  const o = out("intake");
  const r = await action(["attest", "--mode", "intake"], attestEnv(machineRoot("ok"), o));
  assert.equal(r.code, EXIT.ok, r.stderr);
  const result = JSON.parse(readFileSync(join(o, "result.json"), "utf8"));
  assert.equal(result.mode, "intake");
  assert.equal(result.verdict, "pass");
  assert.equal(result.node, NODE);
  assert.equal(result.generation, 1);
  assert.deepEqual(result.claims, { serial: w.claims().serial, uuid: w.claims().uuid, macs: w.claims().macs, lldp: w.claims().lldp });
  assert.ok(!existsSync(join(o, "install-code")), "intake releases no install code");
  // The blobs are the TPM's key (no size prefix) and the certificate certifies exactly that key.
  const pub = new Uint8Array(readFileSync(join(o, "ldevid.pub")));
  const cert = new X509Certificate(readFileSync(join(o, "ldevid.crt")));
  assert.deepEqual(Buffer.from(spkiFromTpmPublic(decodeExact(TPMT_PUBLIC, pub))), cert.publicKey.export({ type: "spki", format: "der" }));
  const ca = new X509Certificate(readFileSync(join(o, "ca-bundle.pem")));
  assert.ok(cert.verify(ca.publicKey), "the LDevID chains to the bundle");
  assert.equal(readFileSync(join(o, "ldevid.crt"), "utf8").match(/BEGIN CERTIFICATE/g)?.length, 2, "ldevid.crt is the chain");
  assert.ok(new X509Certificate(readFileSync(join(o, "lak.crt"))).verify(ca.publicKey));
  assert.ok(readFileSync(join(o, "ldevid.priv")).length > 0 && readFileSync(join(o, "lak.priv")).length > 0);
  assert.ok(r.logs.some((l) => String(l["msg"]).startsWith(`LLDP on ${sw.iface}: `)), "the LLDP claim came from the wire");
});

test("refused provision (another serial in sysfs): exit 1 (EXIT.refused) with the reason; the stale code is removed; wipe and write-meta never run; the disk is unchanged", async () => {
  const o = out("refused");
  mkdirSync(o, { recursive: true });
  writeFileSync(join(o, "install-code"), "ab".repeat(32)); // left over from an earlier boot
  const disk = join(dir, "disk-refused.img");
  writeFileSync(disk, buildGptImage({}).bytes);
  const wm = await runProcess(process.execPath, [CLI, "write-meta", "--disk", disk, "--code", "cd".repeat(32)]);
  assert.equal(wm.code, 0, wm.stderr.toString());
  const before = sha256(disk);
  const log: Run[] = [];
  const wf = await runWorkflow(provisionWorkflow(machineRoot("wrong-serial", { serial: "SOMEONE-ELSE" }), o, disk, log));
  assert.deepEqual(wf, { ran: ["attest"], failed: "attest" });
  const r = log[0] as Run;
  assert.equal(r.code, EXIT.refused, r.stderr);
  assert.ok(r.logs.some((l) => l["code"] === "refused" && /claims\.serial/.test(String(l["msg"]))), r.stderr);
  assert.ok(!existsSync(join(o, "install-code")), "no install code on the shared volume");
  assert.equal(JSON.parse(readFileSync(join(o, "result.json"), "utf8")).verdict, "fail");
  assert.equal(sha256(disk), before, "the machine keeps its disk");
  assert.equal(advread(disk).tags["0x0b"]?.text, "cd".repeat(32), "the old META is still there");
});

test("no LLDP (FLEETD_LLDP=off): the claim is null and the switch-port gate refuses a node NetBox has a cable for", async () => {
  const o = out("no-lldp");
  const r = await action(["attest", "--mode", "provision"], attestEnv(machineRoot("ok"), o, { FLEETD_LLDP: "off" }));
  assert.equal(r.code, EXIT.refused, r.stderr);
  assert.ok(r.logs.some((l) => l["code"] === "refused" && /gate\.switchPort/.test(String(l["msg"]))), r.stderr);
  assert.ok(!existsSync(join(o, "install-code")));
});

test("provision workflow: attest → wipe → install → write-meta; Talos's reader finds the code in META; it fetches the config once", async () => {
  const o = out("provision");
  const disk = join(dir, "disk-provision.img");
  writeFileSync(disk, new Uint8Array(10 << 20).fill(0x5a)); // the previous OS
  const log: Run[] = [];
  const wf = await runWorkflow(provisionWorkflow(machineRoot("ok"), o, disk, log));
  assert.deepEqual(wf, { ran: ["attest", "wipe", "install", "write-meta"] }, log.map((l) => l.stderr).join("\n"));
  const code = readFileSync(join(o, "install-code"), "utf8");
  assert.match(code, /^[0-9a-f]{64}$/);
  assert.equal(statSync(join(o, "install-code")).mode & 0o777, 0o600);
  for (const l of log) assert.ok(!l.stdout.includes(code) && !l.stderr.includes(code), "the code is never printed or logged");
  assert.ok(!readFileSync(join(o, "result.json"), "utf8").includes(code));
  const result = JSON.parse(readFileSync(join(o, "result.json"), "utf8"));
  assert.equal(result.mode, "provision");
  assert.equal(result.generation, 2);
  assert.equal(result.installCode, true);
  const t = advread(disk);
  assert.equal(t.tags["0x0b"]?.text, code, "META key 0x0b holds the code");
  assert.ok(t.copies.every((c) => c.valid));
  const uuid = w.claims().uuid;
  const fetched = await fetch(`${w.baseUrl}/talos/config?uuid=${uuid}&code=${code}`);
  assert.equal(fetched.status, 200, "the code the action wrote is the one the server stored");
  assert.match(await fetched.text(), new RegExp(`hostname: ${NODE}`));
  assert.equal((await fetch(`${w.baseUrl}/talos/config?uuid=${uuid}&code=${code}`)).status, 404, "once");
});

test("the image's bundle (one file, no node_modules) attests too: attest mode on the now active node", async () => {
  const bundle = join(dir, "bundle", "fleetd-tink-action.mjs");
  const b = await runProcess(process.execPath, [join(repo, "tink-action/scripts/bundle.mjs"), bundle], { timeoutMs: 120_000 });
  assert.equal(b.code, 0, b.stderr.toString());
  const o = out("attest");
  const r = await action(["attest", "--mode", "attest"], attestEnv(machineRoot("ok"), o), bundle);
  assert.equal(r.code, EXIT.ok, r.stderr);
  const result = JSON.parse(readFileSync(join(o, "result.json"), "utf8"));
  assert.equal(result.mode, "attest");
  assert.equal(result.verdict, "pass");
  // the LDevID of the provision is not due for renewal: the pass issues nothing (and leaves no key files)
  assert.equal(result.ldevid, undefined, "no certificate: renewal not due");
  assert.ok(!existsSync(join(o, "ldevid.crt")) && !existsSync(join(o, "ldevid.priv")));
  assert.ok(!existsSync(join(o, "install-code")));
});

test("an unknown TPM retries while pending, is listed as pending, and exits 3 (EXIT.pending) when FLEETD_TIMEOUT_SECONDS runs out", async () => {
  const other = await startSwtpm({ pcrBanks: ["sha1", "sha256"] });
  try {
    const o = out("pending");
    const r = await action(
      ["attest", "--mode", "intake"],
      attestEnv(machineRoot("stranger", { serial: "STRANGER-7" }), o, { FLEETD_TPM: `swtpm:${other.host}:${other.port}`, FLEETD_TIMEOUT_SECONDS: "12", FLEETD_LLDP: "off" }),
    );
    assert.equal(r.code, EXIT.pending, r.stderr);
    const waits = r.logs.filter((l) => /^pending: /.test(String(l["msg"])));
    assert.ok(waits.length >= 1, "it waited and tried again");
    assert.ok(r.logs.some((l) => l["code"] === "pending-timeout"));
    const pending = (await w.store.listPendingEks()).filter((p) => p.serial === "STRANGER-7");
    assert.ok(pending.length > 0, "listed as pending with its claimed serial");
    assert.ok(pending.every((p) => p.count === waits.length + 1), `every attempt was seen by the server (${waits.length + 1} attempts; counts ${pending.map((p) => p.count).join(",")})`);
    assert.equal(JSON.parse(readFileSync(join(o, "result.json"), "utf8")).verdict, "pending");
    assert.ok(!existsSync(join(o, "ldevid.crt")));
  } finally {
    await other.stop();
  }
});

test("https with a pinned CA: a server whose certificate another CA signed is refused before any request (exit 5, EXIT.unavailable), even if NODE_EXTRA_CA_CERTS trusts it", async () => {
  const good = selfSigned("127.0.0.1", ["IP:127.0.0.1"]);
  const wrong = selfSigned("some other CA");
  let requests = 0;
  const srv: HttpsServer = createHttpsServer({ cert: good.cert, key: good.key }, (req, res) => {
    requests++;
    req.resume();
    res.writeHead(403, { "content-type": "application/json" }).end(JSON.stringify({ error: "refused", reasons: [{ check: "test.tinyServer", detail: "the pinned-CA test server refuses everyone" }] }));
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const url = `https://127.0.0.1:${(srv.address() as { port: number }).port}`;
  const extra = join(dir, "extra-ca.pem");
  writeFileSync(extra, good.cert);
  try {
    const env = (ca: string, more: Record<string, string> = {}) => ({ ...attestEnv(machineRoot("ok"), out("tls"), { FLEETD_SERVER: url, FLEETD_SERVER_CA: ca, FLEETD_LLDP: "off" }), FLEETD_ALLOW_HTTP: "", ...more });
    const bad = await action(["attest", "--mode", "attest"], env(wrong.cert));
    assert.equal(bad.code, EXIT.unavailable, bad.stderr);
    assert.ok(bad.logs.some((l) => l["code"] === "transport" && /attestation server tls/.test(String(l["msg"]))), bad.stderr);
    const extraRoots = await action(["attest", "--mode", "attest"], env(wrong.cert, { NODE_EXTRA_CA_CERTS: extra }));
    assert.equal(extraRoots.code, EXIT.unavailable, "NODE_EXTRA_CA_CERTS adds nothing to the pinned CA");
    assert.equal(requests, 0, "no request reached the server");
    // The right CA gets through TLS, and the server's refusal is reported as one.
    const ok = await action(["attest", "--mode", "attest"], env(good.cert));
    assert.equal(requests, 1);
    assert.equal(ok.code, EXIT.refused, ok.stderr);
    assert.ok(ok.logs.some((l) => /test\.tinyServer/.test(String(l["msg"]))));
    // Plain http to a server without FLEETD_ALLOW_HTTP=lab is a configuration error, before anything else.
    const plain = await action(["attest", "--mode", "attest"], { ...env(good.cert), FLEETD_SERVER: w.baseUrl });
    assert.equal(plain.code, EXIT.usage);
  } finally {
    await new Promise<void>((r) => srv.close(() => r()));
  }
});
