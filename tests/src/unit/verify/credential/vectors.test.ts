/** Conformance vectors: KDFa, KDFe, RSA and ECC labeled encapsulation (all 400), keylime MakeCredential. */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { decodeExact } from "@fleetd/verify/codec";
import { fromHex, hex, kdfa, kdfe } from "@fleetd/verify/crypto";
import { conformance } from "@fleetd/testkit/conformance";
import { TPM2B_PUBLIC, TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { labeledEncapsulate, makeCredential, tpm2ToolsCredentialFile } from "@fleetd/verify/credential";

const load = <T>(rel: string): T => JSON.parse(readFileSync(conformance(rel), "utf8")) as T;

interface KdfVector {
  Name: string;
  HashAlg: number;
  Key?: string;
  Z?: string;
  Label: string;
  ContextU: string;
  ContextV: string;
  Bits: number;
  Result: string;
}

test("KDFa: all tpm-test-vectors", () => {
  const vs = load<KdfVector[]>("vectors/tpm-test-vectors/kdfa.json");
  assert.equal(vs.length, 100);
  for (const v of vs) {
    const out = kdfa(v.HashAlg, fromHex(v.Key ?? ""), v.Label, fromHex(v.ContextU), fromHex(v.ContextV), v.Bits);
    assert.equal(hex(out), v.Result.toLowerCase(), v.Name);
  }
});

test("KDFe: all tpm-test-vectors", () => {
  const vs = load<KdfVector[]>("vectors/tpm-test-vectors/kdfe.json");
  assert.equal(vs.length, 100);
  for (const v of vs) {
    const out = kdfe(v.HashAlg, fromHex(v.Z ?? ""), v.Label, fromHex(v.ContextU), fromHex(v.ContextV), v.Bits);
    assert.equal(hex(out), v.Result.toLowerCase(), v.Name);
  }
});

interface EncapsVector {
  Name: string;
  Label: string;
  PublicKey: string;
  Secret: string;
  Ciphertext: string;
  OAEPSalt?: string;
  EphemeralPrivate?: string;
}

test("RSA labeled encapsulation: all 100 vectors byte-exact (OAEP with the key's nameAlg)", () => {
  const vs = load<EncapsVector[]>("vectors/tpm-test-vectors/rsa_labeled_encaps.json");
  assert.equal(vs.length, 100);
  for (const v of vs) {
    const pub = decodeExact(TPMT_PUBLIC, fromHex(v.PublicKey));
    const out = labeledEncapsulate(pub, v.Label, { seed: fromHex(v.Secret), oaepSeed: fromHex(v.OAEPSalt ?? "") });
    assert.equal(hex(out.encryptedSecret), v.Ciphertext.toLowerCase(), v.Name);
  }
});

test("ECC labeled encapsulation: all 100 vectors byte-exact (ECDH + KDFe)", () => {
  const vs = load<EncapsVector[]>("vectors/tpm-test-vectors/ecc_labeled_encaps.json");
  assert.equal(vs.length, 100);
  for (const v of vs) {
    const pub = decodeExact(TPMT_PUBLIC, fromHex(v.PublicKey));
    const out = labeledEncapsulate(pub, v.Label, { ephemeralPrivate: fromHex(v.EphemeralPrivate ?? "") });
    assert.equal(hex(out.seed), v.Secret.toLowerCase(), `${v.Name} seed`);
    assert.equal(hex(out.encryptedSecret), v.Ciphertext.toLowerCase(), `${v.Name} ciphertext`);
  }
});

interface KeylimeMc {
  rsa: Record<string, string>;
  ecc: Record<string, string>;
}

test("MakeCredential: keylime RSA case byte-exact (ID object, and the fixed 80-byte prefix of the tpm2-tools file)", () => {
  const v = load<KeylimeMc>("vectors/makecredential_keylime.json").rsa;
  const ek = decodeExact(TPM2B_PUBLIC, fromHex(v["ek_tpm2b_public_hex"] ?? ""));
  const c = makeCredential(ek, fromHex(v["ak_name_hex"] ?? ""), fromHex(v["credential_hex"] ?? ""), { seed: fromHex(v["seed_hex"] ?? "") });
  assert.equal(hex(c.idObject), v["tpm2b_id_object_hex"]);
  const file = tpm2ToolsCredentialFile(c);
  assert.equal(hex(file.subarray(0, 80)), v["expected_upstream_prefix_80_bytes_hex"]);
  assert.equal(c.encryptedSecret.length, 2 + 256);
});

test("MakeCredential: keylime ECC case byte-exact (whole tpm2-tools credential file)", () => {
  const v = load<KeylimeMc>("vectors/makecredential_keylime.json").ecc;
  const ek = decodeExact(TPM2B_PUBLIC, fromHex(v["ek_tpm2b_public_hex"] ?? ""));
  const d = BigInt(v["ephemeral_private_decimal"] ?? "0").toString(16).padStart(64, "0");
  const c = makeCredential(ek, fromHex(v["ak_name_hex"] ?? ""), fromHex(v["credential_hex"] ?? ""), { ephemeralPrivate: fromHex(d) });
  assert.equal(hex(c.encryptedSecret), v["tpm2b_encrypted_secret_hex"]);
  assert.equal(hex(c.idObject), v["tpm2b_id_object_hex"]);
  assert.equal(hex(tpm2ToolsCredentialFile(c)), v["expected_upstream_full_hex"]);
});

test("MakeCredential refuses credentials longer than the EK digest and non-EK protectors", () => {
  const v = load<KeylimeMc>("vectors/makecredential_keylime.json").ecc;
  const ek = decodeExact(TPM2B_PUBLIC, fromHex(v["ek_tpm2b_public_hex"] ?? ""));
  const name = fromHex(v["ak_name_hex"] ?? "");
  assert.throws(() => makeCredential(ek, name, new Uint8Array(33)), /credential must be 1\.\.32 bytes/);
  assert.throws(() => makeCredential({ ...ek, objectAttributes: 0x00040072 }, name, new Uint8Array(32)), /restricted decryption key/);
});
