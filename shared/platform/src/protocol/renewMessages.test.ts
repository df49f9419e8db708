/** The renewal messages at the trust boundary: sizes, shapes and garbage are refused by the schema (a 400). */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { RenewChallengeRequest, RenewConfirm, RenewEvidence } from "./messages.js";
import { renewConfirmMessage, renewPossessionMessage, renewQuoteExtraData } from "./bindings.js";

const b64 = (n: number) => Buffer.alloc(n, 7).toString("base64");
const challenge = { ldevidCertificate: b64(800), lakCertificate: b64(800), purpose: "renew" };
const evidence = { sessionId: "a".repeat(32), quote: { message: b64(100), signature: b64(256), pcrs: [{ bank: "sha256", pcr: 0, value: "ab".repeat(32) }] }, eventLog: b64(1000), signature: b64(256) };

test("renew challenge: certificates of at most 4 KiB, purpose attest or renew, nothing else", () => {
  assert.ok(RenewChallengeRequest.safeParse(challenge).success);
  assert.ok(RenewChallengeRequest.safeParse({ ...challenge, purpose: "attest" }).success);
  assert.ok(RenewChallengeRequest.safeParse({ ...challenge, ldevidCertificate: b64(4096) }).success);
  assert.ok(!RenewChallengeRequest.safeParse({ ...challenge, ldevidCertificate: b64(4200) }).success, "oversized LDevID");
  assert.ok(!RenewChallengeRequest.safeParse({ ...challenge, lakCertificate: b64(5000) }).success, "oversized LAK");
  assert.ok(!RenewChallengeRequest.safeParse({ ...challenge, purpose: "provision" }).success, "unknown purpose");
  assert.ok(!RenewChallengeRequest.safeParse({ ...challenge, extra: 1 }).success, "unknown field");
  assert.ok(!RenewChallengeRequest.safeParse({ ...challenge, ldevidCertificate: "not base64!" }).success, "not base64");
  assert.ok(!RenewChallengeRequest.safeParse({ lakCertificate: challenge.lakCertificate, purpose: "renew" }).success, "missing LDevID");
});

test("renew evidence and confirm: bounded fields, PCR values exactly their bank's size", () => {
  assert.ok(RenewEvidence.safeParse(evidence).success);
  assert.ok(!RenewEvidence.safeParse({ ...evidence, eventLog: b64(1024 * 1024 + 100) }).success, "oversized log");
  assert.ok(!RenewEvidence.safeParse({ ...evidence, signature: b64(1100) }).success, "oversized signature");
  assert.ok(!RenewEvidence.safeParse({ ...evidence, quote: { ...evidence.quote, pcrs: [{ bank: "sha256", pcr: 0, value: "ab".repeat(48) }] } }).success, "PCR of another size");
  assert.ok(!RenewEvidence.safeParse({ ...evidence, quote: { ...evidence.quote, pcrs: [] } }).success, "no PCRs");
  assert.ok(!RenewEvidence.safeParse({ ...evidence, secrets: [] }).success, "a field of the other protocol");
  assert.ok(RenewConfirm.safeParse({ sessionId: "x", signature: b64(256) }).success);
  assert.ok(!RenewConfirm.safeParse({ sessionId: "", signature: b64(256) }).success);
  assert.ok(!RenewConfirm.safeParse({ sessionId: "x", signature: b64(2000) }).success);
});

test("fuzz: arbitrary JSON never throws out of the renewal parsers (safeParse answers every body)", () => {
  fc.assert(
    fc.property(fc.jsonValue(), (v) => {
      for (const s of [RenewChallengeRequest, RenewEvidence, RenewConfirm]) s.safeParse(v);
    }),
    { numRuns: 500 },
  );
  // and mutations of a valid body: whatever parses keeps every bound
  fc.assert(
    fc.property(fc.record({ ldevidCertificate: fc.string({ maxLength: 6000 }), lakCertificate: fc.base64String({ maxLength: 6000 }), purpose: fc.constantFrom("attest", "renew", "wipe", "") }), (v) => {
      const r = RenewChallengeRequest.safeParse(v);
      if (r.success) assert.ok(r.data.ldevidCertificate.length <= 4096 + 3 && r.data.lakCertificate.length <= 4096 + 3);
    }),
    { numRuns: 300 },
  );
});

test("the renewal bindings are domain-separated from each other and from the attestation ones", () => {
  const nonce = new Uint8Array(32).fill(1);
  const q = renewQuoteExtraData(nonce, "s");
  assert.equal(q.length, 32);
  assert.notDeepEqual(q, renewQuoteExtraData(nonce, "t"));
  const p = renewPossessionMessage(nonce, "s", new Uint8Array([1, 2]));
  assert.ok(Buffer.from(p).toString("latin1").startsWith("fleetd/renew/possession/v1"));
  assert.notDeepEqual(p, renewPossessionMessage(nonce, "s", new Uint8Array([1, 3])));
  assert.ok(Buffer.from(renewConfirmMessage("s", new Uint8Array([1]), new Uint8Array([2]))).toString("latin1").startsWith("fleetd/renew/confirm/v1"));
});
