import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { checkFreshness, deliveryId, parseWebhookBody, signHookBody, verifyHookSignature, WebhookError } from "./webhook.js";

const secret = "s3cret-s3cret-s3cret-s3cret-s3cret";
const b = (s: string): Uint8Array => new Uint8Array(Buffer.from(s));
const v47 = JSON.stringify({
  event: "updated", timestamp: "2026-11-29T12:00:00.123456+00:00", object_type: "dcim.device",
  data: { id: 4, url: "/api/dcim/devices/4/", custom_fields: { desired_action: { value: "wipe", label: "Wipe" } } },
  snapshots: { prechange: {}, postchange: {} }, request: { id: "r-1", user: "alice", method: "PATCH", path: "/api/dcim/devices/4/", path_info: "/api/dcim/devices/4/", GET: {} },
});
const v46 = JSON.stringify({ event: "updated", timestamp: "2026-11-29T12:00:00Z", object_type: "dcim.device", username: "bob", request_id: "r-2", data: { id: 5 }, snapshots: null });
const v43 = JSON.stringify({ event: "updated", timestamp: "2026-11-29T12:00:00Z", model: "device", username: "bob", request_id: "r-3", data: { id: 6 } });

function code(f: () => unknown): string {
  try {
    f();
    return "ok";
  } catch (e) {
    assert.ok(e instanceof WebhookError, `not a WebhookError: ${String(e)}`);
    return e.code;
  }
}

test("X-Hook-Signature: HMAC-SHA512 of the raw bytes, constant-time, every failure named", () => {
  const sig = signHookBody(b(v47), secret);
  assert.match(sig, /^[0-9a-f]{128}$/);
  assert.equal(code(() => verifyHookSignature(b(v47), sig, secret)), "ok");
  assert.equal(code(() => verifyHookSignature(b(v47), sig.toUpperCase(), secret)), "ok");
  assert.equal(code(() => verifyHookSignature(b(v47 + " "), sig, secret)), "webhook-signature-mismatch");
  assert.equal(code(() => verifyHookSignature(b(v47), sig, secret + "x")), "webhook-signature-mismatch");
  assert.equal(code(() => verifyHookSignature(b(v47), undefined, secret)), "webhook-signature-missing");
  assert.equal(code(() => verifyHookSignature(b(v47), sig.slice(2), secret)), "webhook-signature-malformed");
  assert.equal(code(() => verifyHookSignature(b(v47), [sig, sig], secret)), "webhook-signature-malformed");
});

test("both payload generations parse to the same hint shape", () => {
  const h47 = parseWebhookBody(b(v47));
  assert.deepEqual([h47.objectType, h47.objectId, h47.actor, h47.requestId, h47.event], ["dcim.device", 4, "alice", "r-1", "updated"]);
  const h46 = parseWebhookBody(b(v46));
  assert.deepEqual([h46.objectType, h46.objectId, h46.actor, h46.requestId], ["dcim.device", 5, "bob", "r-2"]);
  const h43 = parseWebhookBody(b(v43));
  assert.deepEqual([h43.objectType, h43.objectId], ["dcim.device", 6]);
  assert.equal(code(() => parseWebhookBody(b(JSON.stringify({ event: "updated", timestamp: "2026-11-29T12:00:00Z", data: { id: 1 } })))), "webhook-body-shape");
  assert.equal(code(() => parseWebhookBody(b("{"))), "webhook-body-not-json");
  assert.equal(code(() => parseWebhookBody(b('{"event":"updated","timestamp":"nope","object_type":"dcim.device","data":{"id":1}}'))), "webhook-body-shape");
});

test("freshness: stale and future bodies are refused", () => {
  const h = parseWebhookBody(b(v46));
  const t = h.timestamp.getTime();
  assert.equal(code(() => checkFreshness(h, new Date(t + 299_000), 300)), "ok");
  assert.equal(code(() => checkFreshness(h, new Date(t + 301_000), 300)), "webhook-body-stale");
  assert.equal(code(() => checkFreshness(h, new Date(t - 61_000), 300)), "webhook-body-future");
});

test("delivery id is the body's SHA-256: the same bytes, the same id", () => {
  assert.equal(deliveryId(b(v47)), deliveryId(b(v47)));
  assert.notEqual(deliveryId(b(v47)), deliveryId(b(v47 + "\n")));
});

test("property: arbitrary bytes or JSON never escape as anything but WebhookError", () => {
  fc.assert(
    fc.property(fc.oneof(fc.uint8Array({ maxLength: 512 }), fc.json().map((s) => new Uint8Array(Buffer.from(s)))), fc.string({ maxLength: 200 }), (bytes, sig) => {
      code(() => parseWebhookBody(bytes));
      code(() => verifyHookSignature(bytes, sig, secret));
    }),
    { numRuns: 500 },
  );
});
