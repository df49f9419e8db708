import { strict as assert } from "node:assert";
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { UnavailableRefusal } from "../protocol/messages.js";
import { stepGate } from "./stepGate.js";

/** A server whose handler reads the body only when the test lets it finish; returns what each request saw. */
async function rig(concurrency: number, maxWaitMs: number) {
  const gate = stepGate({ concurrency, maxWaitMs });
  const order: string[] = [];
  const held: (() => void)[] = [];
  let bodiesRead = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    gate(req, res, () => {
      order.push(req.url ?? "");
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        bodiesRead++;
        held.push(() => res.end(Buffer.concat(chunks).toString()));
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const send = (path: string, body = "x") =>
    new Promise<{ status: number; retryAfter: string | undefined; body: string }>((resolve, reject) => {
      const r = request({ host: "127.0.0.1", port, path, method: "POST", headers: { "content-length": Buffer.byteLength(body), connection: "close" } }, (res) => {
        let b = "";
        res.on("data", (c: Buffer) => (b += c.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers["retry-after"] as string | undefined, body: b }));
      });
      r.on("error", reject);
      r.end(body);
    });
  const until = async (cond: () => boolean) => {
    for (let i = 0; i < 400 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
    assert.ok(cond(), "condition not reached");
  };
  return { gate, order, held, bodiesRead: () => bodiesRead, send, until, close: () => new Promise<void>((r) => server.close(() => r())) };
}

test("stepGate: at most `concurrency` requests inside; the rest wait with their bodies unread, then go in arrival order", async () => {
  const r = await rig(2, 10_000);
  try {
    const answers = ["/a", "/b", "/c", "/d"].map((p) => r.send(p, p));
    await r.until(() => r.order.length === 2 && r.gate.stats().waiting === 2);
    assert.deepEqual(r.gate.stats(), { inside: 2, waiting: 2 });
    await r.until(() => r.bodiesRead() === 2);
    assert.equal(r.bodiesRead(), 2, "a waiting request's body is not read");
    (r.held.shift() as () => void)();
    await r.until(() => r.order.length === 3);
    assert.equal(r.order[2], "/c");
    while (r.order.length < 4 || r.held.length > 0) {
      await r.until(() => r.held.length > 0);
      (r.held.shift() as () => void)();
    }
    const got = await Promise.all(answers);
    assert.deepEqual(got.map((g) => [g.status, g.body]), [[200, "/a"], [200, "/b"], [200, "/c"], [200, "/d"]]);
    assert.deepEqual(r.gate.stats(), { inside: 0, waiting: 0 });
  } finally {
    await r.close();
  }
});

test("stepGate: a request that waited maxWaitMs gets 503 server-busy with Retry-After, and its place is given up", async () => {
  const r = await rig(1, 150);
  try {
    const first = r.send("/first");
    await r.until(() => r.order.length === 1);
    const second = await r.send("/second");
    assert.equal(second.status, 503);
    assert.equal(second.retryAfter, "1");
    // what the machine's client reads as an outage to wait out (postStep retries a 503 `unavailable`)
    const body = UnavailableRefusal.parse(JSON.parse(second.body));
    assert.equal(body.reason, "server-busy");
    assert.equal(body.reasons[0]?.check, "server-busy");
    assert.deepEqual(r.order, ["/first"], "the shed request never reached the handler");
    await r.until(() => r.held.length === 1);
    (r.held.shift() as () => void)();
    assert.equal((await first).status, 200);
    assert.deepEqual(r.gate.stats(), { inside: 0, waiting: 0 });
  } finally {
    await r.close();
  }
});

test("stepGate: refuses a concurrency that is not a positive integer", () => {
  assert.throws(() => stepGate({ concurrency: 0, maxWaitMs: 1 }), RangeError);
  assert.throws(() => stepGate({ concurrency: 1.5, maxWaitMs: 1 }), RangeError);
});
