import { strict as assert } from "node:assert";
import { test } from "node:test";
import { renderPending, type PendingRow } from "./pending.js";

const row = (serial: string): PendingRow => ({
  ekBinding: "ab".repeat(32),
  serial,
  macs: ["02:00:00:00:00:07"],
  sourceAddress: "10.0.0.7",
  firstSeen: "2026-12-01T00:00:00.000Z",
  lastSeen: "2026-12-01T00:00:00.000Z",
  count: 1,
});

test("fleetd pending: a caller's serial cannot send ANSI/OSC sequences or fake rows to the operator's terminal", () => {
  // a claimed serial is any 1–128 characters (messages.ts): it reaches the table as the machine sent it
  const out = renderPending([row("SN1\u001b]0;pwned\u0007\u001b[2J\r\nffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff  GOOD-SERIAL")]);
  assert.doesNotMatch(out, /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/, "no control character but the table's own newlines");
  assert.equal(out.split("\n").length, 3, "header, one row, the footer: no injected row");
  assert.match(out, /SN1\\x1b\]0;pwned\\x07\\x1b\[2J\\r\\nf/);
});
