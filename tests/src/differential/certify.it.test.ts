/**
 * Differential: `fleetd verify certify` on TPM2_Certify attestations made by a real TPM.
 *
 *   fleetd verify certify --ak-public FILE --object-public FILE --message FILE --signature FILE
 *                         --qualifying-data HEX [--json]
 *
 * Files exactly as the tools write them:
 *   tpm2_createak -u ak.pub / tpm2_create -u key.pub      TPM2B_PUBLIC
 *   tpm2_certify -c key.ctx -C ak.ctx -g sha256 -o attest.out -s sig.out
 *     attest.out  TPMS_ATTEST, marshalled, no TPM2B size
 *     sig.out     TPMT_SIGNATURE, marshalled (the default `-f tss`; `-f plain` would write the bare
 *                 PKCS#1 / DER ECDSA signature, which does not say its scheme — not used)
 * tpm2-tools 5.4's tpm2_certify has no `-q/--qualification`: it always sends qualifyingData 00ff55aa.
 * For a caller-chosen nonce the tests also issue TPM2_Certify directly (tpm2_send, persistent handles) and
 * write the same two files from the response.
 */
import { strict as assert } from "node:assert";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { decodeExact, TPM_ST, TPMS_ATTEST } from "@fleetd/verify";
import { startSwtpm, type SwtpmTcp } from "../harness/swtpm.js";
import { assertFails, assertPass, fleetd, randomHex, requireCommand } from "./fleetd.js";
import { type Ak, createAk, createEk } from "./keys.js";

/** What tpm2-tools 5.4 tpm2_certify always uses as qualifyingData. */
const TPM2_TOOLS_CERTIFY_QUALIFYING_DATA = "00ff55aa";

interface Certification {
  ak: Ak;
  objectPub: string;
  msg: string;
  sig: string;
  qualifyingData: string;
}

interface Obj {
  ctx: string;
  pub: string;
}

let tpm: SwtpmTcp;
let dir: string;
let akRsa: Ak;
let akEcc: Ak;
let akEcc2: Ak;
let key: Obj;
let key2: Obj;
let seq = 0;
/** Persistent copies for the raw TPM2_Certify: AK by algorithm, and the certified key. */
const persistent = { rsa: 0x81000100, ecc: 0x81000101, key: 0x81000102 };

before(async () => {
  await requireCommand("verify certify");
  tpm = await startSwtpm({ flushAfterEachCall: true });
  dir = tpm.mkdir("certify");
  const ekRsa = await createEk(tpm, dir, "rsa", "ek-rsa");
  const ekEcc = await createEk(tpm, dir, "ecc", "ek-ecc");
  akRsa = await createAk(tpm, dir, ekRsa, "rsa", "ak-rsa");
  akEcc = await createAk(tpm, dir, ekEcc, "ecc", "ak-ecc");
  akEcc2 = await createAk(tpm, dir, ekEcc, "ecc", "ak-ecc2");
  // Two ordinary keys under an owner-hierarchy primary (like a DevID/LDevID key).
  const prim = join(dir, "primary.ctx");
  await tpm.tpm2("createprimary", ["-C", "o", "-G", "ecc", "-c", prim]);
  const mk = async (label: string): Promise<Obj> => {
    const o = { ctx: join(dir, `${label}.ctx`), pub: join(dir, `${label}.pub`) };
    await tpm.tpm2("create", ["-C", prim, "-G", "ecc", "-u", o.pub, "-r", join(dir, `${label}.priv`), "-c", o.ctx]);
    return o;
  };
  key = await mk("key");
  key2 = await mk("key2");
  for (const [ctx, handle] of [
    [akRsa.ctx, persistent.rsa],
    [akEcc.ctx, persistent.ecc],
    [key.ctx, persistent.key],
  ] as const) {
    await tpm.tpm2("evictcontrol", ["-C", "o", "-c", ctx, `0x${handle.toString(16)}`]);
  }
});

after(async () => {
  await tpm?.stop();
});

/** tpm2_certify as shipped (qualifyingData fixed to 00ff55aa). */
async function certifyWithTool(ak: Ak, obj: Obj): Promise<Certification> {
  const n = ++seq;
  const c = { ak, objectPub: obj.pub, msg: join(dir, `c${n}.attest`), sig: join(dir, `c${n}.sig`), qualifyingData: TPM2_TOOLS_CERTIFY_QUALIFYING_DATA };
  await tpm.tpm2("certify", ["-c", obj.ctx, "-C", ak.ctx, "-g", "sha256", "-o", c.msg, "-s", c.sig]);
  return c;
}

const u16 = (v: number) => Buffer.from([v >> 8, v & 0xff]);
const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v);
  return b;
};

/**
 * TPM2_Certify (Part 3 §18.2) sent raw with tpm2_send, for a chosen qualifyingData:
 *   header {TPM_ST_SESSIONS, size, TPM_CC_Certify 0x148}, objectHandle, signHandle,
 *   authorizationSize, 2 × TPMS_AUTH_COMMAND {TPM_RS_PW, empty nonce, attributes 0, empty password},
 *   TPM2B_DATA qualifyingData, TPMT_SIG_SCHEME {TPM_ALG_NULL} (use the AK's scheme).
 * Response: header {tag, size, rc}, parameterSize, TPM2B_ATTEST certifyInfo, TPMT_SIGNATURE, auth area.
 */
async function certifyRaw(ak: Ak, akHandle: number, objHandle: number, qualifyingData: string): Promise<Certification> {
  const n = ++seq;
  const pw = Buffer.concat([u32(0x40000009), u16(0), Buffer.from([0]), u16(0)]);
  const q = Buffer.from(qualifyingData, "hex");
  const body = Buffer.concat([u32(objHandle), u32(akHandle), u32(2 * pw.length), pw, pw, u16(q.length), q, u16(0x0010)]);
  const command = Buffer.concat([u16(0x8002), u32(10 + body.length), u32(0x00000148), body]);
  const respFile = join(dir, `c${n}.response`);
  await tpm.tpm2("send", ["-o", respFile], { input: command });
  const resp = readFileSync(respFile);
  assert.ok(resp.length >= 10, "short TPM response");
  assert.equal(resp.readUInt32BE(6), 0, `TPM2_Certify returned rc 0x${resp.readUInt32BE(6).toString(16)}`);
  assert.equal(resp.readUInt32BE(2), resp.length, "response size");
  const paramSize = resp.readUInt32BE(10);
  const attestSize = resp.readUInt16BE(14);
  const attest = resp.subarray(16, 16 + attestSize);
  const signature = resp.subarray(16 + attestSize, 14 + paramSize);
  const c = { ak, objectPub: key.pub, msg: join(dir, `c${n}.attest`), sig: join(dir, `c${n}.sig`), qualifyingData };
  writeFileSync(c.msg, attest);
  writeFileSync(c.sig, signature);
  return c;
}

function verify(c: Certification, json: boolean, over: Partial<{ akPublic: string; objectPub: string; msg: string; sig: string; qualifyingData: string }> = {}) {
  return fleetd([
    "verify",
    "certify",
    "--ak-public",
    over.akPublic ?? c.ak.pub,
    "--object-public",
    over.objectPub ?? c.objectPub,
    "--message",
    over.msg ?? c.msg,
    "--signature",
    over.sig ?? c.sig,
    "--qualifying-data",
    over.qualifyingData ?? c.qualifyingData,
    ...(json ? ["--json"] : []),
  ]);
}

function attestation(c: Certification) {
  return decodeExact(TPMS_ATTEST, new Uint8Array(readFileSync(c.msg)));
}

for (const [alg, label] of [
  ["rsa", "RSA AK (RSASSA)"],
  ["ecc", "ECC AK (ECDSA)"],
] as const) {
  const ak = () => (alg === "rsa" ? akRsa : akEcc);

  test(`${label}: tpm2_certify of an owner-hierarchy key verifies with its qualifying data`, async () => {
    const c = await certifyWithTool(ak(), key);
    const a = attestation(c);
    assert.equal(a.type, TPM_ST.ATTEST_CERTIFY);
    assert.equal(Buffer.from(a.extraData).toString("hex"), TPM2_TOOLS_CERTIFY_QUALIFYING_DATA, "tpm2-tools 5.4 tpm2_certify's fixed qualifyingData");
    assertPass(await verify(c, false), false);
    assertPass(await verify(c, true), true);
  });

  test(`${label}: TPM2_Certify with a fresh random qualifying data verifies with it, and not with another`, async () => {
    const c = await certifyRaw(ak(), persistent[alg], persistent.key, randomHex(32));
    assert.equal(Buffer.from(attestation(c).extraData).toString("hex"), c.qualifyingData);
    assertPass(await verify(c, true), true);
    assertFails(await verify(c, true, { qualifyingData: TPM2_TOOLS_CERTIFY_QUALIFYING_DATA }), true, /qualif|nonce|extraData/i);
  });

  test(`${label}: refused — another object's public area, another qualifying data`, async () => {
    const c = await certifyWithTool(ak(), key);
    assertFails(await verify(c, true, { objectPub: key2.pub }), true, /name|object/i);
    assertFails(await verify(c, false, { objectPub: key2.pub }), false, /name|object/i);
    assertFails(await verify(c, true, { qualifyingData: randomHex(4) }), true, /qualif|nonce|extraData/i);
    assertFails(await verify(c, true, { qualifyingData: "" }), true, /qualif|nonce|extraData/i);
  });

  test(`${label}: refused — a quote's message and signature offered as a certify`, async () => {
    const nonce = randomHex(16);
    const q = { msg: join(dir, `q${++seq}.msg`), sig: join(dir, `q${seq}.sig`) };
    await tpm.tpm2("quote", ["-c", ak().ctx, "-l", "sha256:0", "-q", nonce, "-g", "sha256", "-m", q.msg, "-s", q.sig]);
    const c = await certifyWithTool(ak(), key);
    // Same AK, genuine signature, matching nonce: only the attestation type is wrong.
    assertFails(await verify(c, true, { msg: q.msg, sig: q.sig, qualifyingData: nonce }), true, /type|certify|quote|attest/i);
  });
}

test("refused — the certification verified with another AK's public key", async () => {
  const c = await certifyWithTool(akEcc, key);
  assertFails(await verify(c, true, { akPublic: akEcc2.pub }), true, /signature/i);
  const r = await certifyWithTool(akRsa, key);
  assertFails(await verify(r, true, { akPublic: akEcc2.pub }), true, /signature/i);
});
