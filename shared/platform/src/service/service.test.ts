import { strict as assert } from "node:assert";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { test } from "node:test";
import { cachedProbe, drainServers, healthHandlers, readinessOf, runService, serviceLogger, serviceRegistry } from "./index.js";
import { EXIT, type ExitCode } from "../cmd/index.js";

function lines(): { stream: Writable; out: () => Record<string, unknown>[] } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      chunks.push(chunk.toString());
      cb();
    },
  });
  return { stream, out: () => chunks.join("").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>) };
}

test("serviceLogger: one base key, secrets redacted at any depth of one level, errors with their stack", () => {
  const { stream, out } = lines();
  const log = serviceLogger("svc-test", { level: "info", destination: stream });
  log.info({ token: "abcdef.0123456789abcdef", node: { pin: "123456", name: "worker-1" }, code: "nonce.reused" }, "hello");
  log.error({ err: new TypeError("boom") }, "failed");
  const [a, b] = out();
  assert.equal(a?.["service"], "svc-test");
  assert.equal(a?.["pid"], undefined, "the one base key is the service");
  assert.equal(a?.["token"], "[redacted]");
  assert.deepEqual(a?.["node"], { pin: "[redacted]", name: "worker-1" });
  assert.equal(a?.["code"], "nonce.reused", "an error code stays visible");
  const err = b?.["err"] as { type?: string; message?: string; stack?: string };
  assert.equal(err.type, "TypeError");
  assert.equal(err.message, "boom");
  assert.match(err.stack ?? "", /TypeError: boom\n\s+at /);
});

test("readinessOf: ready only when every probe is ok; a throwing probe is a failed check naming the error", async () => {
  const ok = readinessOf({ a: async () => ({ ok: true }), b: async () => ({ ok: true }) });
  assert.deepEqual(await ok(), { ready: true, checks: { a: { ok: true }, b: { ok: true } } });
  const bad = readinessOf({ netbox: async () => ({ ok: false, detail: "connect ECONNREFUSED" }), state: async () => { throw new Error("database is closed"); } });
  assert.deepEqual(await bad(), { ready: false, checks: { netbox: { ok: false, detail: "connect ECONNREFUSED" }, state: { ok: false, detail: "database is closed" } } });
});

test("cachedProbe: at most one run per ttl", async () => {
  let runs = 0;
  const p = cachedProbe(60_000, async () => ++runs);
  assert.equal(await p(), 1);
  assert.equal(await p(), 1);
  const q = cachedProbe(0, async () => ++runs);
  await q();
  await q();
  assert.equal(runs, 3);
});

test("healthHandlers over node:http: /healthz 200, /readyz 503 naming the failing check then 200, /metrics has the process metrics", async (t) => {
  let netboxUp = false;
  const registry = serviceRegistry("fleetd_kit_test_");
  const h = healthHandlers({ registry, ready: readinessOf({ netbox: async () => (netboxUp ? { ok: true } : { ok: false, detail: "NetBox unreachable" }) }) });
  const server = createServer((req, res) => {
    if (req.url === "/healthz") return h.healthz(req, res);
    if (req.url === "/readyz") return void h.readyz(req, res);
    return void h.metrics(req, res);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  t.after(() => server.close());
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  assert.equal((await fetch(`${base}/healthz`)).status, 200);
  const down = await fetch(`${base}/readyz`);
  assert.equal(down.status, 503);
  assert.deepEqual(await down.json(), { ready: false, checks: { netbox: { ok: false, detail: "NetBox unreachable" } } });
  netboxUp = true;
  assert.equal((await fetch(`${base}/readyz`)).status, 200);
  const metrics = await (await fetch(`${base}/metrics`)).text();
  assert.match(metrics, /^fleetd_kit_test_process_cpu_seconds_total /m);
  assert.throws(() => serviceRegistry("Bad-Prefix"), /metrics prefix/);
});

class Exited extends Error {
  constructor(readonly code: ExitCode) {
    super(`exit ${code}`);
  }
}
const exit = (code: ExitCode): never => {
  throw new Exited(code);
};

test("runService: --help exits 0, an unknown option is a usage error (2), a start-up error is 2 with its message", async () => {
  const base = { name: "kit-test", usage: "usage: kit-test [--config FILE]", options: { config: { type: "string" as const } }, exit };
  let started = 0;
  const start = async () => {
    started++;
    return { stop: async () => undefined };
  };
  await assert.rejects(runService({ ...base, argv: ["--help"], start }), (e) => e instanceof Exited && e.code === EXIT.ok);
  await assert.rejects(runService({ ...base, argv: ["--bogus"], start }), (e) => e instanceof Exited && e.code === EXIT.usage);
  await assert.rejects(
    runService({ ...base, argv: ["--config", "x.yaml"], start: async () => { throw new Error("server.listen.port: expected a number"); } }),
    (e) => e instanceof Exited && e.code === EXIT.usage,
  );
  assert.equal(started, 0);
  assert.deepEqual(Object.values(EXIT).sort(), [0, 1, 2, 3, 4, 5], "one code per meaning");
});

test("drainServers: a request in flight finishes; an idle keep-alive connection does not hold the stop", async () => {
  let release: () => void = () => undefined;
  const server: Server = createServer((req, res) => {
    if (req.url === "/slow") {
      release = () => res.end("done");
      return;
    }
    res.end("fast");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  assert.equal(await (await fetch(`${base}/fast`)).text(), "fast"); // leaves an idle keep-alive connection
  const slow = fetch(`${base}/slow`).then((r) => r.text());
  await new Promise((r) => setTimeout(r, 50));
  const drained = drainServers([server], 60_000);
  setTimeout(() => release(), 100);
  assert.equal(await slow, "done");
  await drained;
  assert.equal(server.listening, false);
});
