/**
 * The pure TPM 1.2 verification functions against a software key: the privacy-CA blob is exactly
 * OAEP(SHA-1, MGF1-SHA-1, "TCPA") of TPM_ASYM_CA_CONTENTS {AES-256 session key = secret, SHA-1(TPM_PUBKEY)};
 * the quote verifies only with its composite, externalData and key. (Against a real TPM 1.2: tests/src/tpmclient/tpm12.it.test.ts.)
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { constants, generateKeyPairSync, privateDecrypt, randomBytes, sign } from "node:crypto";
import { decodeExact, encode } from "../codec/codec.js";
import { digest } from "../crypto/hash.js";
import { TPM_ALG } from "../tcg/constants.js";
import { checkAikPubkey, decodePubkey } from "../tpm12/keys.js";
import { TPM_ASYM_CA_CONTENTS, TPM_PUBKEY, TPM_RSA_KEY_PARMS, TPM12 } from "../tpm12/structures.js";
import { makeIdentityCredential } from "./makeIdentityCredential.js";
import { pcrComposite, quoteInfo, verifyQuote12 } from "./verifyQuote12.js";

const rnd = (n: number) => new Uint8Array(randomBytes(n));

function softAik() {
  const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const n = Buffer.from(publicKey.export({ format: "jwk" }).n as string, "base64url");
  const bytes = encode(TPM_PUBKEY, {
    algorithmParms: { algorithmID: TPM12.ALG_RSA, encScheme: TPM12.ES_NONE, sigScheme: TPM12.SS_RSASSAPKCS1v15_SHA1, parms: encode(TPM_RSA_KEY_PARMS, { keyLength: 2048, numPrimes: 2, exponent: new Uint8Array(0) }) },
    pubKey: new Uint8Array(n),
  });
  return { bytes, key: checkAikPubkey(decodePubkey(bytes)), privateKey };
}

test("the identity credential decrypts with the EK's private key (OAEP SHA-1, label TCPA) to the secret and SHA-1(TPM_PUBKEY)", () => {
  const ek = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const aik = softAik();
  const cred = makeIdentityCredential(ek.publicKey, aik.bytes, { random: rnd });
  const plain = privateDecrypt({ key: ek.privateKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: "sha1", oaepLabel: Buffer.from("TCPA") }, cred.blob);
  const c = decodeExact(TPM_ASYM_CA_CONTENTS, new Uint8Array(plain));
  assert.deepEqual(c.sessionKey.data, cred.secret);
  assert.equal(c.sessionKey.algId, TPM12.ALG_AES256);
  assert.deepEqual(c.idDigest, digest(TPM_ALG.SHA1, aik.bytes));
  // without the label the blob does not decrypt: the TPM's OAEP parameter is part of it
  assert.throws(() => privateDecrypt({ key: ek.privateKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: "sha1" }, cred.blob));
  assert.equal(cred.secret.length, 32);
});

test("verifyQuote12: pass with the composite, externalData and AIK that made it; any change fails quote12.signature", () => {
  const aik = softAik();
  const values = new Map([0, 1, 7].map((p) => [p, digest(TPM_ALG.SHA1, Uint8Array.of(p))] as const));
  const composite = pcrComposite(values);
  const ext = rnd(20);
  const sig = new Uint8Array(sign("sha1", quoteInfo(composite, ext), { key: aik.privateKey, padding: constants.RSA_PKCS1_PADDING }));
  const ok = verifyQuote12({ aik: aik.key, pcrComposite: composite, signature: sig, expectedExternalData: ext });
  assert.equal(ok.verdict, "pass");
  assert.deepEqual(ok.pcrs?.get(TPM_ALG.SHA1), values);
  assert.deepEqual(verifyQuote12({ aik: aik.key, pcrComposite: composite, signature: sig, expectedExternalData: rnd(20) }).reasons.map((r) => r.check), ["quote12.signature"]);
  const moved = new Map(values);
  moved.set(7, new Uint8Array(20));
  assert.deepEqual(verifyQuote12({ aik: aik.key, pcrComposite: pcrComposite(moved), signature: sig, expectedExternalData: ext }).reasons.map((r) => r.check), ["quote12.signature"]);
  assert.deepEqual(verifyQuote12({ aik: softAik().key, pcrComposite: composite, signature: sig, expectedExternalData: ext }).reasons.map((r) => r.check), ["quote12.signature"]);
  assert.deepEqual(verifyQuote12({ aik: aik.key, pcrComposite: composite.subarray(1), signature: sig, expectedExternalData: ext }).reasons.map((r) => r.check), ["quote12.parse"]);
});
