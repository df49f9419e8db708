/**
 * The replicas' own listener (issue 10): HTTPS that completes a handshake only with a client presenting a
 * certificate that chains to the peer CA (`requestCert`, `rejectUnauthorized`, TLS 1.3 — both ends are fleetd),
 * with the connection policy of every fleetd listener (shared/platform/src/http/listenerLimits.ts), serving the internal
 * API (internalApi.ts, openapi-internal.yaml) and nothing else. The public listener does not mount it.
 *
 * `loadInternalTls` reads the files `server.ha.internal.tls` names once, at start, and refuses (ConfigError,
 * naming the field and the file) an unreadable file, a CA file without a CA certificate, a certificate and key
 * that do not pair, a certificate the peer CA did not issue, one outside its validity, or one whose extended key
 * usage forbids its role — everything that would otherwise surface as a failed handshake at the first forward.
 */
import { isIP } from "node:net";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { createSecureContext, TLSSocket } from "node:tls";
import express, { type NextFunction, type Request, type Response, type Router } from "express";
import { applyListenerLimits, listenerOptions, type ListenerLimits } from "@fleetd/platform/http";
import { ConfigError } from "@fleetd/platform/fleet";
import { ParseError } from "@fleetd/verify/codec";
import { type Certificate, CertificateError, certificatesFromPem, issuedBy, namesHost, opensslNameText, parseCertificate } from "@fleetd/verify/x509";
import type { LeaderIssuerLog } from "./leaderIssuer.js";

/** Both ends are fleetd on Node 24 (OpenSSL 3): nothing older than TLS 1.3 is needed or offered. */
export const INTERNAL_TLS_MIN_VERSION = "TLSv1.3" as const;

/** What `server.ha.internal.tls` names (config.ts). */
export interface InternalTlsFiles {
  caFile: string;
  certFile: string;
  keyFile: string;
  clientCertFile: string;
  clientKeyFile: string;
}

/** The peer CA (PEM) and this replica's two TLS identities: serving (`cert`/`key`) and forwarding (`client`). */
export interface InternalTls {
  ca: string;
  server: { cert: string; key: string };
  client: { cert: string; key: string };
}

const SERVER_AUTH = "1.3.6.1.5.5.7.3.1";
const CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";
const FIELD = "server.ha.internal.tls";

function readText(path: string, field: keyof InternalTlsFiles): string {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new ConfigError(`${FIELD}.${field}: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}`);
  }
}

function certificates(text: string, path: string, field: keyof InternalTlsFiles): Certificate[] {
  try {
    return certificatesFromPem(text).map((der) => parseCertificate(der));
  } catch (e) {
    if (e instanceof CertificateError || e instanceof ParseError) throw new ConfigError(`${FIELD}.${field}: ${path}: ${e.message}`);
    throw e;
  }
}

const isCa = (c: Certificate): boolean => c.ext.basicConstraints?.cA === true;
const subjectText = (c: Certificate): string => opensslNameText(c.subject).replace(/\n/g, ", ");

/** The leaf (first certificate of `chain`) chains to one of `roots` through the chain's other certificates. */
function chainsTo(chain: Certificate[], roots: Certificate[]): boolean {
  let cert = chain[0];
  const pool = [...chain.slice(1)];
  for (let depth = 0; cert && depth <= chain.length; depth++) {
    const c: Certificate = cert;
    if (roots.some((r) => issuedBy(c, r))) return true;
    const next = pool.find((p) => isCa(p) && issuedBy(c, p));
    if (!next) return false;
    pool.splice(pool.indexOf(next), 1);
    cert = next;
  }
  return false;
}

/** A checked TLS identity and its parsed leaf certificate (for checks the caller adds, e.g. the names it holds). */
function identity(
  files: InternalTlsFiles,
  certField: "certFile" | "clientCertFile",
  keyField: "keyFile" | "clientKeyFile",
  roots: Certificate[],
  usage: string,
  now: Date,
): { pem: { cert: string; key: string }; leaf: Certificate } {
  const certPath = files[certField];
  const keyPath = files[keyField];
  const cert = readText(certPath, certField);
  const key = readText(keyPath, keyField);
  try {
    createSecureContext({ cert, key });
  } catch (e) {
    // OpenSSL's reason (e.g. "key values mismatch"), never the key
    throw new ConfigError(`${FIELD}: ${certPath} (${certField}) and ${keyPath} (${keyField}) do not make a TLS identity: ${(e as Error).message}`);
  }
  const chain = certificates(cert, certPath, certField);
  const leaf = chain[0] as Certificate;
  const what = `${FIELD}.${certField}: ${certPath} ("${subjectText(leaf)}")`;
  if (!chainsTo(chain, roots)) throw new ConfigError(`${what} is not issued by the peer CA (${FIELD}.caFile ${files.caFile}): the other replicas would refuse it`);
  if (now < leaf.notBefore || now > leaf.notAfter) throw new ConfigError(`${what} is not valid now (${leaf.notBefore.toISOString()} – ${leaf.notAfter.toISOString()})`);
  const eku = leaf.ext.extKeyUsage;
  if (eku !== undefined && !eku.includes(usage)) {
    throw new ConfigError(`${what}: its extended key usage (${eku.join(", ")}) lacks ${usage === SERVER_AUTH ? "serverAuth" : "clientAuth"}`);
  }
  return { pem: { cert, key }, leaf };
}

/**
 * Reads and checks every file of `server.ha.internal.tls` (ConfigError naming the field and file). `host`: the
 * host of `server.ha.internalUrl`, which the server certificate must name (the other replicas check it).
 */
export function loadInternalTls(files: InternalTlsFiles, host: string, now: Date = new Date()): InternalTls {
  const ca = readText(files.caFile, "caFile");
  const roots = certificates(ca, files.caFile, "caFile");
  const notCa = roots.find((r) => !isCa(r));
  if (notCa) throw new ConfigError(`${FIELD}.caFile: ${files.caFile}: "${subjectText(notCa)}" is not a CA certificate (basicConstraints cA)`);
  const { pem: server, leaf } = identity(files, "certFile", "keyFile", roots, SERVER_AUTH, now);
  const bare = host.replace(/^\[|\]$/g, "");
  if (!namesHost(leaf, bare)) {
    throw new ConfigError(`${FIELD}.certFile: ${files.certFile} does not name ${bare}, the host of server.ha.internalUrl (${isIP(bare) ? "an IP" : "a DNS"} subjectAltName): the other replicas would refuse it`);
  }
  return { ca, server, client: identity(files, "clientCertFile", "clientKeyFile", roots, CLIENT_AUTH, now).pem };
}

export interface InternalListenerOptions {
  tls: Pick<InternalTls, "ca" | "server">;
  limits: ListenerLimits;
  /** The internal API (internalApi.ts): the only thing served. */
  router: Router;
  log: LeaderIssuerLog;
}

/**
 * The internal HTTPS server, not yet listening. A client without a certificate fails the handshake (alert
 * certificate_required); one whose certificate the peer CA did not issue is disconnected as the handshake ends
 * (Node checks the verification result then). Either way no byte of HTTP is read.
 */
export function createInternalListener(o: InternalListenerOptions): Server {
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  // Unreachable with rejectUnauthorized (the handshake already failed); kept so that a listener built wrongly
  // still serves nothing to an unauthenticated peer.
  app.use((req: Request, res: Response, next: NextFunction) => {
    if (req.socket instanceof TLSSocket && req.socket.authorized) return next();
    o.log.warn({ from: req.socket.remoteAddress }, "internal listener: a request without a verified client certificate was refused");
    res.status(401).json({ error: "peer-auth", detail: "peer-certificate-missing: the internal API needs a client certificate from the peer CA" });
  });
  app.use(o.router);
  // Errors the router did not answer: JSON, never a stack trace.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    o.log.error({ err }, "internal listener: request failed");
    res.status(500).json({ error: "internal", detail: "the request failed on this replica" });
  });
  const server = createServer(
    {
      ...o.tls.server,
      ca: o.tls.ca,
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: INTERNAL_TLS_MIN_VERSION,
      ...listenerOptions(o.limits),
    },
    app,
  );
  applyListenerLimits(server, o.limits);
  // One log line per 10 s at most (a scanner would otherwise write one per connection); the count says the rest.
  let refused = 0;
  let lastLog = 0;
  server.on("tlsClientError", (err: NodeJS.ErrnoException, socket: TLSSocket) => {
    refused++;
    const t = Date.now();
    if (t - lastLog < 10_000) return;
    lastLog = t;
    // authorizationError: the client certificate's verification against the peer CA (e.g. UNABLE_TO_VERIFY_LEAF_SIGNATURE)
    const certificate = socket.authorizationError ? `client certificate refused: ${String(socket.authorizationError)}` : undefined;
    o.log.warn({ from: socket.remoteAddress, code: err.code, reason: certificate ?? err.message, refusedSoFar: refused }, "internal listener: TLS handshake refused");
  });
  return server;
}
