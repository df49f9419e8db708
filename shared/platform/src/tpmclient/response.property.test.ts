/**
 * Property tests: whatever bytes come back from a "TPM", the client answers with a typed error (TpmError for a
 * response code, ParseError for a malformed response, TpmTransportError for broken framing) — never a
 * RangeError, TypeError or hang — and framing reassembles any split of a valid response.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { ParseError } from "@fleetd/verify/codec";
import { COMMANDS } from "@fleetd/verify/tpm";
import { parseResponse } from "./command.js";
import { TpmError } from "./rc.js";
import { ResponseAssembler, TpmTransportError } from "./transport.js";

const RUNS = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 2000);
const specs = [...COMMANDS.values()];

function typed(e: unknown): boolean {
  return e instanceof TpmError || e instanceof ParseError;
}

/** A framed response: header with the right size, then `body`. */
function framed(tag: number, rc: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(10 + body.length);
  const v = new DataView(out.buffer);
  v.setUint16(0, tag);
  v.setUint32(2, out.length);
  v.setUint32(6, rc);
  out.set(body, 10);
  return out;
}

test("garbage responses to every declared command: only TpmError or ParseError", () => {
  fc.assert(
    fc.property(fc.constantFrom(...specs), fc.uint8Array({ maxLength: 600 }), fc.integer({ min: 0, max: 2 }), (spec, bytes, sessions) => {
      try {
        parseResponse(spec, bytes, sessions);
      } catch (e) {
        assert.ok(typed(e), `${spec.name}: ${String(e)}`);
      }
    }),
    { numRuns: RUNS },
  );
});

test("well-framed success responses with random bodies: only ParseError or a result", () => {
  fc.assert(
    fc.property(fc.constantFrom(...specs), fc.uint8Array({ maxLength: 600 }), fc.boolean(), (spec, body, withSessions) => {
      const sessions = withSessions ? spec.authHandles : 0;
      try {
        parseResponse(spec, framed(sessions ? 0x8002 : 0x8001, 0, body), sessions);
      } catch (e) {
        assert.ok(e instanceof ParseError, `${spec.name}: ${String(e)}`);
      }
    }),
    { numRuns: RUNS },
  );
});

test("any non-zero response code is a TpmError with a name and detail", () => {
  fc.assert(
    fc.property(fc.constantFrom(...specs), fc.integer({ min: 1, max: 0xffffffff }), (spec, rc) => {
      try {
        parseResponse(spec, framed(0x8001, rc, new Uint8Array(0)), 0);
        assert.fail("no error");
      } catch (e) {
        assert.ok(e instanceof TpmError);
        assert.equal(e.code, rc);
        assert.ok(e.name.length > 0 && e.detail.length > 0);
      }
    }),
    { numRuns: RUNS },
  );
});

test("framing: a valid response split anywhere reassembles once; garbage headers are TpmTransportErrors", () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 0, maxLength: 300 }), fc.array(fc.integer({ min: 1, max: 50 }), { maxLength: 20 }), (body, cuts) => {
      const resp = framed(0x8001, 0, body);
      const a = new ResponseAssembler();
      let at = 0;
      let got: Uint8Array | undefined;
      for (const n of [...cuts, resp.length]) {
        if (at >= resp.length) break;
        const piece = resp.slice(at, Math.min(resp.length, at + n));
        at += piece.length;
        const r = a.push(piece);
        if (r) {
          assert.equal(at, resp.length, "complete only at the end");
          got = r;
        }
      }
      assert.deepEqual(got, resp);
    }),
    { numRuns: RUNS },
  );
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 10, maxLength: 40 }), (bytes) => {
      const a = new ResponseAssembler();
      try {
        a.push(bytes);
      } catch (e) {
        assert.ok(e instanceof TpmTransportError && e.code === "bad-frame", String(e));
      }
    }),
    { numRuns: RUNS },
  );
});
