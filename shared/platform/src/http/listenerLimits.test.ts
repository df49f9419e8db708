import { strict as assert } from "node:assert";
import { createServer } from "node:http";
import { connect, type AddressInfo, type Socket } from "node:net";
import { test } from "node:test";
import { applyListenerLimits, DEFAULT_LISTENER_LIMITS, ListenerLimits, listenerOptions } from "./listenerLimits.js";

function open(port: number): Promise<{ socket: Socket; closed: Promise<number> }> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const socket = connect(port, "127.0.0.1");
    const closed = new Promise<number>((r) => socket.once("close", () => r(Date.now() - t0)));
    socket.on("error", () => undefined); // a reset by the server shows as close
    socket.resume(); // read (and drop) what the server sends, e.g. its 408, so its FIN is seen
    socket.once("connect", () => resolve({ socket, closed }));
    socket.once("error", reject);
  });
}

const settled = (p: Promise<number>, ms: number): Promise<number | "open"> => Promise.race([p, new Promise<"open">((r) => setTimeout(() => r("open"), ms))]);

test("defaults are short and capped; the configuration refuses inconsistent limits", () => {
  assert.deepEqual(DEFAULT_LISTENER_LIMITS, { maxConnections: 1024, maxConnectionsPerSource: 32, headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, idleTimeoutMs: 30_000, keepAliveTimeoutMs: 5000 });
  assert.equal(listenerOptions(DEFAULT_LISTENER_LIMITS).connectionsCheckingInterval, 1000);
  assert.equal(ListenerLimits.safeParse({ maxConnections: 4, maxConnectionsPerSource: 8 }).success, false);
  assert.equal(ListenerLimits.safeParse({ headersTimeoutMs: 20_000, requestTimeoutMs: 10_000 }).success, false);
  assert.equal(ListenerLimits.safeParse({ unknown: 1 }).success, false);
});

test("idle connections beyond the per-source cap are closed at once; those within it by the idle/header timeout", async () => {
  const limits = ListenerLimits.parse({ maxConnectionsPerSource: 3, headersTimeoutMs: 1000, requestTimeoutMs: 2000, idleTimeoutMs: 1500 });
  const server = createServer(listenerOptions(limits), (_req, res) => res.end("ok"));
  const guard = applyListenerLimits(server, limits);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  try {
    const conns = [];
    for (let i = 0; i < 6; i++) conns.push(await open(port));
    const early = await Promise.all(conns.map((c) => settled(c.closed, 400)));
    assert.deepEqual(early.map((x) => (x === "open" ? "open" : "closed")), ["open", "open", "open", "closed", "closed", "closed"], "beyond 3 from 127.0.0.1: closed at once");
    assert.equal(guard.open("127.0.0.1"), 3);
    assert.equal(guard.refused, 3);
    // The three within the cap send nothing: closed by the header/idle timeout (≈1–2 s), not Node's 60 s.
    const later = await Promise.all(conns.slice(0, 3).map((c) => settled(c.closed, 4000)));
    for (const t of later) assert.ok(t !== "open" && t < 4000, `closed after ${String(t)} ms`);
    assert.equal(guard.open("127.0.0.1"), 0);
    // Once closed, the source may connect again and be served.
    const res = await fetch(`http://127.0.0.1:${port}/`);
    assert.equal(await res.text(), "ok");
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
});

test("a kept-alive connection idle after its response is closed after keepAliveTimeoutMs", async () => {
  const limits = ListenerLimits.parse({ keepAliveTimeoutMs: 300, headersTimeoutMs: 1000, requestTimeoutMs: 2000, idleTimeoutMs: 5000 });
  const server = createServer(listenerOptions(limits), (_req, res) => res.end("ok"));
  applyListenerLimits(server, limits);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  try {
    const c = await open(port);
    c.socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    const t = await settled(c.closed, 3000);
    assert.ok(t !== "open" && t < 3000, `closed after ${String(t)} ms`);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
});
