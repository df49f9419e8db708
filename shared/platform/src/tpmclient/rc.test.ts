/** Response codes decode to the spec's names, with the parameter, handle or session they point at. */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { decodeRc, TPM_RC, TpmError } from "./rc.js";

const cases: [number, string, string, { kind: string; index: number } | undefined][] = [
  [0x000, "TPM_RC_SUCCESS", "format-zero", undefined],
  [0x100, "TPM_RC_INITIALIZE", "format-zero", undefined],
  [0x101, "TPM_RC_FAILURE", "format-zero", undefined],
  [0x143, "TPM_RC_COMMAND_CODE", "format-zero", undefined],
  [0x12f, "TPM_RC_AUTH_UNAVAILABLE", "format-zero", undefined],
  [0x01e, "TPM_RC_BAD_TAG", "tpm1.2", undefined],
  [0x1df, "TPM_RC_INTEGRITY", "format-one", { kind: "parameter", index: 1 }],
  [0x2c4, "TPM_RC_VALUE", "format-one", { kind: "parameter", index: 2 }],
  [0xfc4, "TPM_RC_VALUE", "format-one", { kind: "parameter", index: 15 }],
  [0x184, "TPM_RC_VALUE", "format-one", { kind: "handle", index: 1 }],
  [0x18b, "TPM_RC_HANDLE", "format-one", { kind: "handle", index: 1 }],
  [0x1cb, "TPM_RC_HANDLE", "format-one", { kind: "parameter", index: 1 }],
  [0x08b, "TPM_RC_HANDLE", "format-one", undefined],
  [0x99d, "TPM_RC_POLICY_FAIL", "format-one", { kind: "session", index: 1 }],
  [0xa9d, "TPM_RC_POLICY_FAIL", "format-one", { kind: "session", index: 2 }],
  [0x9a2, "TPM_RC_BAD_AUTH", "format-one", { kind: "session", index: 1 }],
  [0x98e, "TPM_RC_AUTH_FAIL", "format-one", { kind: "session", index: 1 }],
  [0x0a1, "TPM_RC_RESERVED_BITS", "format-one", undefined],
  [0x902, "TPM_RC_OBJECT_MEMORY", "warning", undefined],
  [0x922, "TPM_RC_RETRY", "warning", undefined],
  [0x908, "TPM_RC_YIELDED", "warning", undefined],
  [0x910, "TPM_RC_REFERENCE_H0", "warning", undefined],
  [0x919, "TPM_RC_REFERENCE_S1", "warning", undefined],
  [0x921, "TPM_RC_LOCKOUT", "warning", undefined],
];

for (const [code, name, format, subject] of cases) {
  test(`0x${code.toString(16).padStart(3, "0")} is ${name}${subject ? ` (${subject.kind} ${subject.index})` : ""}`, () => {
    const d = decodeRc(code);
    assert.equal(d.name, name);
    assert.equal(d.format, format);
    assert.deepEqual(d.subject, subject);
    assert.ok(d.detail.startsWith(name === "TPM_RC_SUCCESS" ? "success" : name), d.detail);
    if (name !== "TPM_RC_SUCCESS" && name !== "TPM_RC_BAD_TAG") assert.equal(TPM_RC[name.slice(7)], d.base);
  });
}

test("TpmError carries code, name and detail, and names the command", () => {
  const e = new TpmError(0x1df, "TPM2_ActivateCredential");
  assert.equal(e.code, 0x1df);
  assert.equal(e.name, "TPM_RC_INTEGRITY");
  assert.equal(e.detail, "TPM_RC_INTEGRITY (parameter 1): integrity check failed");
  assert.equal(e.message, "TPM2_ActivateCredential: TPM_RC_INTEGRITY (parameter 1): integrity check failed (0x000001df)");
  assert.ok(e.is("TPM_RC_INTEGRITY"));
  assert.ok(!e.isWarning);
  assert.ok(new TpmError(0x922, "TPM2_Certify").isWarning);
  assert.ok(e instanceof Error);
});

test("a resource manager's layer is named and the TPM code inside it still decoded", () => {
  const d = decodeRc(0x000b0922);
  assert.equal(d.name, "TPM_RC_RETRY");
  assert.equal(d.layer, "TSS2_RESMGR_RC_LAYER");
  assert.ok(d.detail.startsWith("TSS2_RESMGR_RC_LAYER: TPM_RC_RETRY"));
});

test("vendor codes, unknown numbers and out-of-range values get a name, never an exception", () => {
  assert.equal(decodeRc(0x500).format, "vendor");
  assert.match(decodeRc(0x17f).name, /^TPM_RC_VER1\+/);
  assert.match(decodeRc(0x0bf).name, /^TPM_RC_FMT1\+/);
  assert.match(decodeRc(0x97e).name, /^TPM_RC_WARN\+/);
  assert.equal(decodeRc(0xffffffff).format, "layer");
  for (let rc = 0; rc < 0x1000; rc++) assert.equal(typeof decodeRc(rc).detail, "string");
});
