/**
 * fleetd's TPM 1.2 client against a real TPM 1.2 (swtpm 0.7.1 without --tpm2, manufactured with an EK certificate
 * and owned with the well-known secrets): the identity proof end to end with the server's pure functions —
 * TPM_MakeIdentity → the privacy-CA credential for the approved EK → TPM_ActivateIdentity recovers the secret;
 * a credential for another EK, or for another AIK, is not activated; TPM_Quote verifies with the session's
 * externalData and the replayed PCRs, and a changed nonce, PCR value or signature fails.
 */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { makeIdentityCredential, pcrComposite, verifyQuote12, verifyIdentityBinding } from "@fleetd/verify/attest12";
import { ctEqual, digest } from "@fleetd/verify/crypto";
import { ekBindingFromCertificate, readCertificate, ekBinding } from "@fleetd/verify/ek";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { checkAikPubkey, checkEkPubkey, decodePubkey } from "@fleetd/verify/tpm12";
import { activateIdentity, createAik, detectTpmFamily, quote, Tpm12Client, Tpm12Error, withLoadedAik } from "@fleetd/platform/tpm12client";
import { TcpTransport } from "@fleetd/platform/tpmclient";
import { startSwtpm12, type Swtpm12 } from "../harness/swtpm12.js";
import { startSwtpm, type SwtpmTcp } from "../harness/swtpm.js";

const rnd = (n: number) => new Uint8Array(randomBytes(n));
let tpm: Swtpm12;
let tpm2: SwtpmTcp;

before(async () => {
  [tpm, tpm2] = await Promise.all([startSwtpm12(), startSwtpm({ ekCerts: false })]);
});
after(async () => {
  await tpm?.stop();
  await tpm2?.stop();
});

const client = () => new Tpm12Client(new TcpTransport(tpm.host, tpm.port));
const secrets = () => ({ ownerAuth: tpm.ownerAuth, srkAuth: tpm.srkAuth });

test("the TPM family is detected: 1.2 for swtpm without --tpm2, 2.0 for a TPM 2.0", async () => {
  const c = client();
  try {
    assert.equal(await detectTpmFamily(c.transport), "1.2");
  } finally {
    await c.close();
  }
  const t2 = new TcpTransport(tpm2.host, tpm2.port);
  try {
    assert.equal(await detectTpmFamily(t2), "2.0");
  } finally {
    await t2.close();
  }
});

test("the EK: its certificate from NV 0x1000f000 names the key TPM_OwnerReadInternalPub returns (same binding)", async () => {
  const c = client();
  try {
    const der = await c.readEkCertificate();
    assert.deepEqual(Buffer.from(der), readFileSync(tpm.ekCertFile));
    const ek = checkEkPubkey((await c.ownerReadEk(tpm.ownerAuth)).value);
    assert.equal(ekBinding(ek.spki), ekBindingFromCertificate(readCertificate(der).cert));
    // a wrong owner secret is TPM_AUTHFAIL, and nothing is read
    await assert.rejects(c.ownerReadEk(new Uint8Array(20).fill(7)), (e: unknown) => e instanceof Tpm12Error && e.rcName === "TPM_AUTHFAIL");
  } finally {
    await c.close();
  }
});

test("MakeIdentity → the server's credential for the approved EK → ActivateIdentity recovers the secret; another EK's or another AIK's credential is refused", async () => {
  const c = client();
  try {
    const ek = checkEkPubkey((await c.ownerReadEk(tpm.ownerAuth)).value);
    const aik = await createAik(c, secrets(), rnd);
    const aikKey = checkAikPubkey(decodePubkey(aik.pubkey));
    assert.equal(verifyIdentityBinding(aikKey, aik.pubkey, aik.identityBinding).verdict, "pass");
    const other = await createAik(c, secrets(), rnd);
    const foreignEk = generateKeyPairSync("rsa", { modulusLength: 2048 }).publicKey;

    const cred = makeIdentityCredential(ek.key, aik.pubkey, { random: rnd });
    const forOtherEk = makeIdentityCredential(foreignEk, aik.pubkey, { random: rnd });
    const forOtherAik = makeIdentityCredential(ek.key, other.pubkey, { random: rnd });
    await withLoadedAik(c, secrets(), aik, async (h) => {
      const got = await activateIdentity(c, secrets(), aik, h, cred.blob);
      assert.ok(ctEqual(got, cred.secret), "the TPM releases exactly the server's secret");
      await assert.rejects(activateIdentity(c, secrets(), aik, h, forOtherEk.blob), (e: unknown) => e instanceof Tpm12Error, "a blob for another EK does not decrypt");
      await assert.rejects(activateIdentity(c, secrets(), aik, h, forOtherAik.blob), (e: unknown) => e instanceof Tpm12Error, "a blob naming another AIK is not released");
    });
    // the AIK's own identity binding does not verify as the other AIK's
    assert.equal(verifyIdentityBinding(aikKey, aik.pubkey, other.identityBinding).verdict, "fail");
  } finally {
    await c.close();
  }
});

test("Quote: verifies with the expected externalData and returns the PCRs the TPM holds; a changed nonce, PCR value or signature fails", async () => {
  const c = client();
  try {
    const m = digest(TPM_ALG.SHA1, new TextEncoder().encode("fleetd tpm12 quote test"));
    await c.extend(8, m);
    const aik = await createAik(c, secrets(), rnd);
    const aikKey = checkAikPubkey(decodePubkey(aik.pubkey));
    const nonce = rnd(20);
    const pcrs = [0, 1, 2, 3, 4, 5, 6, 7, 8];
    const q = await withLoadedAik(c, secrets(), aik, (h) => quote(c, aik, h, nonce, pcrs));
    const ok = verifyQuote12({ aik: aikKey, pcrComposite: q.pcrComposite, signature: q.signature, expectedExternalData: nonce });
    assert.equal(ok.verdict, "pass", JSON.stringify(ok.reasons));
    const sha1 = ok.pcrs?.get(TPM_ALG.SHA1);
    assert.deepEqual([...(sha1?.keys() ?? [])], pcrs);
    for (const p of pcrs) assert.deepEqual(sha1?.get(p), await c.pcrRead(p));

    const wrongNonce = verifyQuote12({ aik: aikKey, pcrComposite: q.pcrComposite, signature: q.signature, expectedExternalData: rnd(20) });
    assert.deepEqual(wrongNonce.reasons.map((r) => r.check), ["quote12.signature"]);
    const values = new Map(sha1 ?? []);
    values.set(8, new Uint8Array(20));
    const changed = verifyQuote12({ aik: aikKey, pcrComposite: pcrComposite(values), signature: q.signature, expectedExternalData: nonce });
    assert.deepEqual(changed.reasons.map((r) => r.check), ["quote12.signature"]);
    const sig = new Uint8Array(q.signature);
    sig[10] = (sig[10] ?? 0) ^ 1;
    assert.equal(verifyQuote12({ aik: aikKey, pcrComposite: q.pcrComposite, signature: sig, expectedExternalData: nonce }).verdict, "fail");
    // another AIK's key does not verify it
    const other = checkAikPubkey(decodePubkey((await createAik(c, secrets(), rnd)).pubkey));
    assert.equal(verifyQuote12({ aik: other, pcrComposite: q.pcrComposite, signature: q.signature, expectedExternalData: nonce }).verdict, "fail");
  } finally {
    await c.close();
  }
});

test("a TPM owned with other secrets: the well-known owner secret is TPM_AUTHFAIL; the right ones work", async () => {
  const owned = await startSwtpm12({ ownerAuth: Uint8Array.from(Buffer.from("site-owner-secret")), srkAuth: Uint8Array.from(Buffer.from("site-srk-secret")) });
  const c = new Tpm12Client(new TcpTransport(owned.host, owned.port));
  try {
    await assert.rejects(c.ownerReadEk(new Uint8Array(20)), (e: unknown) => e instanceof Tpm12Error && e.rcName === "TPM_AUTHFAIL");
    const ek = checkEkPubkey((await c.ownerReadEk(owned.ownerAuth)).value);
    const s = { ownerAuth: owned.ownerAuth, srkAuth: owned.srkAuth };
    const aik = await createAik(c, s, rnd);
    const cred = makeIdentityCredential(ek.key, aik.pubkey, { random: rnd });
    const got = await withLoadedAik(c, s, aik, (h) => activateIdentity(c, s, aik, h, cred.blob));
    assert.ok(ctEqual(got, cred.secret));
  } finally {
    await c.close();
    await owned.stop();
  }
});
