import { strict as assert } from "node:assert";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { loadPeerSecret, PeerAuthError, PeerVerifier, signPeerRequest, signPeerResponse, verifyPeerResponse } from "./peerAuth.js";

const secret = new Uint8Array(Buffer.from("a".repeat(40)));
const other = new Uint8Array(Buffer.from("b".repeat(40)));
const body = new Uint8Array(Buffer.from('{"node":"n"}'));
const code = (fn: () => unknown): string => {
  try {
    fn();
  } catch (e) {
    if (e instanceof PeerAuthError) return e.code;
    throw e;
  }
  return "accepted";
};

test("peer auth: a signed request verifies once; a replay, a changed body or path, another secret, a stale clock are refused", () => {
  const now = 1_800_000_000_000;
  const { headers, nonce } = signPeerRequest(secret, "POST", "/internal/v1/issue", body, now);
  const v = new PeerVerifier(secret);
  assert.equal(v.verify("POST", "/internal/v1/issue", body, headers, now + 1000), nonce);
  assert.equal(code(() => v.verify("POST", "/internal/v1/issue", body, headers, now + 2000)), "peer-nonce-replayed");
  const fresh = () => signPeerRequest(secret, "POST", "/internal/v1/issue", body, now).headers;
  assert.equal(code(() => new PeerVerifier(secret).verify("POST", "/internal/v1/issue", new Uint8Array(Buffer.from('{"node":"m"}')), fresh(), now)), "peer-signature-mismatch");
  assert.equal(code(() => new PeerVerifier(secret).verify("POST", "/internal/v1/other", body, fresh(), now)), "peer-signature-mismatch");
  assert.equal(code(() => new PeerVerifier(other).verify("POST", "/internal/v1/issue", body, fresh(), now)), "peer-signature-mismatch");
  assert.equal(code(() => new PeerVerifier(secret).verify("POST", "/internal/v1/issue", body, fresh(), now + 31_000)), "peer-timestamp-skew");
  assert.equal(code(() => new PeerVerifier(secret).verify("POST", "/internal/v1/issue", body, {}, now)), "peer-signature-missing");
  assert.equal(code(() => new PeerVerifier(secret).verify("POST", "/internal/v1/issue", body, { ...fresh(), "x-fleetd-peer-signature": "zz" }, now)), "peer-signature-missing");
});

test("peer auth: an answer's MAC binds the request's nonce, the status and the body", () => {
  const sig = signPeerResponse(secret, "ab".repeat(16), 200, body);
  assert.equal(code(() => verifyPeerResponse(secret, "ab".repeat(16), 200, body, sig)), "accepted");
  assert.equal(code(() => verifyPeerResponse(secret, "cd".repeat(16), 200, body, sig)), "peer-signature-mismatch");
  assert.equal(code(() => verifyPeerResponse(secret, "ab".repeat(16), 201, body, sig)), "peer-signature-mismatch");
  assert.equal(code(() => verifyPeerResponse(other, "ab".repeat(16), 200, body, sig)), "peer-signature-mismatch");
  assert.equal(code(() => verifyPeerResponse(secret, "ab".repeat(16), 200, body, undefined)), "peer-signature-missing");
});

test("peer auth: the secret file must hold at least 32 bytes", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-peer-"));
  writeFileSync(join(dir, "short"), "tooshort\n");
  writeFileSync(join(dir, "ok"), `${"k".repeat(32)}\n`);
  assert.throws(() => loadPeerSecret(join(dir, "short")), /at least 32/);
  assert.throws(() => loadPeerSecret(join(dir, "missing")), /cannot read/);
  assert.equal(loadPeerSecret(join(dir, "ok")).length, 32);
});
