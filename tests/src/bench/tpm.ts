/**
 * Benchmarks for the TPM half of the verification core, each next to a floor measured in the same run:
 *  - quote verification (parse + signature + extraData + selection + pcrDigest) vs node:crypto's bare
 *    RSA-2048 PKCS#1 v1.5 SHA-256 verify of the same bytes;
 *  - MakeCredential for an RSA-2048 EK vs a bare RSA-OAEP publicEncrypt, and for an ECC P-256 EK vs a bare
 *    ephemeral ECDH (key generation + shared secret).
 */
import { constants, createECDH, createPublicKey, generateKeyPairSync, publicEncrypt, randomBytes, sign, verify } from "node:crypto";
import { readFileSync } from "node:fs";
import { decodeExact, encode } from "@fleetd/verify/codec";
import { fromHex } from "@fleetd/verify/crypto";
import { makeCredential } from "@fleetd/verify/credential";
import { verifyQuote } from "@fleetd/verify/attest";
import { keyObjectFromTpmPublic, TPM2B_PUBLIC, TPMT_PUBLIC, TPMT_SIGNATURE } from "@fleetd/verify/tpm";
import { conformance } from "@fleetd/testkit/conformance";
import { tpmPublicFromKey } from "@fleetd/testkit/tpmPublic";
import { opsPerSecond, row, type BenchRow } from "./measure.js";

export function benchTpm(): BenchRow[] {
  const rows: BenchRow[] = [];

  // Quote: real GCE COS-85 quote (RSA-2048 AK, RSASSA-SHA256, 24 PCRs).
  const cos = JSON.parse(readFileSync(conformance("quotes/go-tpm-tools_gce-cos-85-nonce9009.json"), "utf8")) as {
    ak_pub_tpmt_public_hex: string;
    quotes: { quote_tpms_attest_hex: string; raw_sig_tpmt_signature_hex: string; pcrs: { pcrs: Record<string, string> } }[];
  };
  const q = cos.quotes[1];
  if (!q) throw new Error("conformance quote missing");
  const ak = decodeExact(TPMT_PUBLIC, fromHex(cos.ak_pub_tpmt_public_hex));
  const quote = fromHex(q.quote_tpms_attest_hex);
  const signature = fromHex(q.raw_sig_tpmt_signature_hex);
  const pcrs = new Map([[0x000b, new Map(Object.entries(q.pcrs.pcrs).map(([k, v]) => [Number(k), fromHex(v)] as const))]]);
  const input = { akPublic: ak, quote, signature, pcrs, expectedExtraData: fromHex("9009") };
  if (verifyQuote(input).verdict !== "pass") throw new Error("bench quote does not verify");
  const key = keyObjectFromTpmPublic(ak);
  const sig = decodeExact(TPMT_SIGNATURE, signature);
  const rawSig = sig.signature.kind === "rsassa" ? sig.signature.sig : new Uint8Array();
  const floorVerify = opsPerSecond(() => {
    verify("sha256", quote, { key, padding: constants.RSA_PKCS1_PADDING }, rawSig);
  });
  const ours = opsPerSecond(() => {
    verifyQuote(input);
  });
  rows.push(row("quote verification (RSA-2048, 24 PCRs, AK parsed once)", "ops/s", ours, "node:crypto RSA verify", floorVerify));

  // ECDSA P-256 quote-shaped verify: sign a TPMS_ATTEST-sized message with a fresh key, same floor idea.
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const eccAk = tpmPublicFromKey(publicKey, ak.objectAttributes);
  const p1363 = sign("sha256", quote, { key: privateKey, dsaEncoding: "ieee-p1363" });
  const eccSig = encode(TPMT_SIGNATURE, {
    sigAlg: 0x0018,
    signature: { kind: "ecdsa", hash: 0x000b, signatureR: new Uint8Array(p1363.subarray(0, 32)), signatureS: new Uint8Array(p1363.subarray(32)) },
  });
  const eccInput = { ...input, akPublic: eccAk, signature: eccSig };
  if (verifyQuote(eccInput).verdict !== "pass") throw new Error("bench ECC quote does not verify");
  const eccKey = createPublicKey(publicKey.export({ format: "pem", type: "spki" }));
  const floorEcc = opsPerSecond(() => {
    verify("sha256", quote, { key: eccKey, dsaEncoding: "ieee-p1363" }, p1363);
  });
  const oursEcc = opsPerSecond(() => {
    verifyQuote(eccInput);
  });
  rows.push(row("quote verification (ECDSA P-256, 24 PCRs, AK parsed once)", "ops/s", oursEcc, "node:crypto ECDSA verify", floorEcc));

  // MakeCredential: keylime's RSA and ECC EKs.
  const mc = JSON.parse(readFileSync(conformance("vectors/makecredential_keylime.json"), "utf8")) as {
    rsa: { ek_tpm2b_public_hex: string; ak_name_hex: string };
    ecc: { ek_tpm2b_public_hex: string; ak_name_hex: string };
  };
  const rsaEk = decodeExact(TPM2B_PUBLIC, fromHex(mc.rsa.ek_tpm2b_public_hex));
  const rsaKey = keyObjectFromTpmPublic(rsaEk);
  const secret = new Uint8Array(randomBytes(32));
  const name = fromHex(mc.rsa.ak_name_hex);
  const floorOaep = opsPerSecond(() => {
    publicEncrypt({ key: rsaKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: "sha256" }, secret);
  });
  const oursRsa = opsPerSecond(() => {
    makeCredential(rsaEk, name, secret);
  });
  rows.push(row("MakeCredential (RSA-2048 EK)", "ops/s", oursRsa, "node:crypto RSA-OAEP encrypt", floorOaep));

  const eccEk = decodeExact(TPM2B_PUBLIC, fromHex(mc.ecc.ek_tpm2b_public_hex));
  if (eccEk.unique.kind !== "ecc") throw new Error("ECC EK expected");
  const ekPoint = Buffer.concat([Uint8Array.of(4), eccEk.unique.x, eccEk.unique.y]);
  const floorEcdh = opsPerSecond(() => {
    const e = createECDH("prime256v1");
    e.generateKeys();
    e.computeSecret(ekPoint);
  });
  const oursEcc2 = opsPerSecond(() => {
    makeCredential(eccEk, fromHex(mc.ecc.ak_name_hex), secret);
  });
  rows.push(row("MakeCredential (ECC P-256 EK)", "ops/s", oursEcc2, "node:crypto ephemeral ECDH", floorEcdh));
  return rows;
}
