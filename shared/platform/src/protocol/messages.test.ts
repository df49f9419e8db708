/** The evidence schema at the trust boundary: each PCR value is exactly its bank's digest size (issue 10). */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { Evidence, PCR_BANK_SIZES } from "./messages.js";

const b64 = (n: number) => Buffer.alloc(n, 1).toString("base64");
const key = { public: b64(8), private: b64(8), certifyInfo: b64(8), signature: b64(8) };
const body = (pcrs: { bank: string; pcr: number; value: string }[]) => ({
  sessionId: "s",
  secrets: [b64(32)],
  quote: { message: b64(8), signature: b64(8), pcrs },
  eventLog: b64(8),
  ldevid: key,
  lak: key,
});
const issues = (pcrs: { bank: string; pcr: number; value: string }[]) => {
  const r = Evidence.safeParse(body(pcrs));
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};

test("a PCR value of exactly its bank's size is accepted, in every bank", () => {
  for (const [bank, size] of Object.entries(PCR_BANK_SIZES)) assert.deepEqual(issues([{ bank, pcr: 0, value: "ab".repeat(size) }]), [], bank);
});

test("issue 10: a PCR value of another bank's size, or any other length, is refused naming the bank's size", () => {
  // The re-cut attack presents SHA-256 values 48 or 56 bytes long; the 20–64-byte range the schema had allowed them.
  for (const [bank, size] of Object.entries(PCR_BANK_SIZES)) {
    for (const n of [20, 32, 48, 56, 64, size - 1, size + 1]) {
      if (n === size) continue;
      const got = issues([{ bank, pcr: 3, value: "ab".repeat(n) }]);
      assert.equal(got.length, 1, `${bank} with ${n} bytes: ${got.join("; ")}`);
      assert.match(got[0] ?? "", new RegExp(`quote\\.pcrs\\.0\\.value: a ${bank} PCR value is ${size} bytes`));
    }
  }
});

test("issue 10 (low): odd-length and non-lowercase hex are refused by the schema (a 400, never a 500)", () => {
  assert.equal(issues([{ bank: "sha256", pcr: 0, value: "a".repeat(63) }]).length, 1);
  assert.equal(issues([{ bank: "sha256", pcr: 0, value: "a".repeat(65) }]).length, 1);
  assert.equal(issues([{ bank: "sha1", pcr: 0, value: "a".repeat(41) }]).length, 1);
  assert.equal(issues([{ bank: "sha256", pcr: 0, value: "A".repeat(64) }]).length, 1);
  assert.equal(issues([{ bank: "sm3_256", pcr: 0, value: "a".repeat(64) }]).length, 1);
});
