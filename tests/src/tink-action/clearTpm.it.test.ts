/**
 * `fleetd-tink-action clear-tpm` on a real swtpm: with FLEETD_CLEAR_TPM=yes it runs TPM2_Clear with the
 * (empty) lockout authorization, after which an LDevID-like key blob created under the old SRK no longer loads
 * (the storage primary seed changed) while the EK, from the unchanged endorsement seed, is the same key.
 * Without the site's permission it changes nothing; with disableClear set or a lockout auth value it refuses
 * with the reason, and the TPM is unchanged.
 */
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { createEk, createLdevid, createSrk, load, readPermanent, TcpTransport, TpmClient, TpmError, type KeyBlobs } from "@fleetd/platform/tpmclient";
import { runTpm2 } from "../harness/swtpm.js";
import { startRawSwtpm, type RawSwtpm } from "../harness/swtpm-raw.js";

const CLI = join(resolve(fileURLToPath(import.meta.url), "../../../.."), "tink-action/dist/cli.js");
let swtpm: RawSwtpm;
let blob: KeyBlobs;
let ekBefore: Uint8Array;

/** One TPM connection per use: swtpm serves one client at a time, and the CLI and tpm2-tools need it too. */
async function withTpm<T>(fn: (tpm: TpmClient) => Promise<T>): Promise<T> {
  const tpm = new TpmClient(new TcpTransport(swtpm.host, swtpm.port));
  try {
    return await fn(tpm);
  } finally {
    await tpm.close();
  }
}

/** Does the LDevID blob still load under the owner hierarchy's SRK? Returns the refusal's name otherwise. */
const loadsUnderSrk = () => withTpm(async (tpm) => {
  const srk = await createSrk(tpm, "rsa");
  try {
    const k = await load(tpm, srk, blob);
    await tpm.flushContext(k.handle);
    return "loads";
  } catch (e) {
    if (e instanceof TpmError) return `${e.name}: ${e.message}`;
    throw e;
  } finally {
    await tpm.flushContext(srk.handle);
  }
});

const ekPublic = () => withTpm(async (tpm) => {
  const ek = await createEk(tpm, "rsa");
  await tpm.flushContext(ek.handle);
  return ek.publicBytes;
});

function clearTpm(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((res) => {
    const p = spawn(process.execPath, [CLI, "clear-tpm"], { env: { ...process.env, FLEETD_TPM: `swtpm:${swtpm.host}:${swtpm.port}`, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (b: Buffer) => (stdout += b.toString("utf8")));
    p.stderr.on("data", (b: Buffer) => (stderr += b.toString("utf8")));
    p.on("close", (code) => res({ code, stdout, stderr }));
  });
}

const tpm2 = (tool: string, args: string[]) => runTpm2(swtpm.tcti ?? "", {}, tool, args, { cwd: swtpm.dir });

before(async () => {
  swtpm = await startRawSwtpm();
  blob = await withTpm(async (tpm) => {
    const srk = await createSrk(tpm, "rsa");
    const b = await createLdevid(tpm, srk, "rsa");
    await tpm.flushContext(srk.handle);
    return b;
  });
  ekBefore = await ekPublic();
});
after(async () => {
  await swtpm?.stop();
});

test("without FLEETD_CLEAR_TPM=yes nothing is cleared", async () => {
  const r = await clearTpm({});
  assert.equal(r.code, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout).cleared, false);
  assert.match(JSON.parse(r.stdout).reason, /FLEETD_CLEAR_TPM is not yes/);
  assert.equal(await loadsUnderSrk(), "loads");
  assert.equal((await clearTpm({ FLEETD_CLEAR_TPM: "maybe" })).code, 2, "a bad value is a configuration error");
});

test("disableClear set: refused with the reason, the key still loads", async () => {
  await tpm2("clearcontrol", ["-C", "l", "s"]);
  const r = await clearTpm({ FLEETD_CLEAR_TPM: "yes" });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.equal(JSON.parse(r.stdout).code, "tpm-clear-disabled");
  assert.match(r.stderr, /refused \(tpm-clear-disabled\): TPMA_PERMANENT.disableClear is set/);
  assert.equal(await loadsUnderSrk(), "loads");
  await tpm2("clearcontrol", ["-C", "p", "c"]); // only the platform hierarchy may allow Clear again
  assert.equal((await withTpm(readPermanent)).disableClear, false);
});

test("a lockout authorization value set: refused with the reason, the key still loads", async () => {
  await tpm2("changeauth", ["-c", "l", "lockout-secret"]);
  const r = await clearTpm({ FLEETD_CLEAR_TPM: "yes" });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.equal(JSON.parse(r.stdout).code, "tpm-lockout-auth-set");
  assert.equal(await loadsUnderSrk(), "loads");
  await tpm2("changeauth", ["-c", "l", "-p", "lockout-secret"]);
  assert.equal((await withTpm(readPermanent)).lockoutAuthSet, false);
});

test("cleared: the old LDevID blob no longer loads (new storage seed); the EK is unchanged", async () => {
  const r = await clearTpm({ FLEETD_CLEAR_TPM: "yes" });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const out = JSON.parse(r.stdout) as { cleared: boolean; before: { disableClear: boolean }; after: { lockoutAuthSet: boolean } };
  assert.equal(out.cleared, true);
  const refused = await loadsUnderSrk();
  assert.match(refused, /^TPM_RC_INTEGRITY: TPM2_Load: TPM_RC_INTEGRITY \(parameter 1\)/);
  assert.deepEqual(Buffer.from(await ekPublic()), Buffer.from(ekBefore), "the EK comes from the unchanged endorsement seed");
  process.stdout.write(`# after clear, the old blob: ${refused}\n`);
});
