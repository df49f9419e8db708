/**
 * Property tests: whatever bytes arrive — random, or a real EK certificate / CA / public area with bytes
 * flipped, cut, inserted or length fields inflated — the EK parsers either return a value or throw one of
 * the typed errors (ParseError, CertificateError, KeyError). Never a RangeError/TypeError, never a hang.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import fc from "fast-check";
import { ParseError } from "@fleetd/verify/codec";
import { KeyError } from "@fleetd/verify/tpm";
import { conformance } from "@fleetd/testkit/conformance";
import { readCertificate, readEkPublic, verifyEkCertificate, caStoreFrom, certificatesInFile } from "@fleetd/verify/ek";
import { CertificateError } from "@fleetd/verify/x509";
import { loadCaStore } from "@fleetd/platform/trust";

const file = (rel: string) => new Uint8Array(readFileSync(conformance(rel)));
const typed = (e: unknown) => e instanceof ParseError || e instanceof CertificateError || e instanceof KeyError;

function mustBeTypedOrValue<T>(f: () => T): T | undefined {
  try {
    return f();
  } catch (e) {
    if (!typed(e)) throw e;
    return undefined;
  }
}

const seeds = [
  file("ek/certs/stm_st33htph_rsa_ek.der"),
  file("ek/certs/stm_st33htph_ecc_ek.der"),
  file("ek/certs/stm_st33htph_rsa_ek_nvread_padded.bin"),
  new Uint8Array(readFileSync(conformance("ca/keylime-tpm_cert_store/NUVO_2110.pem"))),
  file("ek/certs/gce_uca_tpm_rsa_enc_cert.pem"),
];

/** A mutation of one seed: flip bytes, cut, insert, set a byte to a length-ish value. */
const mutated = fc
  .record({
    seed: fc.integer({ min: 0, max: seeds.length - 1 }),
    edits: fc.array(
      fc.record({
        kind: fc.constantFrom("flip", "set", "cut", "insert", "delete"),
        pos: fc.nat(),
        value: fc.integer({ min: 0, max: 255 }),
      }),
      { minLength: 1, maxLength: 6 },
    ),
  })
  .map(({ seed, edits }) => {
    let b = Array.from(seeds[seed] ?? []);
    for (const e of edits) {
      if (b.length === 0) break;
      const p = e.pos % b.length;
      if (e.kind === "flip") b[p] = (b[p] ?? 0) ^ (1 << (e.value & 7));
      else if (e.kind === "set") b[p] = [0x00, 0x7f, 0x80, 0x81, 0x82, 0x84, 0xff, e.value][e.value & 7] ?? 0;
      else if (e.kind === "cut") b = b.slice(0, p);
      else if (e.kind === "insert") b.splice(p, 0, e.value);
      else b.splice(p, 1);
    }
    return new Uint8Array(b);
  });

test("readCertificate on random bytes: typed errors only", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 2048 }), (b) => {
      mustBeTypedOrValue(() => readCertificate(b));
    }),
    { numRuns: 2000 },
  );
});

test("readCertificate on DER-looking random input (SEQUENCE header + random body): typed errors only", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 600 }), fc.integer({ min: 0, max: 3 }), (body, form) => {
      const len = body.length;
      const head = form === 0 ? [0x30, len & 0x7f] : form === 1 ? [0x30, 0x81, len & 0xff] : form === 2 ? [0x30, 0x82, len >> 8, len & 0xff] : [0x10, 0x01, 0x00, len >> 8, len & 0xff];
      mustBeTypedOrValue(() => readCertificate(new Uint8Array([...head, ...body])));
    }),
    { numRuns: 2000 },
  );
});

test("mutated real certificates: parse or typed error; whatever parses can be judged without throwing", () => {
  const store = loadCaStore(conformance("ca/keylime-tpm_cert_store"));
  let parsed = 0;
  fc.assert(
    fc.property(mutated, (b) => {
      const input = mustBeTypedOrValue(() => readCertificate(b));
      if (input) {
        parsed++;
        const v = verifyEkCertificate(input.cert, store);
        assert.ok(v.verdict === "pass" || v.verdict === "fail");
      }
    }),
    { numRuns: 1500 },
  );
  assert.ok(parsed > 0, "some mutations still parse (e.g. flips inside strings and signatures)");
});

test("CA store file loader: mutated PEM/DER files never throw; problems land in skipped", () => {
  fc.assert(
    fc.property(mutated, (b) => {
      const skipped: { source: string; reason: string }[] = [];
      const certs = certificatesInFile(b, "fuzz", skipped);
      caStoreFrom(certs, skipped);
      assert.ok(certs.length + skipped.length >= 1);
    }),
    { numRuns: 1000 },
  );
});

test("readEkPublic on random and mutated public areas: typed errors only", () => {
  const pubs = [file("ek/public/intel_ptt_rsa_ek.tpm2b_public.bin"), file("ek/public/intel_ptt_ecc_ek.tpm2b_public.bin")];
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 700 }), (b) => {
      mustBeTypedOrValue(() => readEkPublic(b));
    }),
    { numRuns: 1500 },
  );
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 1 }), fc.nat(), fc.integer({ min: 0, max: 255 }), fc.boolean(), (i, pos, v, cut) => {
      const b = new Uint8Array(pubs[i] ?? []);
      const p = pos % b.length;
      const m = cut ? b.subarray(0, p) : (b.set([v], p), b);
      mustBeTypedOrValue(() => readEkPublic(m));
    }),
    { numRuns: 1500 },
  );
});
