import { strict as assert } from "node:assert";
import { test } from "node:test";
import {
  ADV_CHECKSUM_OFFSET,
  ADV_DATA_LENGTH,
  ADV_LENGTH,
  type AdvRecord,
  marshalAdv,
  marshalAdvCopy,
  parseAdvCopy,
  sha256,
} from "./adv.js";
import { MetaError } from "./errors.js";
import { chooseAdv, setRecord } from "./meta.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const rec = (tag: number, text: string): AdvRecord => ({ tag, value: new TextEncoder().encode(text) });

// Vectors from research/talos.md §1.2 ("Vectors (derived)"), computed there from the algorithm in Python.
test("talos.md vector: empty ADV checksum", () => {
  const b = marshalAdvCopy([]);
  assert.equal(b.length, 262144);
  assert.equal(hex(b.subarray(262108, 262140)), "e7a327df2cfb2c3010ac1a387e9573d46ea52cac7f25db80ad8fbb41aceabf70");
});

test("talos.md vector: {0x0b: abc} head, checksum and the two-copy region", () => {
  const b = marshalAdvCopy([rec(0x0b, "abc")]);
  assert.equal(hex(b.subarray(0, 15)), "5a4b3c2d0000000b00000003616263");
  assert.equal(hex(b.subarray(262108, 262140)), "60d9311e97ea434f4d7ff17b1f5aaaca31bfa910d98e624541c76416fbdd0607");
  assert.equal(hex(b.subarray(262140)), "a5b4c3d2");
  assert.ok(b.subarray(15, 262108).every((x) => x === 0));
  const both = marshalAdv([rec(0x0b, "abc")]);
  assert.equal(both.length, 524288);
  assert.equal(hex(sha256(both)), "0745e41da39df268584c1b245978ab0d55a60dfee34e80c3873a27beefa0f330");
});

test("talos.md vector: {0x0b: my-code-123} checksum", () => {
  const b = marshalAdvCopy([rec(0x0b, "my-code-123")]);
  assert.equal(hex(b.subarray(262108, 262140)), "426bbbd125d4e7f3e637ec42027796d4f03550be30ac90d878d7253c6af41b1d");
});

test("round trip keeps record order and values", () => {
  const records = [rec(0x11, "dual-boot"), rec(0x0a, "addresses: []"), rec(0x0b, "x".repeat(64)), { tag: 0x0c, value: new Uint8Array(0) }];
  const parsed = parseAdvCopy(marshalAdvCopy(records));
  assert.equal(parsed.state, "valid");
  assert.deepEqual(parsed.state === "valid" && parsed.records, records);
});

test("capacity: records filling the data area exactly fit; one byte more overflows", () => {
  const fill = (n: number) => [{ tag: 0x0c, value: new Uint8Array(n - 8) }];
  const ok = parseAdvCopy(marshalAdvCopy(fill(ADV_DATA_LENGTH)));
  assert.equal(ok.state, "valid");
  assert.throws(() => marshalAdvCopy(fill(ADV_DATA_LENGTH + 1)), /the ADV holds 262104/);
});

test("marshal refuses tag 0, tags above 255 and duplicates", () => {
  assert.throws(() => marshalAdvCopy([rec(0, "x")]), /not in 1\.\.255/);
  assert.throws(() => marshalAdvCopy([rec(256, "x")]), /not in 1\.\.255/);
  assert.throws(() => marshalAdvCopy([rec(5, "x"), rec(5, "y")]), /twice/);
});

test("parse judges each copy: zero, magics, checksum", () => {
  assert.deepEqual(parseAdvCopy(new Uint8Array(ADV_LENGTH)), { state: "zero" });
  assert.equal(parseAdvCopy(new Uint8Array(100)).state, "invalid");
  const good = marshalAdvCopy([rec(0x0b, "abc")]);
  const bad1 = good.slice();
  bad1[0] = bad1[0]! ^ 1;
  assert.equal((parseAdvCopy(bad1) as { reason?: string }).reason, "magic1");
  const bad2 = good.slice();
  bad2[ADV_LENGTH - 1] = bad2[ADV_LENGTH - 1]! ^ 1;
  assert.equal((parseAdvCopy(bad2) as { reason?: string }).reason, "magic2");
  const bad3 = good.slice();
  bad3[13] = bad3[13]! ^ 1; // a value byte
  assert.equal((parseAdvCopy(bad3) as { reason?: string }).reason, "checksum");
  const bad4 = good.slice();
  bad4[ADV_CHECKSUM_OFFSET] = bad4[ADV_CHECKSUM_OFFSET]! ^ 1;
  assert.equal((parseAdvCopy(bad4) as { reason?: string }).reason, "checksum");
});

/** A copy with arbitrary record bytes and a correct checksum (what Talos would not write). */
function checksummed(recordBytes: Uint8Array): Uint8Array {
  const b = new Uint8Array(ADV_LENGTH);
  const v = new DataView(b.buffer);
  v.setUint32(0, 0x5a4b3c2d);
  v.setUint32(ADV_LENGTH - 4, 0xa5b4c3d2);
  b.set(recordBytes, 4);
  b.set(sha256(b), ADV_CHECKSUM_OFFSET);
  return b;
}

test("parse: checksummed copies with records Talos would not write are malformed", () => {
  const be = (...n: number[]) => {
    const b = new Uint8Array(n.length * 4);
    n.forEach((x, i) => new DataView(b.buffer).setUint32(i * 4, x));
    return b;
  };
  assert.equal((parseAdvCopy(checksummed(be(0x0b, 0xffffffff))) as { reason?: string }).reason, "record-overrun");
  assert.equal((parseAdvCopy(checksummed(be(0x0b, ADV_DATA_LENGTH - 7))) as { reason?: string }).reason, "record-overrun");
  assert.equal((parseAdvCopy(checksummed(be(0x10b, 0))) as { reason?: string }).reason, "tag-range");
  assert.equal((parseAdvCopy(checksummed(be(0x0b, 0, 0x0b, 0))) as { reason?: string }).reason, "tag-duplicate");
  // tag 0 ends the list even with garbage after it, as in Talos's Unmarshal
  const endThenJunk = checksummed(new Uint8Array([...be(0x0b, 1), 0x41, ...be(0, 0xffffffff, 7)]));
  const p = parseAdvCopy(endThenJunk);
  assert.equal(p.state, "valid");
  assert.deepEqual(p.state === "valid" && p.records, [rec(0x0b, "A")]);
});

test("chooseAdv follows Talos's reader and refuses what it cannot trust", () => {
  const v1 = parseAdvCopy(marshalAdvCopy([rec(0x11, "dual-boot")]));
  const v2 = parseAdvCopy(marshalAdvCopy([rec(0x11, "other")]));
  const zero = parseAdvCopy(new Uint8Array(ADV_LENGTH));
  const junk = new Uint8Array(ADV_LENGTH).fill(0x41);
  const bad = parseAdvCopy(junk);
  const malformed = parseAdvCopy(checksummed(Uint8Array.of(0, 0, 0, 0x0b, 0xff, 0xff, 0xff, 0xff)));
  assert.equal(malformed.state, "malformed");

  assert.equal(chooseAdv(v1, v2).source, "copy1");
  assert.equal(chooseAdv(v1, bad).source, "copy1");
  assert.equal(chooseAdv(v1, malformed).source, "copy1");
  assert.equal(chooseAdv(bad, v2).source, "copy2");
  assert.equal(chooseAdv(zero, v2).source, "copy2");
  assert.equal(chooseAdv(zero, zero).source, "empty");
  const code = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      assert.ok(e instanceof MetaError);
      return e.code;
    }
    return "no error";
  };
  assert.equal(code(() => chooseAdv(bad, bad)), "adv-corrupt");
  assert.equal(code(() => chooseAdv(zero, bad)), "adv-corrupt");
  assert.equal(code(() => chooseAdv(bad, zero)), "adv-corrupt");
  assert.equal(code(() => chooseAdv(malformed, v2)), "adv-malformed");
  assert.equal(code(() => chooseAdv(malformed, v2, { init: true })), "adv-malformed");
  assert.equal(code(() => chooseAdv(bad, malformed)), "adv-malformed");
  assert.equal(chooseAdv(bad, bad, { init: true }).source, "init");
  assert.equal(chooseAdv(malformed, bad, { init: true }).source, "init");
  assert.equal(chooseAdv(bad, malformed, { init: true }).source, "init");
  assert.equal(chooseAdv(bad, v2, { init: true }).source, "copy2", "--init never discards a valid copy");
});

test("setRecord replaces in place or appends, keeping other keys", () => {
  const base = [rec(0x11, "dual-boot"), rec(0x0b, "old"), rec(0x0a, "net")];
  assert.deepEqual(setRecord(base, 0x0b, new TextEncoder().encode("new")), [rec(0x11, "dual-boot"), rec(0x0b, "new"), rec(0x0a, "net")]);
  assert.deepEqual(setRecord([rec(0x11, "dual-boot")], 0x0b, new TextEncoder().encode("c")), [rec(0x11, "dual-boot"), rec(0x0b, "c")]);
  assert.throws(() => setRecord([], 0, new Uint8Array(0)), RangeError);
});
