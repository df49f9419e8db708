import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { mdCode, mdText, safeLine } from "./untrusted.js";

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

test("mdText: a claimed serial cannot become a link, an image, HTML or a heading in a journal entry", () => {
  assert.equal(mdText("claimed serial [click](https://evil.example) ![x](http://e/p.png)"), "claimed serial \\[click\\](https://evil.example) !\\[x\\](http://e/p.png)");
  assert.equal(mdText("<img src=x onerror=alert(1)> &amp; **bold**"), "\\<img src=x onerror=alert(1)\\> \\&amp; \\*\\*bold\\*\\*");
  assert.equal(mdText("line\n# heading\r\n- item"), "line # heading - item");
  assert.equal(mdText("an escape \\[ undone?"), "an escape \\\\\\[ undone?");
});

test("mdText: code spans (mdCode's output) are kept, a lone backtick is escaped", () => {
  assert.equal(mdText(`agent said ${mdCode("[x](y)")} then [z]`), "agent said `[x](y)` then \\[z\\]");
  assert.equal(mdText("one ` tick [a]"), "one \\` tick \\[a\\]");
  assert.equal(mdText("``a ` b`` [c]"), "``a ` b`` \\[c\\]");
});

test("property: without code spans, mdText leaves no unescaped bracket, angle bracket, ampersand or asterisk, and no newline", () => {
  fc.assert(
    fc.property(fc.string({ unit: "binary", maxLength: 200 }).map((x) => x.replace(/`/g, "")), (s) => {
      const out = mdText(s, 1000);
      assert.ok(!/[\r\n]/.test(out));
      const outside = out.replace(/\\./g, ""); // every special character must follow a backslash
      assert.ok(!/[[\]<>&*`]/.test(outside), JSON.stringify({ s, out }));
    }),
    { numRuns: Number(process.env["FLEETD_FUZZ_RUNS"] ?? 500) },
  );
});
