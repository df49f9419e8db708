import { strict as assert } from "node:assert";
import { generateKeyPairSync, sign, verify } from "node:crypto";
import { test } from "node:test";
import fc from "fast-check";
import { ecdsaSignatureToDer } from "./ecdsaSignature.js";
import { PkiError } from "./errors.js";

const runs = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 50);

test("r || s from a P-256 / P-384 signer becomes a DER signature node:crypto verifies", () => {
  for (const [curve, size] of [["P-256", 32], ["P-384", 48]] as const) {
    const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: curve });
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (msg) => {
        const raw = sign("sha256", msg, { key: privateKey, dsaEncoding: "ieee-p1363" });
        const der = ecdsaSignatureToDer(raw, size);
        assert.ok(verify("sha256", msg, publicKey, der)); // DER is node's default dsaEncoding
      }),
      { numRuns: runs },
    );
  }
});

test("wrong lengths and zero halves are refused", () => {
  assert.throws(() => ecdsaSignatureToDer(new Uint8Array(63), 32), (e) => e instanceof PkiError && e.code === "sign-failed");
  assert.throws(() => ecdsaSignatureToDer(new Uint8Array(64), 32), /zero r or s/);
});
