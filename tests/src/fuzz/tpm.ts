/**
 * Fuzz target: TPM 2.0 structure decoders on random and mutated inputs. Every input must either decode and
 * re-encode to the same bytes, or fail with a typed ParseError inside the input's bounds.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import fc from "fast-check";
import { type Codec, decodeExact, encode, ParseError } from "@fleetd/verify/codec";
import { fromHex } from "@fleetd/verify/crypto";
import { conformance } from "@fleetd/testkit/conformance";
import { TPM2B_ID_OBJECT, TPM2B_PUBLIC, TPML_PCR_SELECTION, TPMS_ATTEST, TPMT_PUBLIC, TPMT_SIGNATURE } from "@fleetd/verify/tpm";

export interface FuzzResult {
  target: string;
  runs: number;
  ms: number;
}

function seeds(): [Codec<unknown>, Uint8Array][] {
  const b64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
  const win = JSON.parse(readFileSync(conformance("quotes/go-attestation_windows_gcp_shielded_vm.json"), "utf8")) as {
    AK: { Public: string; CreateAttestation: string };
    Quote: { Quote: string; Signature: string };
  };
  const mc = JSON.parse(readFileSync(conformance("vectors/makecredential_keylime.json"), "utf8")) as {
    rsa: { ek_tpm2b_public_hex: string; tpm2b_id_object_hex: string };
  };
  return [
    [TPMT_PUBLIC as Codec<unknown>, b64(win.AK.Public)],
    [TPMS_ATTEST as Codec<unknown>, b64(win.Quote.Quote)],
    [TPMS_ATTEST as Codec<unknown>, b64(win.AK.CreateAttestation)],
    [TPMT_SIGNATURE as Codec<unknown>, b64(win.Quote.Signature)],
    [TPM2B_PUBLIC as Codec<unknown>, fromHex(mc.rsa.ek_tpm2b_public_hex)],
    [TPM2B_ID_OBJECT as Codec<unknown>, fromHex(mc.rsa.tpm2b_id_object_hex)],
    [TPML_PCR_SELECTION as Codec<unknown>, fromHex("00000002000403ff0000000b03830000")],
  ];
}

function check(codec: Codec<unknown>, bytes: Uint8Array): void {
  let v: unknown;
  try {
    v = decodeExact(codec, bytes);
  } catch (e) {
    if (e instanceof ParseError && e.offset >= 0 && e.offset <= bytes.length) return;
    throw e;
  }
  assert.deepEqual(encode(codec, v), bytes);
}

/** The byte fuzzers' mutation of a seed: up to 6 bytes overwritten, then cut short or extended by up to 4 bytes. */
export const byteMutation = fc.record({
  flips: fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 6 }),
  cut: fc.option(fc.nat(), { nil: undefined }),
  extra: fc.uint8Array({ maxLength: 4 }),
});
export type ByteMutation = typeof byteMutation extends fc.Arbitrary<infer T> ? T : never;

export function mutate(seed: Uint8Array, m: ByteMutation): Uint8Array {
  let b = seed.slice();
  for (const [pos, val] of m.flips) b[pos % b.length] = val;
  if (m.cut !== undefined) b = b.subarray(0, m.cut % (b.length + 1));
  else if (m.extra.length) b = new Uint8Array([...b, ...m.extra]);
  return b;
}

export function fuzzTpm(runs: number): FuzzResult {
  const s = seeds();
  const start = performance.now();
  fc.assert(
    fc.property(
      fc.nat(s.length - 1),
      byteMutation,
      (i, m) => {
        const [codec, seed] = s[i] ?? s[0]!;
        check(codec, mutate(seed, m));
      },
    ),
    { numRuns: Math.ceil(runs / 2) },
  );
  fc.assert(
    fc.property(fc.nat(s.length - 1), fc.uint8Array({ maxLength: 700 }), (i, bytes) => check((s[i] ?? s[0]!)[0], bytes)),
    { numRuns: Math.floor(runs / 2) },
  );
  return { target: "tpm-structures", runs, ms: performance.now() - start };
}
