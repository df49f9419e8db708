/** Bad input to the CA's parsers gives a PkiError — never a raw RangeError, TypeError or a hang. */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { newSoftwareSigner } from "@fleetd/testkit/softwareSigner";
import {
  parseBundleState, createCaCertificate, PkiError, parseIssuedCertificate, certificatesFromPem,
  publicKeyInfoFromSpki, verifyIssued,
} from "@fleetd/platform/pki";
import { onlyErrorsOf } from "../../typedErrors.js";

const runs = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 200);

const onlyPkiErrors = (fn: () => unknown): void => onlyErrorsOf(PkiError, fn);

async function seedCertificate(): Promise<Uint8Array> {
  const ca = await createCaCertificate({ signer: newSoftwareSigner(), commonName: "seed", notBefore: new Date("2026-01-01T00:00:00Z"), lifetimeDays: 365 });
  return ca.der;
}

test("parseIssuedCertificate: random bytes and mutated certificates", async () => {
  const SEED = await seedCertificate();
  assert.equal(parseIssuedCertificate(SEED).subjectCn, "seed");
  fc.assert(fc.property(fc.uint8Array({ maxLength: 600 }), (b) => onlyPkiErrors(() => parseIssuedCertificate(b))), { numRuns: runs });
  fc.assert(
    fc.property(fc.nat(SEED.length - 1), fc.integer({ min: 0, max: 255 }), fc.nat(SEED.length), (i, v, cut) => {
      const b = new Uint8Array(SEED);
      b[i] = v;
      onlyPkiErrors(() => parseIssuedCertificate(b.subarray(0, Math.max(cut, i + 1))));
      onlyPkiErrors(() => verifyIssued(b, [SEED], new Date("2026-06-01T00:00:00Z")));
    }),
    { numRuns: runs },
  );
});

test("PEM and bundle state: random text", () => {
  fc.assert(
    fc.property(fc.string({ maxLength: 400 }), (s) => {
      onlyPkiErrors(() => certificatesFromPem(s));
      onlyPkiErrors(() => certificatesFromPem(`-----BEGIN CERTIFICATE-----\n${s}\n-----END CERTIFICATE-----\n`));
      onlyPkiErrors(() => parseBundleState(s));
    }),
    { numRuns: runs },
  );
  fc.assert(fc.property(fc.jsonValue(), (j) => onlyPkiErrors(() => parseBundleState(JSON.stringify(j)))), { numRuns: runs });
  assert.throws(() => parseBundleState(JSON.stringify({ version: 1, cas: [{}] })), PkiError);
});

test("public keys: random bytes", () => {
  fc.assert(fc.property(fc.uint8Array({ maxLength: 300 }), (b) => onlyPkiErrors(() => publicKeyInfoFromSpki(b))), { numRuns: runs });
});
