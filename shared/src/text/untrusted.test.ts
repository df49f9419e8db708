import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { mdCode, safeLine } from "./untrusted.js";

test("safeLine: ANSI/OSC sequences, CR/LF, bidi overrides and zero-width characters are shown escaped", () => {
  assert.equal(safeLine("SN\u001b[2J\u001b]0;owned\u0007"), "SN\\x1b[2J\\x1b]0;owned\\x07");
  assert.equal(safeLine("a\r\nFAKE ROW"), "a\\r\\nFAKE ROW");
  assert.equal(safeLine("abc\u202edcba\u200b"), "abc\\u{202e}dcba\\u{200b}");
  assert.equal(safeLine("\u009b31m"), "\\x9b31m");
  assert.equal(safeLine("ok-serial 7XK2"), "ok-serial 7XK2");
  assert.equal(safeLine("x".repeat(20), 5), "xxxxx…");
});

test("mdCode: one code span, nothing can leave it", () => {
  assert.equal(mdCode("x` [click](https://evil.example)\n# owned"), "`x  [click](https://evil.example) # owned`");
  assert.equal(mdCode("![img](http://e/x.png)<script>"), "`![img](http://e/x.png)<script>`");
});

test("property: safeLine output has no control or format character; mdCode has exactly two backticks", () => {
  fc.assert(
    fc.property(fc.string({ unit: "binary", maxLength: 200 }), (s) => {
      const out = safeLine(s, 1000);
      assert.ok(!/[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/u.test(out), JSON.stringify(out));
      assert.equal((mdCode(s, 1000).match(/`/g) ?? []).length, 2);
    }),
    { numRuns: Number(process.env["FLEETD_FUZZ_RUNS"] ?? 500) },
  );
});
