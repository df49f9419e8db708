/**
 * The swtpm harness itself: parallel instances are distinct real TPMs with EK certificates from the
 * harness's own CA, both transports answer, the abrmd transport flushes like /dev/tpmrm0, and stop()
 * leaves no process or directory behind.
 */
import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { decodeExact, TPM2B_PUBLIC } from "@fleetd/verify";
import { keyObjectFromTpmPublic } from "@fleetd/verify/tpm";
import { SWTPM_EK, SWTPM_PLATFORM_CERT_INDEX, startAbrmd, startSwtpm, type Swtpm, type Tpm2Runner, Tpm2ToolError } from "./swtpm.js";

const hex32 = (n: number) => `0x${n.toString(16)}`;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== "ESRCH";
  }
}

function assertGone(pids: number[], dirs: string[]): void {
  for (const pid of pids) assert.equal(alive(pid), false, `process ${pid} still running`);
  for (const d of dirs) assert.equal(existsSync(d), false, `${d} still exists`);
}

/** SPKI DER of a TPM2B_PUBLIC file, through fleetd's own TPM structure decoding. */
function spkiOfTpm2bPublic(file: string): Buffer {
  const pub = decodeExact(TPM2B_PUBLIC, new Uint8Array(readFileSync(file)));
  return keyObjectFromTpmPublic(pub).export({ type: "spki", format: "der" });
}

async function transientHandles(t: Tpm2Runner): Promise<string[]> {
  const { stdout } = await t.tpm2("getcap", ["handles-transient"]);
  return stdout.split("\n").map((l) => l.replace(/^-\s*/, "").trim()).filter((l) => l.startsWith("0x"));
}

async function readNvCert(tpm: Swtpm, index: number, out: string): Promise<X509Certificate> {
  await tpm.tpm2("nvread", [hex32(index), "-C", "o", "-o", out]);
  return new X509Certificate(readFileSync(join(tpm.workDir, out)));
}

test("two swtpms in parallel are distinct TPMs with EK certificates chained to their own CA; stop() leaves nothing", async () => {
  const tpms = await Promise.all([startSwtpm(), startSwtpm()]);
  const [a, b] = tpms;
  const pids = tpms.map((t) => t.pid);
  const dirs = tpms.map((t) => t.dir);
  try {
    assert.notEqual(a.port, b.port);
    for (const t of tpms) {
      assert.equal(t.ctrlPort, t.port + 1, "the swtpm TCTI needs the control channel at port + 1");
      assert.equal(t.tcti, `swtpm:host=127.0.0.1,port=${t.port}`);
      assert.ok(alive(t.pid));
    }

    const eks: Buffer[] = [];
    const rsaCerts: X509Certificate[] = [];
    for (const t of tpms) {
      await t.tpm2("createek", ["-G", "rsa", "-c", "ek.ctx", "-u", "ek.pub"]);
      const ekSpki = spkiOfTpm2bPublic(join(t.workDir, "ek.pub"));
      eks.push(ekSpki);

      // What swtpm_setup provisioned: both EKs persistent, their certificates and the platform certificate in NV.
      const persistent = (await t.tpm2("getcap", ["handles-persistent"])).stdout;
      assert.match(persistent, new RegExp(hex32(SWTPM_EK.rsa2048.handle), "i"));
      assert.match(persistent, new RegExp(hex32(SWTPM_EK.eccP384.handle), "i"));
      const nv = (await t.tpm2("getcap", ["handles-nv-index"])).stdout.toLowerCase();
      for (const i of [SWTPM_EK.rsa2048.certIndex, SWTPM_EK.eccP384.certIndex, SWTPM_PLATFORM_CERT_INDEX]) assert.match(nv, new RegExp(hex32(i), "i"));
      const pcrs = (await t.tpm2("getcap", ["pcrs"])).stdout;
      assert.match(pcrs, /sha1: \[ 0, 1, 2/);
      assert.match(pcrs, /sha256: \[ 0, 1, 2/);

      // The RSA EK certificate in NV certifies the key tpm2_createek derives, and chains to the harness CA.
      const cert = await readNvCert(t, t.ek.rsa.certIndex, "ek-rsa.der");
      rsaCerts.push(cert);
      assert.deepEqual(cert.publicKey.export({ type: "spki", format: "der" }), ekSpki);
      assert.deepEqual(cert.raw, readFileSync(t.ek.rsa.certFile ?? ""), "NV holds the certificate swtpm_setup wrote");
      const issuer = new X509Certificate(readFileSync(t.caCerts.issuer));
      const root = new X509Certificate(readFileSync(t.caCerts.root));
      assert.ok(cert.checkIssued(issuer) && cert.verify(issuer.publicKey), "EK cert signed by the local CA");
      assert.ok(issuer.checkIssued(root) && issuer.verify(root.publicKey), "local CA signed by its root");
      assert.ok(root.verify(root.publicKey), "root is self-signed");

      // The ECC EK certificate is for the persistent P-384 EK.
      const ecc = await readNvCert(t, t.ek.ecc.certIndex, "ek-ecc.der");
      await t.tpm2("readpublic", ["-c", hex32(t.ek.ecc.handle), "-o", "ek384.pub"]);
      assert.deepEqual(ecc.publicKey.export({ type: "spki", format: "der" }), spkiOfTpm2bPublic(join(t.workDir, "ek384.pub")));
      assert.equal(ecc.publicKey.asymmetricKeyDetails?.namedCurve, "secp384r1");
      assert.ok(ecc.verify(issuer.publicKey));
    }
    assert.notDeepEqual(eks[0], eks[1], "two instances must have different EKs");
    const bIssuer = new X509Certificate(readFileSync(b.caCerts.issuer));
    assert.equal(rsaCerts[0]?.verify(bIssuer.publicKey), false, "each instance has its own CA");

    // A failing tool reports its stderr.
    await assert.rejects(a.tpm2("readpublic", ["-c", "0x81ffffff"]), (e: unknown) => e instanceof Tpm2ToolError && /readpublic/.test(e.message) && e.stderr.length > 0);
  } finally {
    await Promise.all(tpms.map((t) => t.stop()));
  }
  assertGone(pids, dirs);
  await a.stop(); // idempotent
});

test("Unix socket transport answers, with RSA-3072 EK and sha256 only", async () => {
  const tpm = await startSwtpm({ unixSocket: true, rsaKeySize: 3072, pcrBanks: ["sha256"], platformCert: false });
  try {
    assert.equal(tpm.transport, "unix");
    assert.equal(tpm.tcti, `swtpm:path=${tpm.socketPath}`);
    const persistent = (await tpm.tpm2("getcap", ["handles-persistent"])).stdout;
    assert.match(persistent, new RegExp(hex32(SWTPM_EK.rsa3072.handle), "i"));
    assert.doesNotMatch(persistent, new RegExp(hex32(SWTPM_EK.rsa2048.handle), "i"));
    const cert = await readNvCert(tpm, SWTPM_EK.rsa3072.certIndex, "ek3072.der");
    assert.equal(cert.publicKey.asymmetricKeyDetails?.modulusLength, 3072);
    const nv = (await tpm.tpm2("getcap", ["handles-nv-index"])).stdout.toLowerCase();
    assert.doesNotMatch(nv, new RegExp(hex32(SWTPM_PLATFORM_CERT_INDEX), "i"));
    assert.doesNotMatch((await tpm.tpm2("getcap", ["pcrs"])).stdout, /sha1: \[ 0/);
  } finally {
    await tpm.stop();
  }
  assertGone([tpm.pid], [tpm.dir]);
});

test("abrmd transport flushes a client's transient objects when it disconnects, as /dev/tpmrm0 does", async () => {
  const tpm = await startSwtpm();
  const rm = await startAbrmd(tpm);
  try {
    // Raw swtpm: the object outlives the tool (this is what the resource manager must change).
    await tpm.tpm2("createprimary", ["-C", "o", "-G", "ecc", "-c", "raw.ctx"]);
    assert.equal((await transientHandles(tpm)).length, 1);
    await tpm.flushTransient();
    assert.deepEqual(await transientHandles(tpm), []);

    // Through abrmd: nothing left in the TPM after the tool exits, and the saved context still loads.
    await rm.tpm2("createprimary", ["-C", "o", "-G", "ecc", "-c", "rm.ctx"]);
    assert.deepEqual(await transientHandles(tpm), []);
    await rm.tpm2("readpublic", ["-c", "rm.ctx"]);
    assert.deepEqual(await transientHandles(tpm), []);
    assert.match(rm.tcti, /^tabrmd:/);
    assert.match(rm.env["DBUS_SESSION_BUS_ADDRESS"] ?? "", /^unix:path=/);
  } finally {
    await tpm.stop(); // stops the abrmd and its bus first
  }
  assertGone([tpm.pid, rm.pid, rm.busPid], [tpm.dir, rm.dir]);
});
