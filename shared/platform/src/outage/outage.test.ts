import { strict as assert } from "node:assert";
import { test } from "node:test";
import { BootstrapTokenError } from "../kube/bootstrapToken.js";
import { NetBoxError } from "../netbox/client.js";
import { PkiError } from "../pki/errors.js";
import { AttestationRefused, call, type ServerTransport } from "../protocol/client/attest.js";
import { outageOf, Unavailable } from "./outage.js";

test("outageOf: which adapter errors are outages, and which are answers or failures that stay failures", () => {
  const reason = (e: unknown) => outageOf(e)?.reason;
  assert.equal(reason(new NetBoxError("netbox-unreachable", "GET /api/dcim/devices/", undefined, "ECONNREFUSED")), "netbox-unavailable");
  assert.equal(reason(new NetBoxError("netbox-http", "GET /api/dcim/devices/", 502, "bad gateway")), "netbox-unavailable");
  assert.equal(reason(new NetBoxError("netbox-http", "GET /api/dcim/devices/7/", 404, "not found")), undefined);
  assert.equal(reason(new NetBoxError("netbox-http", "PATCH", 403, "forbidden")), undefined, "a permission error is a misconfiguration, not an outage");
  assert.equal(reason(new NetBoxError("netbox-conflict", "PATCH", 412, "precondition")), undefined);
  assert.equal(reason(new BootstrapTokenError("api", "creating bootstrap token", undefined)), "kubernetes-unavailable");
  assert.equal(reason(new BootstrapTokenError("api", "creating bootstrap token", 503)), "kubernetes-unavailable");
  assert.equal(reason(new BootstrapTokenError("api", "creating bootstrap token", 403)), undefined, "no rights: fails closed, not retried");
  assert.equal(reason(new PkiError("token-unavailable", "session lost")), "signer-unavailable");
  assert.equal(reason(new PkiError("pin-incorrect", "PIN refused")), undefined, "a refused PIN is never retried");
  assert.equal(reason(new Unavailable("signer-unavailable", "x")), "signer-unavailable");
  assert.equal(reason(new Error("bug")), undefined);
  assert.equal(reason("text"), undefined);
});

const unavailable = { status: 503, body: { error: "unavailable", reason: "netbox-unavailable", reasons: [{ check: "netbox-unavailable", detail: "down" }] } };

function scripted(answers: { status: number; body: unknown }[]): ServerTransport & { bodies: unknown[] } {
  const bodies: unknown[] = [];
  return {
    bodies,
    async post(_path, body) {
      bodies.push(body);
      return answers.shift() ?? { status: 500, body: { error: "internal" } };
    },
  };
}

test("the client retries a 503 unavailable with the same request until the deadline; nothing else is retried", async () => {
  const sleep = async () => undefined;
  const t = scripted([unavailable, unavailable, { status: 200, body: { ok: 1 } }]);
  const waits: number[] = [];
  const body = { sessionId: "s" };
  assert.deepEqual(await call(t, "evidence", body, { deadline: Date.now() + 60_000, delayMs: (n) => n * 10, sleep, onRetry: (_s, _r, _n, w) => waits.push(w) }), { ok: 1 });
  assert.deepEqual(t.bodies, [body, body, body], "the same request each time");
  assert.deepEqual(waits, [10, 20]);

  const late = scripted([unavailable, unavailable]);
  await assert.rejects(call(late, "evidence", body, { deadline: Date.now() + 5, delayMs: () => 10, sleep }), (e: unknown) => e instanceof AttestationRefused && e.status === 503 && e.refusal.error === "unavailable");
  const refused = scripted([{ status: 403, body: { error: "refused", reasons: [{ check: "x", detail: "y" }] } }]);
  await assert.rejects(call(refused, "evidence", body, { deadline: Date.now() + 60_000, delayMs: () => 1, sleep }), (e: unknown) => e instanceof AttestationRefused && e.status === 403);
  assert.equal(refused.bodies.length, 1);
  const bare = scripted([unavailable]);
  await assert.rejects(call(bare, "evidence", body), (e: unknown) => e instanceof AttestationRefused && e.status === 503, "without retryUnavailable a 503 is refused at once");
});
