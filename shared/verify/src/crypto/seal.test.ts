import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import fc from "fast-check";
import { openConfig, SealError, sealConfig } from "./seal.js";

const code = randomBytes(32);
const ctx = { deviceId: 7, uuid: "4C4C4544-0042-3510-8057-B7C04F4E3232" };
const config = "version: v1alpha1\nmachine:\n  token: abcdef.0123456789abcdef\n";

test("a sealed config opens with its code, device and UUID (the UUID in any case), and holds no plaintext", () => {
  const s = sealConfig(code, config, ctx);
  assert.match(s, /^sealed:v1:/);
  assert.ok(!s.includes("token") && !s.includes("machine"));
  assert.equal(openConfig(code, s, ctx), config);
  assert.equal(openConfig(code, s, { ...ctx, uuid: ctx.uuid.toLowerCase() }), config);
  assert.notEqual(sealConfig(code, config, ctx), s, "a fresh IV each time");
});

test("another code, device or UUID, an altered or truncated blob, or an unsealed config: a SealError", () => {
  const s = sealConfig(code, config, ctx);
  const refused = (f: () => unknown, what: RegExp) => assert.throws(f, (e: unknown) => e instanceof SealError && what.test(e.message));
  refused(() => openConfig(randomBytes(32), s, ctx), /does not open/);
  refused(() => openConfig(code, s, { ...ctx, deviceId: 8 }), /does not open/);
  refused(() => openConfig(code, s, { ...ctx, uuid: "4c4c4544-0042-3510-8057-b7c04f4e3233" }), /does not open/);
  refused(() => openConfig(code, "sealed:v1:AAAA", ctx), /truncated/);
  refused(() => openConfig(code, config, ctx), /not sealed/);
  refused(() => openConfig(code.subarray(0, 31), s, ctx), /32 bytes/);
  refused(() => sealConfig(code, config, ctx, new Uint8Array(8)), /IV/);
});

test("property: any config round-trips; any single changed byte of the sealed blob is refused", () => {
  fc.assert(
    fc.property(fc.string({ maxLength: 2000 }), fc.nat(), fc.integer({ min: 1, max: 255 }), (text, at, flip) => {
      const s = sealConfig(code, text, ctx);
      assert.equal(openConfig(code, s, ctx), text);
      const raw = Buffer.from(s.slice("sealed:v1:".length), "base64");
      const i = at % raw.length;
      raw[i] = raw[i]! ^ flip;
      assert.throws(() => openConfig(code, "sealed:v1:" + raw.toString("base64"), ctx), SealError);
    }),
    { numRuns: 300 },
  );
});
