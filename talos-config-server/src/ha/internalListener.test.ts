/**
 * The replicas' internal listener: the TLS files are checked at start (each refusal names the field and the
 * file), and the listener completes a request only for a client certificate from the peer CA, over TLS 1.3.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { request, type Server } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import express from "express";
import { DEFAULT_LISTENER_LIMITS } from "@fleetd/platform/http";
import { CLIENT_EXT, makeCa, makeLeaf, serverExt } from "@fleetd/testkit/pki";
import { ConfigError } from "@fleetd/platform/fleet";
import { createInternalListener, loadInternalTls, type InternalTls, type InternalTlsFiles } from "./internalListener.js";
import { ISSUE_PATH } from "./wire.js";

const dir = mkdtempSync(join(tmpdir(), "fleetd-internal-tls-"));
const f = (name: string) => join(dir, name);
const read = (name: string) => readFileSync(f(name), "utf8");
let files: InternalTlsFiles;
let tls: InternalTls;
let server: Server;
let url = "";
let reached = 0;
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

before(async () => {
  await Promise.all([makeCa(dir, "peer-ca", "test peer CA"), makeCa(dir, "other-ca", "test other CA")]);
  await Promise.all([
    makeLeaf(dir, "peer-ca", "server", "/CN=replica", serverExt(["IP:127.0.0.1"])),
    makeLeaf(dir, "peer-ca", "client", "/CN=replica", CLIENT_EXT),
    makeLeaf(dir, "other-ca", "other-server", "/CN=replica", serverExt(["IP:127.0.0.1"])),
    makeLeaf(dir, "other-ca", "other-client", "/CN=stranger", CLIENT_EXT),
  ]);
  writeFileSync(f("garbage.pem"), "not a certificate\n");
  files = { caFile: f("peer-ca.crt"), certFile: f("server.crt"), keyFile: f("server.key"), clientCertFile: f("client.crt"), clientKeyFile: f("client.key") };
  tls = loadInternalTls(files, "127.0.0.1");
  const router = express.Router();
  router.post(ISSUE_PATH, (_req, res) => {
    reached++;
    res.json({ reached: true });
  });
  server = createInternalListener({ tls, limits: DEFAULT_LISTENER_LIMITS, router, log: quiet });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `https://127.0.0.1:${(server.address() as { port: number }).port}`;
});

after(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

function refused(over: Partial<InternalTlsFiles>, message: RegExp, now?: Date, host = "127.0.0.1"): void {
  assert.throws(() => loadInternalTls({ ...files, ...over }, host, now), (e: unknown) => {
    assert.ok(e instanceof ConfigError, String(e));
    assert.match(e.message, message);
    assert.doesNotMatch(e.message, /PRIVATE KEY/, "no key material in the message");
    return true;
  });
}

test("the TLS files: every refusal names the field and the file", () => {
  assert.match(tls.ca, /BEGIN CERTIFICATE/);
  refused({ caFile: f("missing.crt") }, /^server\.ha\.internal\.tls\.caFile: cannot read .*missing\.crt: ENOENT$/);
  refused({ keyFile: f("missing.key") }, /^server\.ha\.internal\.tls\.keyFile: cannot read .*missing\.key: ENOENT$/);
  refused({ clientCertFile: f("missing.crt") }, /^server\.ha\.internal\.tls\.clientCertFile: cannot read/);
  refused({ caFile: f("garbage.pem") }, /^server\.ha\.internal\.tls\.caFile: .*garbage\.pem: .*no CERTIFICATE block/);
  refused({ caFile: f("server.crt") }, /caFile: .*server\.crt: "CN=replica" is not a CA certificate/);
  refused({ keyFile: f("client.key") }, /server\.crt \(certFile\) and .*client\.key \(keyFile\) do not make a TLS identity/);
  refused({ certFile: f("other-server.crt"), keyFile: f("other-server.key") }, /certFile: .*other-server\.crt \("CN=replica"\) is not issued by the peer CA/);
  refused({ clientCertFile: f("other-client.crt"), clientKeyFile: f("other-client.key") }, /clientCertFile: .*other-client\.crt \("CN=stranger"\) is not issued by the peer CA/);
  refused({ certFile: f("client.crt"), keyFile: f("client.key") }, /certFile: .* lacks serverAuth/);
  refused({ clientCertFile: f("server.crt"), clientKeyFile: f("server.key") }, /clientCertFile: .* lacks clientAuth/);
  refused({}, /certFile: .* is not valid now/, new Date(Date.now() + 30 * 86_400_000));
  refused({}, /certFile: .*server\.crt does not name 10\.0\.3\.17, the host of server\.ha\.internalUrl \(an IP subjectAltName\)/, undefined, "10.0.3.17");
  refused({}, /does not name replica-0\.fleetd\.svc, the host of server\.ha\.internalUrl \(a DNS subjectAltName\)/, undefined, "replica-0.fleetd.svc");
});

interface Outcome {
  status?: number;
  code?: string;
}

function post(path: string, opts: { cert?: string; key?: string; ca?: string; maxVersion?: "TLSv1.2" }): Promise<Outcome> {
  return new Promise((resolve) => {
    const req = request(url + path, {
      method: "POST",
      agent: false,
      ca: opts.ca ?? tls.ca,
      ...(opts.cert && opts.key ? { cert: opts.cert, key: opts.key } : {}),
      ...(opts.maxVersion ? { maxVersion: opts.maxVersion } : {}),
      headers: { "content-type": "application/json" },
    }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode ?? 0 }));
    });
    req.on("error", (e: NodeJS.ErrnoException) => resolve({ code: e.code ?? e.message }));
    req.end("{}");
  });
}

test("the listener: the peer CA's client certificate reaches the internal API; none, another CA's, or TLS 1.2 do not", async () => {
  const before = reached;
  assert.deepEqual(await post(ISSUE_PATH, { cert: tls.client.cert, key: tls.client.key }), { status: 200 });
  assert.equal(reached - before, 1);
  assert.deepEqual(await post(ISSUE_PATH, {}), { code: "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED" });
  assert.deepEqual(await post(ISSUE_PATH, { cert: read("other-client.crt"), key: read("other-client.key") }), { code: "ECONNRESET" });
  const old = await post(ISSUE_PATH, { cert: tls.client.cert, key: tls.client.key, maxVersion: "TLSv1.2" });
  assert.equal(old.status, undefined, "no HTTP over TLS 1.2");
  assert.equal(old.code, "EPROTO", "a TLS 1.2 client gets a protocol version alert");
  assert.equal(reached - before, 1, "only the authenticated request reached the router");
  // only the internal API: anything else is an unknown path
  assert.deepEqual(await post("/v1/attest/challenge", { cert: tls.client.cert, key: tls.client.key }), { status: 404 });
});

test("the listener has the connection policy of every fleetd listener", () => {
  assert.equal(server.maxConnections, DEFAULT_LISTENER_LIMITS.maxConnections);
  assert.equal(server.headersTimeout, DEFAULT_LISTENER_LIMITS.headersTimeoutMs);
  assert.equal(server.requestTimeout, DEFAULT_LISTENER_LIMITS.requestTimeoutMs);
  assert.equal(server.keepAliveTimeout, DEFAULT_LISTENER_LIMITS.keepAliveTimeoutMs);
  assert.equal(server.timeout, DEFAULT_LISTENER_LIMITS.idleTimeoutMs);
});
