/**
 * Property tests over the TPM structure codecs: random and mutated inputs never crash with anything but a
 * typed ParseError, and whatever decodes re-encodes to the exact same bytes.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import fc from "fast-check";
import { type Codec, decodeExact, encode, ParseError } from "@fleetd/verify/codec";
import { fromHex } from "@fleetd/verify/crypto";
import { conformance } from "@fleetd/testkit/conformance";
import {
  TPM2B_ID_OBJECT,
  TPM2B_PUBLIC,
  TPML_PCR_SELECTION,
  TPMS_ATTEST,
  TPMT_PUBLIC,
  TPMT_SIGNATURE,
} from "@fleetd/verify/tpm";

const RUNS = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 3000);

function seeds(): { codec: Codec<unknown>; bytes: Uint8Array }[] {
  const win = JSON.parse(readFileSync(conformance("quotes/go-attestation_windows_gcp_shielded_vm.json"), "utf8")) as {
    AK: { Public: string; CreateAttestation: string };
    Quote: { Quote: string; Signature: string };
  };
  const cos = JSON.parse(readFileSync(conformance("quotes/go-tpm-tools_gce-cos-85-nonce9009.json"), "utf8")) as {
    ak_pub_tpmt_public_hex: string;
    quotes: { quote_tpms_attest_hex: string; raw_sig_tpmt_signature_hex: string }[];
  };
  const mc = JSON.parse(readFileSync(conformance("vectors/makecredential_keylime.json"), "utf8")) as {
    ecc: { ek_tpm2b_public_hex: string; tpm2b_id_object_hex: string };
  };
  const b64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
  const q0 = cos.quotes[0];
  assert.ok(q0);
  return [
    { codec: TPMT_PUBLIC as Codec<unknown>, bytes: b64(win.AK.Public) },
    { codec: TPMT_PUBLIC as Codec<unknown>, bytes: fromHex(cos.ak_pub_tpmt_public_hex) },
    { codec: TPM2B_PUBLIC as Codec<unknown>, bytes: fromHex(mc.ecc.ek_tpm2b_public_hex) },
    { codec: TPMS_ATTEST as Codec<unknown>, bytes: b64(win.Quote.Quote) },
    { codec: TPMS_ATTEST as Codec<unknown>, bytes: b64(win.AK.CreateAttestation) },
    { codec: TPMS_ATTEST as Codec<unknown>, bytes: fromHex(q0.quote_tpms_attest_hex) },
    { codec: TPMT_SIGNATURE as Codec<unknown>, bytes: b64(win.Quote.Signature) },
    { codec: TPMT_SIGNATURE as Codec<unknown>, bytes: fromHex(q0.raw_sig_tpmt_signature_hex) },
    { codec: TPM2B_ID_OBJECT as Codec<unknown>, bytes: fromHex(mc.ecc.tpm2b_id_object_hex) },
  ];
}

/** Decode; on success the re-encoding must be byte-identical; on failure only ParseError is allowed. */
function decodeOrTypedError(codec: Codec<unknown>, bytes: Uint8Array): void {
  let value: unknown;
  try {
    value = decodeExact(codec, bytes);
  } catch (e) {
    if (e instanceof ParseError) {
      assert.ok(e.offset >= 0 && e.offset <= bytes.length, `offset ${e.offset} outside input`);
      assert.ok(e.path.length > 0);
      return;
    }
    throw e;
  }
  assert.deepEqual(encode(codec, value), bytes);
}

test("seeds round-trip exactly", () => {
  for (const s of seeds()) assert.deepEqual(encode(s.codec, decodeExact(s.codec, s.bytes)), s.bytes);
});

test("mutated real structures: typed errors or exact round-trips", () => {
  const all = seeds();
  fc.assert(
    fc.property(
      fc.nat(all.length - 1),
      fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }),
      fc.option(fc.nat(), { nil: undefined }),
      fc.uint8Array({ maxLength: 8 }),
      (i, flips, cut, extra) => {
        const s = all[i];
        assert.ok(s);
        let b = s.bytes.slice();
        for (const [pos, val] of flips) b[pos % b.length] = val;
        if (cut !== undefined) b = b.subarray(0, cut % (b.length + 1));
        if (extra.length && cut === undefined) b = new Uint8Array([...b, ...extra]);
        decodeOrTypedError(s.codec, b);
      },
    ),
    { numRuns: RUNS },
  );
});

test("random bytes: typed errors or exact round-trips for every structure", () => {
  const codecs = [TPMT_PUBLIC, TPM2B_PUBLIC, TPMS_ATTEST, TPMT_SIGNATURE, TPML_PCR_SELECTION, TPM2B_ID_OBJECT] as Codec<unknown>[];
  fc.assert(
    fc.property(fc.nat(codecs.length - 1), fc.uint8Array({ maxLength: 600 }), (i, bytes) => {
      const codec = codecs[i];
      assert.ok(codec);
      decodeOrTypedError(codec, bytes);
    }),
    { numRuns: RUNS },
  );
});

test("oversized sizes are refused before reading, naming the field", () => {
  // TPM2B_DIGEST authPolicy claiming 0xffff bytes.
  const bytes = fromHex("0001000b00050072ffff");
  assert.throws(
    () => decodeExact(TPMT_PUBLIC, bytes),
    (e: unknown) => e instanceof ParseError && e.code === "oversized" && /TPMT_PUBLIC\.authPolicy/.test(e.message) && e.offset === 8,
  );
});
