/**
 * Property tests of the TPM 1.2 declarations: any bytes either decode and re-encode to exactly the same bytes, or
 * fail with a ParseError inside the input (never a RangeError); mutations of well-formed structures likewise.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { type Codec, decodeExact, encode, ParseError } from "../codec/codec.js";
import { aikTemplate, pubkeyOfKey } from "./keys.js";
import { TPM_ASYM_CA_CONTENTS, TPM_CAP_VERSION_INFO, TPM_IDENTITY_CONTENTS, TPM_KEY, TPM_PCR_COMPOSITE, TPM_PUBKEY, TPM_QUOTE_INFO, TPM_STRUCT_VER_1_1, TPM12 } from "./structures.js";

const RUNS = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 2000);

function roundTrips(codec: Codec<unknown>, bytes: Uint8Array): void {
  let v: unknown;
  try {
    v = decodeExact(codec, bytes);
  } catch (e) {
    assert.ok(e instanceof ParseError && e.offset >= 0 && e.offset <= bytes.length, `${codec.typeName}: ${String(e)}`);
    return;
  }
  assert.deepEqual(encode(codec, v), bytes, codec.typeName);
}

const key = { ...aikTemplate(), pubKey: new Uint8Array(256).fill(0xc1), encData: new Uint8Array(40).fill(7) };
const SEEDS: [Codec<unknown>, Uint8Array][] = [
  [TPM_KEY as Codec<unknown>, encode(TPM_KEY, key)],
  [TPM_PUBKEY as Codec<unknown>, pubkeyOfKey(key)],
  [TPM_ASYM_CA_CONTENTS as Codec<unknown>, encode(TPM_ASYM_CA_CONTENTS, { sessionKey: { algId: TPM12.ALG_AES256, encScheme: TPM12.ES_SYM_CBC_PKCS5PAD, data: new Uint8Array(32).fill(3) }, idDigest: new Uint8Array(20).fill(4) })],
  [TPM_PCR_COMPOSITE as Codec<unknown>, encode(TPM_PCR_COMPOSITE, { select: Uint8Array.of(0xff, 0xff, 0), pcrValue: new Uint8Array(16 * 20).fill(9) })],
  [TPM_QUOTE_INFO as Codec<unknown>, encode(TPM_QUOTE_INFO, { version: TPM_STRUCT_VER_1_1, fixed: new TextEncoder().encode("QUOT"), digestValue: new Uint8Array(20), externalData: new Uint8Array(20).fill(1) })],
  [TPM_IDENTITY_CONTENTS as Codec<unknown>, encode(TPM_IDENTITY_CONTENTS, { ver: TPM_STRUCT_VER_1_1, ordinal: 0x79, labelPrivCADigest: new Uint8Array(20), identityPubKey: decodeExact(TPM_PUBKEY, pubkeyOfKey(key)) })],
  [TPM_CAP_VERSION_INFO as Codec<unknown>, Uint8Array.from(Buffer.from("00300102129e000203" + "49424d00" + "0000", "hex"))],
];

test("TPM 1.2 structures: random bytes decode-and-re-encode exactly or fail with a ParseError", () => {
  fc.assert(
    fc.property(fc.nat(SEEDS.length - 1), fc.uint8Array({ maxLength: 600 }), (i, bytes) => roundTrips((SEEDS[i] ?? SEEDS[0]!)[0], bytes)),
    { numRuns: RUNS },
  );
});

test("TPM 1.2 structures: mutated well-formed seeds (flips, truncation, extra bytes) too", () => {
  for (const [codec, seed] of SEEDS) roundTrips(codec, seed);
  fc.assert(
    fc.property(
      fc.nat(SEEDS.length - 1),
      fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 6 }),
      fc.option(fc.nat(), { nil: undefined }),
      fc.uint8Array({ maxLength: 4 }),
      (i, flips, cut, extra) => {
        const [codec, seed] = SEEDS[i] ?? SEEDS[0]!;
        const b = new Uint8Array(seed);
        for (const [at, v] of flips) b[at % b.length] = v;
        const cutAt = cut === undefined ? b.length : cut % (b.length + 1);
        roundTrips(codec, new Uint8Array([...b.subarray(0, cutAt), ...extra]));
      },
    ),
    { numRuns: RUNS },
  );
});
