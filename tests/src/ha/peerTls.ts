/**
 * The HA replicas' peer PKI for tests (shared/testkit/src/pki.ts): the peer CA with a server certificate for 127.0.0.1
 * and a client certificate, and another CA with the same two (a stranger's, or an impostor's). And a raw
 * HTTPS POST that says how the TLS handshake went, for the internal listener's refusals.
 */
import { readFileSync } from "node:fs";
import { request, type RequestOptions } from "node:https";
import { join } from "node:path";
import type { InternalTls, InternalTlsFiles } from "@fleetd/talos-config-server/ha/internalListener";
import { CLIENT_EXT, makeCa, makeLeaf, serverExt } from "@fleetd/testkit/pki";

export interface PeerPki {
  /** Files as `server.ha.internal.tls` names them (the peer CA's). */
  files: InternalTlsFiles;
  /** The same, read (what loadInternalTls returns). */
  tls: InternalTls;
  /** Another CA's certificates: a client or a leader the replicas must not trust. */
  other: InternalTls;
}

export async function makePeerPki(dir: string): Promise<PeerPki> {
  await Promise.all([makeCa(dir, "peer-ca", "fleetd-test-peer-ca"), makeCa(dir, "other-ca", "fleetd-test-other-ca")]);
  await Promise.all([
    makeLeaf(dir, "peer-ca", "peer-server", "/CN=talos-config-server", serverExt(["IP:127.0.0.1", "DNS:localhost"])),
    makeLeaf(dir, "peer-ca", "peer-client", "/CN=talos-config-server", CLIENT_EXT),
    makeLeaf(dir, "other-ca", "other-server", "/CN=talos-config-server", serverExt(["IP:127.0.0.1", "DNS:localhost"])),
    makeLeaf(dir, "other-ca", "other-client", "/CN=talos-config-server", CLIENT_EXT),
  ]);
  const f = (name: string) => join(dir, name);
  const r = (name: string) => readFileSync(f(name), "utf8");
  const read = (prefix: string): InternalTls => ({
    ca: r(`${prefix}-ca.crt`),
    server: { cert: r(`${prefix}-server.crt`), key: r(`${prefix}-server.key`) },
    client: { cert: r(`${prefix}-client.crt`), key: r(`${prefix}-client.key`) },
  });
  return {
    files: { caFile: f("peer-ca.crt"), certFile: f("peer-server.crt"), keyFile: f("peer-server.key"), clientCertFile: f("peer-client.crt"), clientKeyFile: f("peer-client.key") },
    tls: read("peer"),
    other: read("other"),
  };
}

export interface PeerAnswer {
  status: number;
  bytes: Uint8Array;
  json: unknown;
  signature: string | undefined;
}

/** An error of the connection (no HTTP answer): its code, e.g. ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED. */
export class NoAnswer extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

/**
 * POST `body` to `url` over HTTPS with `tls` (the CA trusted; a client certificate if given), a fresh connection
 * each time. Resolves with the HTTP answer; rejects with NoAnswer when the connection failed before one.
 */
export function peerPost(url: string, headers: Record<string, string>, body: Uint8Array, tls: { ca: string; cert?: string; key?: string }): Promise<PeerAnswer> {
  return new Promise((resolve, reject) => {
    const opts: RequestOptions = {
      method: "POST",
      headers: { ...headers, "content-type": "application/json", "content-length": String(body.length) },
      agent: false,
      timeout: 15_000,
      ca: tls.ca,
      ...(tls.cert && tls.key ? { cert: tls.cert, key: tls.key } : {}),
    };
    const req = request(url, opts, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const bytes = new Uint8Array(Buffer.concat(chunks));
        const text = Buffer.from(bytes).toString("utf8");
        let json: unknown = text;
        try {
          json = JSON.parse(text);
        } catch {
          /* not JSON (e.g. express's 404 page) */
        }
        const sig = res.headers["x-fleetd-peer-signature"];
        resolve({ status: res.statusCode ?? 0, bytes, json, signature: typeof sig === "string" ? sig : undefined });
      });
      res.on("error", (e: NodeJS.ErrnoException) => reject(new NoAnswer(e.code ?? "error", e.message)));
    });
    req.on("timeout", () => req.destroy(Object.assign(new Error("no answer within 15 s"), { code: "TIMEOUT" })));
    req.on("error", (e: NodeJS.ErrnoException) => reject(new NoAnswer(e.code ?? "error", e.message)));
    req.end(body);
  });
}
