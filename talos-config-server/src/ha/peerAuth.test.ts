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
const acode = async (fn: () => Promise<unknown>): Promise<string> => {
  try {
    await fn();
  } catch (e) {
    if (e instanceof PeerAuthError) return e.code;
    throw e;
  }
  return "accepted";
};
const P = "/internal/v1/issue";

test("peer auth: a signed request verifies once; a replay, a changed body or path, another secret, a stale clock are refused", async () => {
  const now = 1_800_000_000_000;
  const { headers, nonce } = signPeerRequest(secret, "POST", P, body, now, "replica-a");
  const v = new PeerVerifier(secret, "replica-a");
  assert.equal(await v.verify("POST", P, body, headers, now + 1000), nonce);
  assert.equal(await acode(() => v.verify("POST", P, body, headers, now + 2000)), "peer-nonce-replayed");
  const fresh = () => signPeerRequest(secret, "POST", P, body, now, "replica-a").headers;
  const a = () => new PeerVerifier(secret, "replica-a");
  assert.equal(await acode(() => a().verify("POST", P, new Uint8Array(Buffer.from('{"node":"m"}')), fresh(), now)), "peer-signature-mismatch");
  assert.equal(await acode(() => a().verify("POST", "/internal/v1/other", body, fresh(), now)), "peer-signature-mismatch");
  assert.equal(await acode(() => new PeerVerifier(other, "replica-a").verify("POST", P, body, fresh(), now)), "peer-signature-mismatch");
  assert.equal(await acode(() => a().verify("POST", P, body, fresh(), now + 31_000)), "peer-timestamp-skew");
  assert.equal(await acode(() => a().verify("POST", P, body, {}, now)), "peer-signature-missing");
  assert.equal(await acode(() => a().verify("POST", P, body, { ...fresh(), "x-fleetd-peer-signature": "zz" }, now)), "peer-signature-missing");
  // the target is under the MAC: rewriting the header breaks it
  assert.equal(await acode(() => a().verify("POST", P, body, { ...signPeerRequest(secret, "POST", P, body, now, "replica-b").headers, "x-fleetd-peer-target": "replica-a" }, now)), "peer-signature-mismatch");
});

test("peer auth (issue 10): a request is bound to its target replica, and the replay cache is the fleet's, not the process's", async () => {
  const now = 1_800_000_000_000;
  const forA = signPeerRequest(secret, "POST", P, body, now, "replica-a").headers;
  // a captured request for replica a, presented to replica b: refused
  assert.equal(await acode(() => new PeerVerifier(secret, "replica-b").verify("POST", P, body, forA, now)), "peer-target-mismatch");
  // two processes of replica a (a restart, or two pods with one identity) share the store's single-use tokens
  const shared = new Map<string, number>();
  const once = async (token: string, expiresAt: number) => (shared.has(token) ? false : (shared.set(token, expiresAt), true));
  const first = new PeerVerifier(secret, "replica-a", once);
  const second = new PeerVerifier(secret, "replica-a", once);
  assert.match(await first.verify("POST", P, body, forA, now), /^[0-9a-f]{32}$/);
  assert.equal(await acode(() => second.verify("POST", P, body, forA, now + 1000)), "peer-nonce-replayed");
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
