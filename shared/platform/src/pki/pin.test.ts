import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { PkiError } from "./errors.js";
import { PinSource, readPin } from "./pin.js";

const isCode = (code: string) => (e: unknown) => e instanceof PkiError && e.code === code;

test("PIN from an environment variable; errors name the variable, never a value", () => {
  assert.equal(readPin({ env: "CA_PIN" }, { CA_PIN: "123456" }), "123456");
  assert.throws(() => readPin({ env: "CA_PIN" }, {}), (e) => isCode("pin-unavailable")(e) && /CA_PIN is not set/.test((e as Error).message));
  assert.throws(() => readPin({ env: "CA_PIN" }, { CA_PIN: "" }), isCode("pin-unavailable"));
  assert.throws(() => readPin({ env: "CA_PIN" }, { CA_PIN: "12\n34" }), (e) => isCode("pin-unavailable")(e) && !(e as Error).message.includes("12"));
});

test("PIN from a file drops one trailing newline; a missing file is pin-unavailable", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-pin-"));
  try {
    writeFileSync(join(dir, "pin"), "654321\n");
    assert.equal(readPin({ file: join(dir, "pin") }), "654321");
    writeFileSync(join(dir, "crlf"), "654321\r\n");
    assert.equal(readPin({ file: join(dir, "crlf") }), "654321");
    assert.throws(() => readPin({ file: join(dir, "absent") }), (e) => isCode("pin-unavailable")(e) && /ENOENT/.test((e as Error).message));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("PinSource schema accepts exactly one source", () => {
  assert.ok(PinSource.safeParse({ env: "FLEETD_CA_PIN" }).success);
  assert.ok(PinSource.safeParse({ file: "/run/secrets/pin" }).success);
  assert.ok(!PinSource.safeParse({ env: "X", file: "/y" }).success);
  assert.ok(!PinSource.safeParse({ env: "not a name" }).success);
  assert.ok(!PinSource.safeParse({ pin: "123456" }).success);
});
