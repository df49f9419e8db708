import { strict as assert } from "node:assert";
import { createServer, type Server } from "node:http";
import { after, before, test } from "node:test";
import { ServerTransportError, serverTransport } from "./serverTransport.js";
import { EXIT } from "@fleetd/platform/cmd";
import { runAttest } from "./attest.js";

// A loopback server whose answer each test sets.
let answer: { status: number; body: string } = { status: 200, body: "{}" };
let seen: { path: string; body: unknown }[] = [];
let srv: Server;
let base: URL;
before(async () => {
  srv = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      seen.push({ path: req.url ?? "", body: JSON.parse(Buffer.concat(chunks).toString() || "null") });
      res.writeHead(answer.status, { "content-type": "application/json" }).end(answer.body);
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  base = new URL(`http://127.0.0.1:${(srv.address() as { port: number }).port}/api/`);
});
after(() => new Promise<void>((r) => srv.close(() => r())));

const challenge = { sessionId: "s1", nonce: "AAAA", expiresAt: "2026-01-01T00:00:00Z", credentials: [{ ekBinding: "a".repeat(64), idObject: "AAAA", encryptedSecret: "AAAA" }] };

async function post(path: string) {
  return serverTransport(base, { maxResponseBytes: 4096 }).post(path, { hello: 1 });
}
async function fails(p: Promise<unknown>, code: string, pattern: RegExp) {
  await assert.rejects(p, (e: unknown) => e instanceof ServerTransportError && e.code === code && pattern.test(e.message));
}

test("a well-formed answer and a refusal pass through; the path prefix of FLEETD_SERVER is kept", async () => {
  seen = [];
  answer = { status: 200, body: JSON.stringify(challenge) };
  assert.deepEqual(await post("/v1/attest/challenge"), { status: 200, body: challenge });
  assert.deepEqual(seen[0], { path: "/api/v1/attest/challenge", body: { hello: 1 } });
  const refusal = { error: "pending", reasons: [{ check: "ek.unknown", detail: "no node has this EK" }] };
  answer = { status: 403, body: JSON.stringify(refusal) };
  assert.deepEqual(await post("/v1/attest/challenge"), { status: 403, body: refusal });
});

test("answers that are not JSON, of the wrong shape, not a refusal, or too large are transport errors, not refusals", async () => {
  answer = { status: 200, body: "<html>" };
  await fails(post("/v1/attest/challenge"), "bad-response", /not JSON/);
  answer = { status: 200, body: JSON.stringify({ ...challenge, credentials: [] }) };
  await fails(post("/v1/attest/challenge"), "bad-response", /wrong shape \(credentials/);
  answer = { status: 200, body: JSON.stringify({ verdict: "fail" }) };
  await fails(post("/v1/attest/evidence"), "bad-response", /wrong shape/);
  answer = { status: 500, body: JSON.stringify({ error: "internal" }) };
  await fails(post("/v1/attest/confirm"), "bad-response", /500 with a body that is not a refusal.*error=internal/);
  answer = { status: 200, body: JSON.stringify({ ...challenge, pad: "x".repeat(5000) }) };
  await fails(post("/v1/attest/challenge"), "too-large", /larger than 4096/);
  await fails(serverTransport(new URL("http://127.0.0.1:1/")).post("/v1/attest/challenge", {}), "connect", /ECONNREFUSED/);
});

test("attest: --mode contradicting FLEETD_MODE is a configuration error (exit 2) before anything runs", async () => {
  const code = await runAttest({ FLEETD_SERVER: base.href, FLEETD_ALLOW_HTTP: "lab", FLEETD_MODE: "intake", FLEETD_WORKFLOW: "wf", FLEETD_LOG_LEVEL: "silent" }, "provision");
  assert.equal(code, EXIT.usage);
});
