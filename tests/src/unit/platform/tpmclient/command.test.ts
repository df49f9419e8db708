/**
 * Command marshalling and response parsing, byte for byte, without a TPM; templates against the published
 * bytes (conformance/ek/ek_templates.json) and the SPIRE/go-tpm-tools shapes written out by hand.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { encode, ParseError } from "@fleetd/verify/codec";
import { fromHex, hex } from "@fleetd/verify/crypto";
import { conformance } from "@fleetd/testkit/conformance";
import { TPM_ALG, TPM_RH } from "@fleetd/verify/tcg";
import {
  TPM2_CreatePrimary, TPM2_FlushContext, TPM2_GetCapability, TPM2_PCR_Extend, TPM2_PCR_Read, TPM2_PolicySecret,
  TPM2_StartAuthSession, TPM_CAP, TPM_PT, TPM_SE, TPMT_PUBLIC,
} from "@fleetd/verify/tpm";
import {
  commandHeader, marshalCommand, parseResponse, TpmError, passwordAuth, policyAuth, ekTemplateId, akTemplate,
  lakTemplate, ldevidTemplate, srkTemplate,
} from "@fleetd/platform/tpmclient";
import { ekTemplate } from "@fleetd/verify/ek";

const h = (s: string) => fromHex(s.replace(/\s+/g, ""));
const E = new Uint8Array(0);

test("TPM2_GetCapability(TPM_PROPERTIES, TPM_PT_FIXED, 1)", () => {
  const cmd = marshalCommand(TPM2_GetCapability, { handles: [], sessions: [], params: { capability: TPM_CAP.TPM_PROPERTIES, property: TPM_PT.FIXED, propertyCount: 1 } });
  assert.equal(hex(cmd), "80010000001600000" + "17a" + "00000006" + "00000100" + "00000001");
  assert.deepEqual(commandHeader(cmd), { tag: 0x8001, commandSize: 22, commandCode: 0x17a });
});

test("TPM2_FlushContext carries the handle as a parameter", () => {
  const cmd = marshalCommand(TPM2_FlushContext, { handles: [], sessions: [], params: { flushHandle: 0x80000001 } });
  assert.equal(hex(cmd), "80010000000e0000016580000001");
});

test("TPM2_PCR_Read of sha256 PCRs 0 and 7", () => {
  const cmd = marshalCommand(TPM2_PCR_Read, { handles: [], sessions: [], params: { pcrSelectionIn: [{ hash: TPM_ALG.SHA256, pcrSelect: h("810000") }] } });
  assert.equal(hex(cmd), "8001000000140000017e00000001000b03810000");
});

test("TPM2_CreatePrimary of the RSA EK: sessions tag, handle, password session, parameters", () => {
  const cmd = marshalCommand(TPM2_CreatePrimary, {
    handles: [TPM_RH.ENDORSEMENT],
    sessions: [passwordAuth()],
    params: { inSensitive: { userAuth: E, data: E }, inPublic: ekTemplate("L-1").public, outsideInfo: E, creationPCR: [] },
  });
  const tmpl = encode(TPMT_PUBLIC, ekTemplate("L-1").public);
  const expected = "8002" + "00000163" + "00000131" + "4000000b" + "00000009" + "40000009" + "0000" + "01" + "0000" + "0004" + "0000" + "0000" + "013a" + hex(tmpl) + "0000" + "00000000";
  assert.equal(hex(cmd), expected);
  assert.equal(cmd.length, 0x163);
});

test("TPM2_StartAuthSession (policy, unsalted, unbound) and TPM2_PolicySecret(TPM_RH_ENDORSEMENT)", () => {
  const start = marshalCommand(TPM2_StartAuthSession, {
    handles: [TPM_RH.NULL, TPM_RH.NULL],
    sessions: [],
    params: { nonceCaller: new Uint8Array(16).fill(0xaa), encryptedSalt: E, sessionType: TPM_SE.POLICY, symmetric: { algorithm: TPM_ALG.NULL, details: { kind: "null" } }, authHash: TPM_ALG.SHA256 },
  });
  assert.equal(hex(start), "8001" + "0000002b" + "00000176" + "40000007" + "40000007" + "0010" + "aa".repeat(16) + "0000" + "01" + "0010" + "000b");
  const secret = marshalCommand(TPM2_PolicySecret, {
    handles: [TPM_RH.ENDORSEMENT, 0x03000000],
    sessions: [passwordAuth()],
    params: { nonceTPM: E, cpHashA: E, policyRef: E, expiration: 0 },
  });
  assert.equal(hex(secret), "8002" + "00000029" + "00000151" + "4000000b" + "03000000" + "00000009" + "40000009000001" + "0000" + "0000" + "0000" + "0000" + "00000000");
});

test("a policy session's authorization has no HMAC and ends the session unless asked to continue", () => {
  assert.deepEqual(policyAuth(0x03000001), { sessionHandle: 0x03000001, nonce: E, sessionAttributes: 0, hmac: E });
  assert.equal(policyAuth(0x03000001, true).sessionAttributes, 1);
});

test("handle and session counts are checked before marshalling", () => {
  assert.throws(() => marshalCommand(TPM2_FlushContext, { handles: [1], sessions: [], params: { flushHandle: 1 } }), /takes 0 handles/);
  assert.throws(() => marshalCommand(TPM2_PCR_Extend, { handles: [16], sessions: [], params: { digests: [] } }), /needs 1 authorization/);
});

test("a response without sessions: GetCapability's properties", () => {
  const resp = h("8001 0000001b 00000000 01 00000006 00000001 00000100 322e3000");
  const out = parseResponse(TPM2_GetCapability, resp, 0);
  assert.equal(out.params.moreData, 1);
  assert.deepEqual(out.params.capabilityData.data, { kind: "tpmProperties", list: [{ property: 0x100, value: 0x322e3000 }] });
});

test("a response with sessions: parameterSize, then one TPMS_AUTH_RESPONSE per session", () => {
  const resp = h("8002 00000013 00000000 00000000 0000 01 0000");
  const out = parseResponse(TPM2_PCR_Extend, resp, 1);
  assert.deepEqual(out.sessions, [{ nonce: E, sessionAttributes: 1, hmac: E }]);
});

test("an error response is a TpmError named by its code", () => {
  assert.throws(() => parseResponse(TPM2_PCR_Extend, h("8001 0000000a 000001df"), 1), (e: unknown) => e instanceof TpmError && e.name === "TPM_RC_INTEGRITY" && e.command === "TPM2_PCR_Extend");
  // A TPM answers a bad command tag with TPM 1.2's tag and TPM_RC_BAD_TAG.
  assert.throws(() => parseResponse(TPM2_GetCapability, h("00c4 0000000a 0000001e"), 0), (e: unknown) => e instanceof TpmError && e.name === "TPM_RC_BAD_TAG");
});

test("malformed responses are ParseErrors naming the field", () => {
  const bad: [string, number, RegExp][] = [
    ["8001 0000000b 00000000 00", 1, /tag 0x8001 does not match/],
    ["8002 00000020 00000000 00000000 0000 01 0000", 1, /responseSize 32 is not the response's length 19/],
    ["8002 00000014 00000000 00000000 0000 01 0000 00", 1, /trailing/],
    ["8002 00000017 00000000 00000004 00000000 0000 01 0000", 1, /parameters.*trailing/],
    ["8002 00000011 00000000 00000000 0000 01", 1, /authorizationArea\.0/],
    ["8001 0000000c 00000000 0100", 0, /truncated|need/],
    ["8001 00", 0, /header/],
  ];
  for (const [resp, sessions, why] of bad) {
    const run = () => (sessions ? parseResponse(TPM2_PCR_Extend, h(resp), sessions) : parseResponse(TPM2_GetCapability, h(resp), sessions));
    assert.throws(run, (e: unknown) => e instanceof ParseError && why.test(e.message), resp);
  }
});

test("createEk's \"rsa\" and \"ecc\" are the TCG low-range default templates L-1 and L-2 (checked byte for byte in ek/templates.test.ts)", () => {
  assert.equal(ekTemplateId("rsa"), "L-1");
  assert.equal(ekTemplateId("ecc"), "L-2");
  assert.equal(ekTemplateId("H-3"), "H-3");
  const t = JSON.parse(readFileSync(conformance("ek/ek_templates.json"), "utf8")) as { rsa2048_low_range: { tpmt_public_hex: string } };
  assert.equal(hex(tmplOf("rsa")), t.rsa2048_low_range.tpmt_public_hex);
});

function tmplOf(alg: "rsa" | "ecc"): Uint8Array {
  return encode(TPMT_PUBLIC, ekTemplate(ekTemplateId(alg)).public);
}

test("SRK templates are SPIRE's SRKTemplateHighRSA/ECC: storage attributes with noDA, AES-128-CFB, empty unique", () => {
  assert.equal(hex(encode(TPMT_PUBLIC, srkTemplate("rsa"))), "0001000b00030472000000060080004300100800000000000000");
  assert.equal(hex(encode(TPMT_PUBLIC, srkTemplate("ecc"))), "0023000b0003047200000006008000430010000300100000" + "0000");
});

test("AK/LAK and LDevID templates: RSASSA-SHA256 RSA-2048 or ECDSA-SHA256 P-256; LDevID unrestricted", () => {
  assert.equal(hex(encode(TPMT_PUBLIC, akTemplate("rsa"))), "0001000b00050072000000100014000b0800000000000000");
  assert.equal(hex(encode(TPMT_PUBLIC, akTemplate("ecc"))), "0023000b00050072000000100018000b0003001000000000");
  assert.deepEqual(lakTemplate("rsa"), akTemplate("rsa"));
  assert.equal(hex(encode(TPMT_PUBLIC, ldevidTemplate("rsa"))), "0001000b00040072000000100014000b0800000000000000");
  assert.equal(hex(encode(TPMT_PUBLIC, ldevidTemplate("ecc"))), "0023000b00040072000000100018000b0003001000000000");
});
