/**
 * Differential: `fleetd verify quote` on quotes a real TPM made with tpm2-tools 5.4.
 *
 *   fleetd verify quote --ak-public FILE --message FILE --signature FILE --pcrs FILE --nonce HEX [--json]
 *
 * Files exactly as the tools write them:
 *   tpm2_createak -u ak.pub                    TPM2B_PUBLIC
 *   tpm2_quote -c ak.ctx -l SEL -q NONCE -g sha256 -m q.msg -s q.sig -o q.pcrs -F values|serialized
 *     q.msg   TPMS_ATTEST, marshalled (big-endian), no TPM2B size
 *     q.sig   TPMT_SIGNATURE, marshalled ("tss", the default -f)
 *     q.pcrs  -F values:     the PCR values only, concatenated in selection order (banks in list order,
 *                            PCRs ascending); the selection comes from the quote itself.
 *             -F serialized: (the default) a little-endian memory image: TPML_PCR_SELECTION as the C struct
 *                            (u32 count, 16 × {u16 hash, u8 sizeofSelect, u8 pcrSelect[4], 1 pad} = 132 bytes),
 *                            u32 number of TPML_DIGESTs, then each TPML_DIGEST as the C struct
 *                            (u32 count, 8 × {u16 size, u8 buffer[64]} = 532 bytes), up to 8 PCRs each.
 * Exit 0 only when every check holds; 1 with the failed check named otherwise.
 */
import { strict as assert } from "node:assert";
import { copyFileSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { startSwtpm, type SwtpmTcp } from "../harness/swtpm.js";
import { assertFails, assertPass, fleetd, randomHex, requireCommand, withFlippedByte } from "./fleetd.js";
import { type Ak, createAk, createEk, extendPcrs } from "./keys.js";

type PcrFormat = "values" | "serialized";
interface Quote {
  ak: Ak;
  msg: string;
  sig: string;
  pcrs: string;
  nonce: string;
  format: PcrFormat;
}

const SINGLE_BANK = "sha256:0,1,2,3,7";
const MULTI_BANK = "sha1:0,7+sha256:0,7";
/** Sizes of the PCR files for the selections above (see the file comment). */
const PCR_FILE_SIZE: Record<string, Record<PcrFormat, number>> = {
  [SINGLE_BANK]: { values: 5 * 32, serialized: 132 + 4 + 532 },
  [MULTI_BANK]: { values: 2 * 20 + 2 * 32, serialized: 132 + 4 + 532 },
};
/** First byte of the first PCR value in a serialized file: selection, list count, TPML_DIGEST.count, TPM2B size. */
const SERIALIZED_FIRST_VALUE = 132 + 4 + 4 + 2;

let tpm: SwtpmTcp;
let dir: string;
let akRsa: Ak;
let akRsa2: Ak;
let akEcc: Ak;
let akEcc2: Ak;
let seq = 0;

before(async () => {
  await requireCommand("verify quote");
  tpm = await startSwtpm({ flushAfterEachCall: true, pcrBanks: ["sha1", "sha256"] });
  dir = tpm.mkdir("quote");
  const ekRsa = await createEk(tpm, dir, "rsa", "ek-rsa");
  const ekEcc = await createEk(tpm, dir, "ecc", "ek-ecc");
  akRsa = await createAk(tpm, dir, ekRsa, "rsa", "ak-rsa");
  akRsa2 = await createAk(tpm, dir, ekRsa, "rsa", "ak-rsa2");
  akEcc = await createAk(tpm, dir, ekEcc, "ecc", "ak-ecc");
  akEcc2 = await createAk(tpm, dir, ekEcc, "ecc", "ak-ecc2");
  await extendPcrs(tpm, [0, 1, 2, 3, 7], randomHex);
});

after(async () => {
  await tpm?.stop();
});

async function quote(ak: Ak, selection: string, format: PcrFormat): Promise<Quote> {
  const n = ++seq;
  const q: Quote = {
    ak,
    msg: join(dir, `q${n}.msg`),
    sig: join(dir, `q${n}.sig`),
    pcrs: join(dir, `q${n}.${format}.pcrs`),
    nonce: randomHex(20),
    format,
  };
  await tpm.tpm2("quote", ["-c", ak.ctx, "-l", selection, "-q", q.nonce, "-g", "sha256", "-m", q.msg, "-s", q.sig, "-o", q.pcrs, "-F", format]);
  assert.equal(statSync(q.pcrs).size, PCR_FILE_SIZE[selection]?.[format], `tpm2_quote -F ${format} file layout for ${selection}`);
  return q;
}

function verify(q: Quote, json: boolean, over: Partial<{ akPublic: string; msg: string; sig: string; pcrs: string; nonce: string }> = {}) {
  return fleetd([
    "verify",
    "quote",
    "--ak-public",
    over.akPublic ?? q.ak.pub,
    "--message",
    over.msg ?? q.msg,
    "--signature",
    over.sig ?? q.sig,
    "--pcrs",
    over.pcrs ?? q.pcrs,
    "--nonce",
    over.nonce ?? q.nonce,
    ...(json ? ["--json"] : []),
  ]);
}

for (const [alg, label] of [
  ["rsa", "RSA AK (RSASSA, SHA-256)"],
  ["ecc", "ECC AK (ECDSA P-256, SHA-256)"],
] as const) {
  const ak = () => (alg === "rsa" ? akRsa : akEcc);
  const otherAk = () => (alg === "rsa" ? akRsa2 : akEcc2);

  for (const selection of [SINGLE_BANK, MULTI_BANK]) {
    test(`${label}: quotes over ${selection} verify, with PCRs as -F values and -F serialized`, async () => {
      for (const format of ["values", "serialized"] as const) {
        const q = await quote(ak(), selection, format);
        assertPass(await verify(q, false), false);
        assertPass(await verify(q, true), true);
      }
    });
  }

  test(`${label}: one flipped byte in the message, the signature or a PCR value fails the named check`, async () => {
    for (const format of ["values", "serialized"] as const) {
      const q = await quote(ak(), MULTI_BANK, format);
      assertPass(await verify(q, true), true); // the untouched quote passes: the failures below are the flips
      // Last byte of the message = last byte of pcrDigest: still well-formed, no longer what was signed.
      assertFails(await verify(q, true, { msg: withFlippedByte(q.msg, -1) }), true, /signature/i);
      // Last byte of the signature value (RSA signature / ECDSA s).
      assertFails(await verify(q, true, { sig: withFlippedByte(q.sig, -1) }), true, /signature/i);
      // First PCR value (sha1 PCR 0): the signature holds, the values no longer match pcrDigest.
      const pcrOffset = format === "values" ? 0 : SERIALIZED_FIRST_VALUE;
      assertFails(await verify(q, true, { pcrs: withFlippedByte(q.pcrs, pcrOffset) }), true, /pcr/i);
      assertFails(await verify(q, false, { pcrs: withFlippedByte(q.pcrs, pcrOffset) }), false, /pcr/i);
    }
  });

  test(`${label}: another nonce fails the nonce check`, async () => {
    const q = await quote(ak(), SINGLE_BANK, "serialized");
    assertFails(await verify(q, true, { nonce: randomHex(20) }), true, /nonce|extraData|qualif/i);
    assertFails(await verify(q, false, { nonce: randomHex(20) }), false, /nonce|extraData|qualif/i);
    // The nonce is compared exactly: a prefix of it is not it.
    assertFails(await verify(q, true, { nonce: q.nonce.slice(0, -2) }), true, /nonce|extraData|qualif/i);
  });

  test(`${label}: the quote verified with another AK's public key fails the signature check`, async () => {
    const q = await quote(ak(), SINGLE_BANK, "values");
    assertFails(await verify(q, true, { akPublic: otherAk().pub }), true, /signature/i);
  });

  test(`${label}: PCR values from another selection do not stand in for the quoted ones`, async () => {
    const single = await quote(ak(), SINGLE_BANK, "serialized");
    const multi = await quote(ak(), MULTI_BANK, "serialized");
    assertFails(await verify(single, true, { pcrs: multi.pcrs }), true, /pcr/i);
  });
}

test("PCR values move: a quote's PCR file from before an extend does not verify a quote after it", async () => {
  const before = await quote(akRsa, SINGLE_BANK, "values");
  const stale = join(dir, "stale.pcrs");
  copyFileSync(before.pcrs, stale);
  await tpm.tpm2("pcrextend", [`7:sha256=${randomHex(32)}`]);
  const afterExtend = await quote(akRsa, SINGLE_BANK, "values");
  assert.notDeepEqual(readFileSync(afterExtend.pcrs), readFileSync(stale), "PCR 7 changed");
  assertPass(await verify(afterExtend, true), true);
  assertFails(await verify(afterExtend, true, { pcrs: stale }), true, /pcr/i);
});
