/**
 * The protocol through the real resource manager tpm2-abrmd (Debian's, as on machines without the kernel RM
 * in use), reached by fleetd's own client over tabrmd-bridge: evidence on one abrmd connection, confirm on the
 * next. abrmd drops a connection's transients when it closes and refuses its old handles; EK and SRK are
 * recreated, the AK reloaded from blobs. tpm2-tools, through the same abrmd, create the SRK from SPIRE's
 * template attributes and load fleetd's blobs: the same SRK Name and the same AK Name.
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { encode } from "@fleetd/verify/codec";
import { verifyQuote, verifyTpmSignature, Checks } from "@fleetd/verify/attest";
import { makeCredential } from "@fleetd/verify/credential";
import { hex } from "@fleetd/verify/crypto";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { TPM2B_PRIVATE } from "@fleetd/verify/tpm";
import {
  activateCredential,
  createAk,
  createEk,
  createLdevid,
  createSrk,
  load,
  pcrRead,
  quote,
  sign,
  TpmClient,
  TpmError,
  UnixTransport,
  withTransients,
  type KeyAlg,
  type KeyBlobs,
} from "@fleetd/platform/tpmclient";
import { startRawSwtpm, type RawSwtpm } from "../harness/swtpm-raw.js";
import { startTabrmdBridge, type TabrmdBridge } from "../harness/tabrmd-bridge.js";

let swtpm: RawSwtpm;
let abrmd: TabrmdBridge;
before(async () => {
  swtpm = await startRawSwtpm();
  abrmd = await startTabrmdBridge(swtpm);
});
after(async () => {
  await abrmd?.stop();
  await swtpm?.stop();
});

const sha256 = (...parts: Uint8Array[]) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};
const connect = () => new TpmClient(new UnixTransport(abrmd.path));

for (const alg of ["rsa", "ecc"] as KeyAlg[]) {
  test(`${alg}: evidence and confirm on two tpm2-abrmd connections; the first one's handles are gone`, async () => {
    let akBlobs: KeyBlobs;
    let ldevidBlobs: KeyBlobs;
    let stale: number[];
    const tpm1 = connect();
    try {
      const ek = await createEk(tpm1, alg);
      const srk = await createSrk(tpm1, alg);
      akBlobs = await createAk(tpm1, srk, alg);
      ldevidBlobs = await createLdevid(tpm1, srk, alg);
      const ak = await load(tpm1, srk, akBlobs);
      const secret = new Uint8Array(randomBytes(32));
      const cred = makeCredential(ek.public, ak.name, secret);
      assert.deepEqual(await activateCredential(tpm1, ak, ek, cred.idObject, cred.encryptedSecret), secret);
      const sel = [{ hash: TPM_ALG.SHA256, pcrs: [0, 7, 16] }];
      const extra = sha256(Buffer.from("evidence via abrmd"));
      const q = await quote(tpm1, ak, sel, extra);
      const v = verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs: (await pcrRead(tpm1, sel)).values, expectedExtraData: extra });
      assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
      stale = await tpm1.getHandles(0x80);
      assert.deepEqual(new Set(stale), new Set([ek.handle, srk.handle, ak.handle]), "left loaded on purpose");
    } finally {
      await tpm1.close();
    }

    const tpm2 = connect();
    try {
      assert.deepEqual(await tpm2.getHandles(0x80), [], "a new connection sees none of the old connection's objects");
      for (const h of stale) await assert.rejects(tpm2.readPublic(h), (e: unknown) => e instanceof TpmError, `old handle 0x${h.toString(16)} is refused`);
      await withTransients(tpm2, async (t) => {
        const ek = t.keep(await createEk(tpm2, alg));
        const srk = t.keep(await createSrk(tpm2, alg));
        const ak = t.keep(await load(tpm2, srk, akBlobs));
        const code = new Uint8Array(randomBytes(32));
        const cred = makeCredential(ek.public, ak.name, code);
        assert.deepEqual(await activateCredential(tpm2, ak, ek, cred.idObject, cred.encryptedSecret), code);
        const ldevid = t.keep(await load(tpm2, srk, ldevidBlobs));
        const message = Buffer.from("fleetd/confirm/v1 via abrmd");
        const s = await sign(tpm2, ldevid, sha256(message));
        const c = new Checks();
        assert.ok(verifyTpmSignature(c, "confirm", ldevid.public, message, s.signature), JSON.stringify(c.reasons));
      });
      assert.deepEqual(await tpm2.getHandles(0x80), []);
    } finally {
      await tpm2.close();
    }
  });
}

test("tpm2-tools through the same abrmd: tpm2_createprimary with SPIRE's SRK attributes is fleetd's SRK, and fleetd's AK blobs load under it", async () => {
  const tpm = connect();
  let srkName: Uint8Array;
  let ak: KeyBlobs;
  try {
    const srk = await createSrk(tpm, "rsa");
    srkName = srk.name;
    ak = await createAk(tpm, srk, "rsa");
  } finally {
    await tpm.close();
  }
  const dir = swtpm.dir;
  const tools = (tool: string, ...args: string[]) =>
    execFileSync(`tpm2_${tool}`, args, { cwd: dir, env: { ...process.env, ...abrmd.env, TPM2TOOLS_TCTI: abrmd.tcti }, encoding: "utf8" });
  // tpm2-tools files are TSS-marshalled TPM2B (with the size); fleetd keeps blobs without it, as SPIRE does.
  const withSize = (b: Uint8Array) => Buffer.concat([Buffer.from([b.length >> 8, b.length & 0xff]), b]);
  writeFileSync(join(dir, "ak.pub"), withSize(ak.publicBytes));
  writeFileSync(join(dir, "ak.priv"), encode(TPM2B_PRIVATE, ak.private));
  tools("createprimary", "-C", "o", "-g", "sha256", "-G", "rsa2048:null:aes128cfb", "-a", "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda|restricted|decrypt", "-c", "srk.ctx");
  tools("readpublic", "-c", "srk.ctx", "-n", "srk.name");
  assert.equal(hex(new Uint8Array(readFileSync(join(dir, "srk.name")))), hex(srkName));
  tools("load", "-C", "srk.ctx", "-u", "ak.pub", "-r", "ak.priv", "-c", "ak.ctx", "-n", "ak.name");
  assert.equal(hex(new Uint8Array(readFileSync(join(dir, "ak.name")))), hex(ak.name));
});
