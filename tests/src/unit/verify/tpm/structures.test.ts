import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { decodeExact, encode, ParseError } from "@fleetd/verify/codec";
import { conformance } from "@fleetd/testkit/conformance";
import { TPM_ALG, TPM_ST, TPMA_OBJECT } from "@fleetd/verify/tcg";
import { objectName, TPMS_ATTEST, TPMT_PUBLIC, TPMT_SIGNATURE, TPM2B_PUBLIC } from "@fleetd/verify/tpm";

const b64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
const windows = JSON.parse(readFileSync(conformance("quotes/go-attestation_windows_gcp_shielded_vm.json"), "utf8")) as {
  AK: { Public: string; CreateAttestation: string; CreateSignature: string };
  Quote: { Quote: string; Signature: string };
};

test("default RSA EK template (tpm2-tools fixture) decodes and round-trips exactly", () => {
  const bytes = new Uint8Array(readFileSync(conformance("ek/public/tpm2-tools_ek-template-default.bin")));
  const pub = decodeExact(TPMT_PUBLIC, bytes);
  assert.equal(pub.type, TPM_ALG.RSA);
  assert.equal(pub.nameAlg, TPM_ALG.SHA256);
  assert.equal(pub.objectAttributes, 0x000300b2);
  assert.ok(pub.objectAttributes & TPMA_OBJECT.restricted);
  assert.equal(pub.parameters.kind, "rsa");
  if (pub.parameters.kind === "rsa") {
    assert.equal(pub.parameters.keyBits, 2048);
    assert.equal(pub.parameters.symmetric.details.kind, "aes");
  }
  assert.deepEqual(encode(TPMT_PUBLIC, pub), bytes);
});

test("Intel PTT EK public areas (TPM2B_PUBLIC) decode, round-trip, and have the documented Names", () => {
  for (const [file, name] of [
    ["intel_ptt_rsa_ek", "000bde890d2df97a20ef5dc72aa1c05998e5f90508df940688774b68d8d00daae0f8"],
    ["intel_ptt_ecc_ek", "000b041490938822bdd19e90a8feb55b2c256120f6b6065d199156c5c132926384e1"],
  ] as const) {
    const bytes = new Uint8Array(readFileSync(conformance(`ek/public/${file}.tpm2b_public.bin`)));
    const pub = decodeExact(TPM2B_PUBLIC, bytes);
    assert.deepEqual(encode(TPM2B_PUBLIC, pub), bytes);
    assert.equal(Buffer.from(objectName(bytes.subarray(2))).toString("hex"), name);
  }
});

test("Windows AK, its creation attestation, quote and signatures decode and round-trip", () => {
  const ak = b64(windows.AK.Public);
  assert.deepEqual(encode(TPMT_PUBLIC, decodeExact(TPMT_PUBLIC, ak)), ak);
  assert.equal(Buffer.from(objectName(ak)).toString("hex"), "000b4ce9b151f75089d74c15dabe9d520cffafbcafd5d43be0aad2e2d88d54717e2e");
  const creation = decodeExact(TPMS_ATTEST, b64(windows.AK.CreateAttestation));
  assert.equal(creation.type, TPM_ST.ATTEST_CREATION);
  const quote = decodeExact(TPMS_ATTEST, b64(windows.Quote.Quote));
  assert.equal(quote.attested.kind, "quote");
  for (const s of [windows.AK.CreateSignature, windows.Quote.Signature]) {
    const bytes = b64(s);
    assert.deepEqual(encode(TPMT_SIGNATURE, decodeExact(TPMT_SIGNATURE, bytes)), bytes);
  }
});

test("truncation, trailing bytes and unknown enums are typed errors naming field and offset", () => {
  const q = b64(windows.Quote.Quote);
  const e1 = assert.throws(() => decodeExact(TPMS_ATTEST, q.subarray(0, q.length - 5)), ParseError);
  void e1;
  try {
    decodeExact(TPMS_ATTEST, q.subarray(0, q.length - 5));
  } catch (e) {
    assert.ok(e instanceof ParseError);
    assert.equal(e.code, "truncated");
    assert.match(e.message, /TPMS_ATTEST\.attested\.quote\.pcrDigest/);
  }
  const trailing = new Uint8Array([...q, 0]);
  assert.throws(() => decodeExact(TPMS_ATTEST, trailing), (e: unknown) => e instanceof ParseError && e.code === "trailing-bytes");
  const badType = q.slice();
  badType[4] = 0x80;
  badType[5] = 0x99;
  assert.throws(
    () => decodeExact(TPMS_ATTEST, badType),
    (e: unknown) => e instanceof ParseError && e.code === "unknown-enum" && /TPMS_ATTEST\.type/.test(e.message) && e.offset === 4,
  );
});
