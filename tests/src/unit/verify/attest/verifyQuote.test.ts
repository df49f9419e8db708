/** Quote verification against real signed quotes (conformance/quotes) and mutations of them. */
import { strict as assert } from "node:assert";
import { createPublicKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { decodeExact } from "@fleetd/verify/codec";
import { fromHex } from "@fleetd/verify/crypto";
import { conformance } from "@fleetd/testkit/conformance";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { TPMT_PUBLIC, type TPMT_PUBLIC as Public } from "@fleetd/verify/tpm";
import { tpmPublicFromKey } from "@fleetd/testkit/tpmPublic";
import { parseTpm2ToolsPcrFile, type PcrValues, verifyQuote } from "@fleetd/verify/attest";

const load = <T>(rel: string): T => JSON.parse(readFileSync(conformance(rel), "utf8")) as T;
const b64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
const flip = (b: Uint8Array, i: number) => {
  const o = b.slice();
  o[i] = (o[i] ?? 0) ^ 0x01;
  return o;
};

interface CosDump {
  expected_nonce_hex: string;
  ak_pub_tpmt_public_hex: string;
  quotes: { quote_tpms_attest_hex: string; raw_sig_tpmt_signature_hex: string; pcrs: { hash: string; pcrs: Record<string, string> } }[];
}

const BANKS: Record<string, number> = { sha1: TPM_ALG.SHA1, sha256: TPM_ALG.SHA256, sha384: TPM_ALG.SHA384 };
function pcrValues(bank: string, pcrs: Record<string, string>): PcrValues {
  const m = new Map<number, Uint8Array>();
  for (const [k, v] of Object.entries(pcrs)) m.set(Number(k), fromHex(v));
  return new Map([[BANKS[bank] ?? 0, m]]);
}

for (const name of ["gce-cos-85-nonce9009", "gce-cos-85-no-nonce"]) {
  test(`go-tpm-tools ${name}: all three bank quotes verify with the stated nonce and fail with any other`, () => {
    const d = load<CosDump>(`quotes/go-tpm-tools_${name}.json`);
    const ak = decodeExact(TPMT_PUBLIC, fromHex(d.ak_pub_tpmt_public_hex));
    const nonce = fromHex(d.expected_nonce_hex);
    assert.equal(d.quotes.length, 3);
    for (const q of d.quotes) {
      const input = {
        akPublic: ak,
        quote: fromHex(q.quote_tpms_attest_hex),
        signature: fromHex(q.raw_sig_tpmt_signature_hex),
        pcrs: pcrValues(q.pcrs.hash, q.pcrs.pcrs),
        expectedExtraData: nonce,
      };
      const ok = verifyQuote(input);
      assert.equal(ok.verdict, "pass", `${q.pcrs.hash}: ${JSON.stringify(ok.reasons)}`);
      const other = verifyQuote({ ...input, expectedExtraData: fromHex("9008") });
      assert.equal(other.verdict, "fail");
      assert.ok(other.reasons.some((r) => r.check === "quote.extraData"));
      const pcr0 = input.pcrs.get(BANKS[q.pcrs.hash] ?? 0)?.get(0) ?? new Uint8Array();
      const tampered = new Map(input.pcrs);
      tampered.set(BANKS[q.pcrs.hash] ?? 0, new Map([...(input.pcrs.get(BANKS[q.pcrs.hash] ?? 0) ?? [])]).set(0, flip(pcr0, 3)));
      assert.deepEqual(verifyQuote({ ...input, pcrs: tampered }).reasons.map((r) => r.check), ["quote.pcrDigest"]);
      assert.ok(verifyQuote({ ...input, quote: flip(input.quote, 40) }).reasons.some((r) => r.check === "quote.signature.signature"));
      assert.ok(verifyQuote({ ...input, signature: flip(input.signature, 30) }).reasons.some((r) => r.check === "quote.signature.signature"));
    }
  });
}

test("go-attestation Windows quote (RSASSA-SHA1, empty nonce): verifies only when SHA-1 signatures are allowed", () => {
  const d = load<{ AK: { Public: string }; Quote: { Quote: string; Signature: string }; Log: { PCRs: { Index: number; Digest: string; DigestAlg: number }[] } }>(
    "quotes/go-attestation_windows_gcp_shielded_vm.json",
  );
  const ak = decodeExact(TPMT_PUBLIC, b64(d.AK.Public));
  const bank = new Map<number, Uint8Array>();
  for (const p of d.Log.PCRs) bank.set(p.Index, b64(p.Digest));
  const input = {
    akPublic: ak,
    quote: b64(d.Quote.Quote),
    signature: b64(d.Quote.Signature),
    pcrs: new Map([[TPM_ALG.SHA1 as number, bank]]),
    expectedExtraData: new Uint8Array(0),
  };
  const strict = verifyQuote(input);
  assert.equal(strict.verdict, "fail");
  assert.deepEqual(strict.reasons.map((r) => r.check), ["quote.signature.hash"]);
  const lenient = verifyQuote({ ...input, signature_options: { minHashSize: 20 } });
  assert.equal(lenient.verdict, "pass", JSON.stringify(lenient.reasons));
  assert.equal(verifyQuote({ ...input, signature_options: { minHashSize: 20 }, expectedExtraData: Uint8Array.of(0) }).verdict, "fail");
});

function akFromPem(pem: string): Public {
  return tpmPublicFromKey(createPublicKey(pem), 0x00050072);
}

test("keylime checkquote vector: tpm2-tools serialized PCR blob, ASCII nonce; upstream negative cases refused", () => {
  const d = load<Record<string, string>>("quotes/keylime_checkquote.json");
  const ak = akFromPem(d["ak_public_pem"] ?? "");
  const quote = fromHex(d["quote_tpms_attest_hex"] ?? "");
  const blob = fromHex(d["pcrblob_hex"] ?? "");
  const parsed = parseTpm2ToolsPcrFile(blob, "auto");
  assert.equal(parsed.format, "serialized");
  assert.deepEqual(parsed.selection, [{ hash: TPM_ALG.SHA256, pcrs: [16] }]);
  const input = { akPublic: ak, quote, signature: fromHex(d["signature_tpmt_signature_hex"] ?? ""), pcrs: parsed.values, expectedExtraData: new TextEncoder().encode(d["nonce_ascii"] ?? "") };
  assert.equal(verifyQuote(input).verdict, "pass", JSON.stringify(verifyQuote(input).reasons));
  assert.equal(verifyQuote({ ...input, quote: flip(quote, 5) }).verdict, "fail");
  const nonce = input.expectedExtraData.slice();
  nonce[0] = 0x42;
  assert.equal(verifyQuote({ ...input, expectedExtraData: nonce }).verdict, "fail");
  const badBlob = parseTpm2ToolsPcrFile(flip(blob, 145), "serialized");
  assert.equal(verifyQuote({ ...input, pcrs: badBlob.values }).verdict, "fail");
});

test("a supplied PCR that the quote does not cover, or a quoted PCR without a value, is refused", () => {
  const d = load<CosDump>("quotes/go-tpm-tools_gce-cos-85-nonce9009.json");
  const q = d.quotes[1];
  assert.ok(q);
  const ak = decodeExact(TPMT_PUBLIC, fromHex(d.ak_pub_tpmt_public_hex));
  const pcrs = pcrValues(q.pcrs.hash, q.pcrs.pcrs);
  const base = { akPublic: ak, quote: fromHex(q.quote_tpms_attest_hex), signature: fromHex(q.raw_sig_tpmt_signature_hex), expectedExtraData: fromHex("9009") };
  const fewer = new Map([...pcrs].map(([k, v]) => [k, new Map([...v].filter(([i]) => i !== 7))] as const));
  assert.ok(verifyQuote({ ...base, pcrs: fewer }).reasons.some((r) => r.check === "quote.pcrSelect" && /sha\d+:7/.test(r.detail)));
  const more = new Map(pcrs);
  more.set(TPM_ALG.SHA512, new Map([[0, new Uint8Array(64)]]));
  assert.ok(verifyQuote({ ...base, pcrs: more }).reasons.some((r) => r.check === "quote.pcrSelect" && /sha512:0/.test(r.detail)));
});

test("go-eventlog's linux_tpm12.json is refused as TPM 1.2 (quote and AK alike)", () => {
  const d = load<{ Static: { TPMVersion: number }; AK: { Public: string }; Quote: { Quote: string; Signature: string } }>(
    "eventlogs/go-attestation/linux_tpm12.json",
  );
  assert.equal(d.Static.TPMVersion, 1);
  // The TPM 1.2 AK (TPM_PUBKEY) is not a TPMT_PUBLIC at all.
  assert.throws(() => decodeExact(TPMT_PUBLIC, b64(d.AK.Public)));
  const anyAk = decodeExact(TPMT_PUBLIC, fromHex(load<CosDump>("quotes/go-tpm-tools_gce-cos-85-nonce9009.json").ak_pub_tpmt_public_hex));
  const r = verifyQuote({ akPublic: anyAk, quote: b64(d.Quote.Quote), signature: b64(d.Quote.Signature), pcrs: new Map(), expectedExtraData: new Uint8Array() });
  assert.equal(r.verdict, "fail");
  assert.deepEqual(r.reasons.map((x) => x.check), ["quote.tpmVersion"]);
});

/** The values of `bank` re-cut: the same bytes in the same order, split at other places (lengths `sizes`, by PCR). */
function recut(bank: Map<number, Uint8Array>, sizes: Record<number, number>): Map<number, Uint8Array> {
  const order = [...bank.keys()].sort((a, b) => a - b);
  const all = Buffer.concat(order.map((p) => bank.get(p) ?? new Uint8Array()));
  const out = new Map<number, Uint8Array>();
  let at = 0;
  for (const p of order) {
    const n = sizes[p] ?? (bank.get(p)?.length as number);
    out.set(p, new Uint8Array(all.subarray(at, at + n)));
    at += n;
  }
  assert.equal(at, all.length, "a re-cut keeps every byte");
  return out;
}

test("issue 10: PCR values re-cut across their boundaries keep pcrDigest but are refused, naming bank and PCR", () => {
  // A real signed quote (GCE vTPM, SHA-384 bank, PCRs 0-23): pcrDigest = SHA-256(PCR0 ‖ … ‖ PCR23).
  const d = load<CosDump>("quotes/go-tpm-tools_gce-cos-85-nonce9009.json");
  const q = d.quotes.find((x) => x.pcrs.hash === "sha384");
  assert.ok(q);
  const ak = decodeExact(TPMT_PUBLIC, fromHex(d.ak_pub_tpmt_public_hex));
  const base = { akPublic: ak, quote: fromHex(q.quote_tpms_attest_hex), signature: fromHex(q.raw_sig_tpmt_signature_hex), expectedExtraData: fromHex("9009") };
  const real = pcrValues(q.pcrs.hash, q.pcrs.pcrs).get(TPM_ALG.SHA384) as Map<number, Uint8Array>;
  assert.equal(verifyQuote({ ...base, pcrs: new Map([[TPM_ALG.SHA384, real]]) }).verdict, "pass");

  // PCR 0 takes 16 bytes of PCR 1: the concatenation (and so pcrDigest) is unchanged, PCR 0 and 1 are not.
  const shifted = recut(real, { 0: 64, 1: 32 });
  assert.notDeepEqual(shifted.get(0), real.get(0));
  const one = verifyQuote({ ...base, pcrs: new Map([[TPM_ALG.SHA384, shifted]]) });
  assert.equal(one.verdict, "fail");
  assert.deepEqual(one.reasons.map((r) => r.check), ["quote.pcrValueSize"]);
  assert.match(one.reasons[0]?.detail ?? "", /sha384:0 is 64, sha384:1 is 32/);

  // One wrong value is named by its PCR.
  const short = recut(real, { 22: 47, 23: 49 });
  const two = verifyQuote({ ...base, pcrs: new Map([[TPM_ALG.SHA384, short]]) });
  assert.deepEqual(two.reasons.map((r) => r.check), ["quote.pcrValueSize"]);
  assert.match(two.reasons[0]?.detail ?? "", /exactly 48 bytes; sha384:22 is 47, sha384:23 is 49/);

  // A value of a bank without a known digest size cannot be placed either.
  const unknown = verifyQuote({ ...base, pcrs: new Map([[TPM_ALG.SHA384, real], [0x0099, new Map([[0, new Uint8Array(32)]])]]) });
  assert.ok(unknown.reasons.some((r) => r.check === "quote.pcrValueSize" && /no known digest size/.test(r.detail)));
});
