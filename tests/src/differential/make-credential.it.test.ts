/**
 * Differential: `fleetd verify make-credential` against a real TPM's TPM2_ActivateCredential.
 *
 *   fleetd verify make-credential --ek-public FILE --name HEX --secret HEX --out FILE
 *     FILE: TPM2B_PUBLIC (`tpm2_createek -u`, `tpm2_readpublic -o`) or the EK certificate (DER or PEM)
 *     --out: the tpm2-tools credential blob (`tpm2_activatecredential -i`)
 *
 * The TPM recovers the secret only if our blob is right to the bit: OAEP label/KDFe, KDFa STORAGE and
 * INTEGRITY keys, the EK's nameAlg and symmetric definition, and the AK Name binding.
 * EKs: RSA-2048 and ECC P-256 from the default templates (`tpm2_createek`), the RSA EK through its
 * certificate, and swtpm's P-384 EK (high-range template: SHA-384, AES-256) through its public area and its
 * certificate.
 */
import { strict as assert } from "node:assert";
import { randomBytes, X509Certificate } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { startSwtpm, type SwtpmTcp, Tpm2ToolError } from "../harness/swtpm.js";
import { assertOk, fleetd, requireCommand } from "./fleetd.js";
import { type Ak, createAk, createEk, type Ek } from "./keys.js";

let tpm: SwtpmTcp;
let dir: string;
let ekRsa: Ek;
let ekEcc: Ek;
let akRsa: Ak;
let akEcc: Ak;
/** The RSA EK certificate from NV 0x01C00002, DER and PEM. */
let ekRsaCertDer: string;
let ekRsaCertPem: string;
/** swtpm's persistent P-384 EK: handle, public area (tpm2_readpublic -o) and certificate from NV. */
let ek384Handle: string;
let ek384Pub: string;
let ek384CertDer: string;
let seq = 0;

before(async () => {
  await requireCommand("verify make-credential");
  tpm = await startSwtpm({ flushAfterEachCall: true });
  dir = tpm.mkdir("mc");
  ekRsa = await createEk(tpm, dir, "rsa", "ek-rsa");
  ekEcc = await createEk(tpm, dir, "ecc", "ek-ecc");
  akRsa = await createAk(tpm, dir, ekRsa, "rsa", "ak-rsa");
  akEcc = await createAk(tpm, dir, ekEcc, "ecc", "ak-ecc");

  ekRsaCertDer = join(dir, "ek-rsa-cert.der");
  await tpm.tpm2("nvread", [`0x${tpm.ek.rsa.certIndex.toString(16)}`, "-C", "o", "-o", ekRsaCertDer]);
  ekRsaCertPem = join(dir, "ek-rsa-cert.pem");
  writeFileSync(ekRsaCertPem, new X509Certificate(readFileSync(ekRsaCertDer)).toString());

  ek384Handle = `0x${tpm.ek.ecc.handle.toString(16)}`;
  ek384Pub = join(dir, "ek-p384.pub");
  await tpm.tpm2("readpublic", ["-c", ek384Handle, "-o", ek384Pub]);
  ek384CertDer = join(dir, "ek-p384-cert.der");
  await tpm.tpm2("nvread", [`0x${tpm.ek.ecc.certIndex.toString(16)}`, "-C", "o", "-o", ek384CertDer]);
});

after(async () => {
  await tpm?.stop();
});

/** Our make-credential; returns the blob's path. */
async function makeCredential(ekPublic: string, name: Buffer, secret: Buffer): Promise<string> {
  const out = join(dir, `cred-${++seq}.out`);
  const r = await fleetd(["verify", "make-credential", "--ek-public", ekPublic, "--name", name.toString("hex"), "--secret", secret.toString("hex"), "--out", out]);
  assertOk(r);
  return out;
}

type EkUse = { ctx: string } | { persistentHandle: string };

/**
 * TPM2_ActivateCredential. Default-template EKs (userWithAuth clear) need PolicySecret(TPM_RH_ENDORSEMENT):
 *   tpm2_startauthsession --policy-session -S s.ctx; tpm2_policysecret -S s.ctx -c e;
 *   tpm2_activatecredential -c ak.ctx -C ek.ctx -i cred -o secret -P session:s.ctx
 * swtpm's P-384 EK has userWithAuth set, so its (empty) password authorizes it.
 */
async function activate(ak: Ak, ek: EkUse, cred: string): Promise<Buffer> {
  const out = join(dir, `secret-${++seq}.out`);
  if ("ctx" in ek) {
    const session = join(dir, `session-${seq}.ctx`);
    await tpm.tpm2("startauthsession", ["--policy-session", "-S", session]);
    try {
      await tpm.tpm2("policysecret", ["-S", session, "-c", "e"]);
      await tpm.tpm2("activatecredential", ["-c", ak.ctx, "-C", ek.ctx, "-i", cred, "-o", out, "-P", `session:${session}`]);
    } finally {
      await tpm.tpm2("flushcontext", [session]).catch(() => undefined); // already gone once used
    }
  } else {
    await tpm.tpm2("activatecredential", ["-c", ak.ctx, "-C", ek.persistentHandle, "-i", cred, "-o", out]);
  }
  return readFileSync(out);
}

async function roundTrip(ekPublic: string, ak: Ak, ek: EkUse): Promise<void> {
  const secret = randomBytes(32);
  const cred = await makeCredential(ekPublic, ak.name, secret);
  assert.deepEqual(await activate(ak, ek, cred), secret, "the TPM must recover exactly the secret");
}

async function assertActivationFails(ak: Ak, ek: EkUse, cred: string): Promise<void> {
  await assert.rejects(activate(ak, ek, cred), (e: unknown) => {
    assert.ok(e instanceof Tpm2ToolError, String(e));
    assert.match(e.tool, /activatecredential/, e.message);
    return true;
  });
}

test("RSA-2048 EK (tpm2_createek -G rsa, TPM2B_PUBLIC), RSA AK: the TPM recovers the secret", async () => {
  await roundTrip(ekRsa.pub, akRsa, { ctx: ekRsa.ctx });
});

test("ECC P-256 EK (tpm2_createek -G ecc, TPM2B_PUBLIC), ECC AK: the TPM recovers the secret", async () => {
  await roundTrip(ekEcc.pub, akEcc, { ctx: ekEcc.ctx });
});

test("RSA EK given as its certificate read from NV, DER and PEM", async () => {
  await roundTrip(ekRsaCertDer, akRsa, { ctx: ekRsa.ctx });
  await roundTrip(ekRsaCertPem, akRsa, { ctx: ekRsa.ctx });
});

test("swtpm's P-384 EK (high-range template: SHA-384 nameAlg, AES-256-CFB) as TPM2B_PUBLIC and as its DER certificate", async () => {
  // The AK need not be the EK's child: ActivateCredential binds the credential to the AK's Name only.
  await roundTrip(ek384Pub, akRsa, { persistentHandle: ek384Handle });
  await roundTrip(ek384CertDer, akEcc, { persistentHandle: ek384Handle });
});

test("a credential bound to another AK's Name does not activate with this AK (and does with that one)", async () => {
  const cred = await makeCredential(ekRsa.pub, akEcc.name, randomBytes(32));
  await assertActivationFails(akRsa, { ctx: ekRsa.ctx }, cred);
  const secret = randomBytes(32);
  const cred2 = await makeCredential(ekRsa.pub, akEcc.name, secret);
  assert.deepEqual(await activate(akEcc, { ctx: ekRsa.ctx }, cred2), secret);
});

test("a credential made for one EK does not activate with another EK", async () => {
  const cred = await makeCredential(ekRsa.pub, akRsa.name, randomBytes(32));
  await assertActivationFails(akRsa, { ctx: ekEcc.ctx }, cred);
  const cred384 = await makeCredential(ek384Pub, akRsa.name, randomBytes(32));
  await assertActivationFails(akRsa, { ctx: ekEcc.ctx }, cred384);
});
