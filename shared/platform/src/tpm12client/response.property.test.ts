/**
 * Property tests: whatever bytes come back from a "TPM 1.2", the client answers with a typed error (Tpm12Error
 * for a return code, ParseError for a malformed response) — never a RangeError, TypeError or hang; and a response
 * whose authorization HMAC was changed is refused (Tpm12AuthError) before its parameters are used.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { ParseError } from "@fleetd/verify/codec";
import { COMMANDS12, TPM_PcrRead, TPM_OwnerReadInternalPub } from "@fleetd/verify/tpm12";
import { authHmac, outParamDigest, parseResponse12 } from "./command.js";
import { Tpm12AuthError, Tpm12Error } from "./rc.js";
import { Tpm12Client } from "./client.js";
import type { TpmTransport } from "../tpmclient/transport.js";

const RUNS = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 2000);

function framed(tag: number, rc: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(10 + body.length);
  const v = new DataView(out.buffer);
  v.setUint16(0, tag);
  v.setUint32(2, out.length);
  v.setUint32(6, rc);
  out.set(body, 10);
  return out;
}

test("garbage responses to every declared TPM 1.2 command: only Tpm12Error or ParseError", () => {
  fc.assert(
    fc.property(fc.constantFrom(...COMMANDS12), fc.uint8Array({ maxLength: 700 }), (spec, bytes) => {
      try {
        parseResponse12(spec, bytes);
      } catch (e) {
        assert.ok(e instanceof Tpm12Error || e instanceof ParseError, `${spec.name}: ${String(e)}`);
      }
    }),
    { numRuns: RUNS },
  );
});

test("well-framed success responses with random bodies: only ParseError or a result", () => {
  fc.assert(
    fc.property(fc.constantFrom(...COMMANDS12), fc.uint8Array({ maxLength: 700 }), (spec, body) => {
      try {
        parseResponse12(spec, framed(0xc4 + spec.auths, 0, body));
      } catch (e) {
        assert.ok(e instanceof ParseError, `${spec.name}: ${String(e)}`);
      }
    }),
    { numRuns: RUNS },
  );
});

test("any non-zero return code is a Tpm12Error with a name", () => {
  fc.assert(
    fc.property(fc.constantFrom(...COMMANDS12), fc.integer({ min: 1, max: 0xffffffff }), (spec, rc) => {
      assert.throws(() => parseResponse12(spec, framed(0xc4, rc, new Uint8Array(0))), (e: unknown) => e instanceof Tpm12Error && e.code === rc && e.rcName.length > 0);
    }),
    { numRuns: RUNS },
  );
});

test("a PCRRead response of the right shape parses; one byte short or long is a ParseError naming the field", () => {
  const ok = parseResponse12(TPM_PcrRead, framed(0xc4, 0, new Uint8Array(20).fill(9)));
  assert.deepEqual(ok.params.outDigest, new Uint8Array(20).fill(9));
  assert.throws(() => parseResponse12(TPM_PcrRead, framed(0xc4, 0, new Uint8Array(19))), (e: unknown) => e instanceof ParseError && /outDigest/.test(e.path));
  assert.throws(() => parseResponse12(TPM_PcrRead, framed(0xc4, 0, new Uint8Array(21))), (e: unknown) => e instanceof ParseError && e.code === "trailing-bytes");
});

/** A fake TPM answering OIAP, then OwnerReadInternalPub with a response authorized by `key` (or altered). */
function fakeTpm(key: Uint8Array, alter: boolean): TpmTransport {
  let nonceOdd = new Uint8Array(20);
  return {
    async send(cmd) {
      const ord = new DataView(cmd.buffer, cmd.byteOffset).getUint32(6);
      if (ord === 0x0a) return framed(0xc4, 0, Uint8Array.from([0, 0, 0, 7, ...new Uint8Array(20).fill(1)]));
      nonceOdd = cmd.slice(cmd.length - 41, cmd.length - 21);
      // a TPM_PUBKEY: RSA, OAEP, no sig, parms {2048, 2, no exponent}, a 256-byte modulus
      const parms = Uint8Array.from([0, 0, 8, 0, 0, 0, 0, 2, 0, 0, 0, 0]);
      const pub = Uint8Array.from([0, 0, 0, 1, 0, 3, 0, 1, 0, 0, 0, 12, ...parms, 0, 0, 1, 0, ...new Uint8Array(256).fill(0xc3)]);
      const nonceEven = new Uint8Array(20).fill(2);
      const res = authHmac(key, outParamDigest(TPM_OwnerReadInternalPub.ordinal, pub), nonceEven, nonceOdd, false);
      if (alter) res[0] = (res[0] ?? 0) ^ 1;
      return framed(0xc5, 0, Uint8Array.from([...pub, ...nonceEven, 0, ...res]));
    },
    async close() {},
  };
}

test("response authorization: a correct resAuth is accepted, an altered one (or another secret's) is Tpm12AuthError", async () => {
  const owner = new Uint8Array(20).fill(5);
  const ek = await new Tpm12Client(fakeTpm(owner, false)).ownerReadEk(owner);
  assert.equal(ek.value.pubKey.length, 256);
  await assert.rejects(new Tpm12Client(fakeTpm(owner, true)).ownerReadEk(owner), (e: unknown) => e instanceof Tpm12AuthError);
  await assert.rejects(new Tpm12Client(fakeTpm(new Uint8Array(20).fill(6), false)).ownerReadEk(owner), (e: unknown) => e instanceof Tpm12AuthError);
});
