/**
 * One connection policy for every fleetd HTTP(S) listener (talos-config-server's attestation and config API and
 * its HA replicas' internal listener, netbox-script's webhook receiver). Node's defaults — no connection cap,
 * 60 s to send headers, 300 s per request, no idle timeout before the first request, 120 s for a TLS handshake —
 * let one host hold thousands of file descriptors for minutes with idle sockets. Here:
 *  - at most `maxConnections` sockets in all and `maxConnectionsPerSource` per remote address (a connection
 *    beyond either is closed at once, before TLS or HTTP is read);
 *  - `headersTimeoutMs` for a request's headers, `requestTimeoutMs` for the whole request, `idleTimeoutMs` of
 *    silence on a socket (also before its first request and during a TLS handshake), `keepAliveTimeoutMs`
 *    between requests on a kept-alive connection.
 * The values are site configuration (`listen.limits`), with these defaults. Timeouts are checked every
 * `checkIntervalMs` by Node's connection checker (default 30 s otherwise).
 */
import type { Server as HttpServer } from "node:http";
import type { Server as HttpsServer } from "node:https";
import type { Socket } from "node:net";
import { z } from "zod";

const ms = (min: number, max: number, def: number) => z.number().int().min(min).max(max).default(def);

export const ListenerLimits = z
  .strictObject({
    maxConnections: z.number().int().min(1).max(1_000_000).default(1024),
    maxConnectionsPerSource: z.number().int().min(1).max(100_000).default(32),
    headersTimeoutMs: ms(1000, 120_000, 10_000),
    requestTimeoutMs: ms(1000, 600_000, 30_000),
    idleTimeoutMs: ms(1000, 600_000, 30_000),
    keepAliveTimeoutMs: ms(100, 120_000, 5000),
  })
  .refine((l) => l.maxConnectionsPerSource <= l.maxConnections, { message: "maxConnectionsPerSource must not exceed maxConnections" })
  .refine((l) => l.headersTimeoutMs <= l.requestTimeoutMs, { message: "headersTimeoutMs must not exceed requestTimeoutMs" });
export type ListenerLimits = z.infer<typeof ListenerLimits>;

export const DEFAULT_LISTENER_LIMITS: ListenerLimits = ListenerLimits.parse({});

/** How often Node checks header and request timeouts (at most a second past the limit). */
const checkIntervalMs = (l: ListenerLimits): number => Math.max(250, Math.min(1000, Math.floor(l.headersTimeoutMs / 4)));

/** Options for `http.createServer` / `https.createServer` (the timeouts Node reads only at creation). */
export function listenerOptions(l: ListenerLimits): { requestTimeout: number; headersTimeout: number; keepAliveTimeout: number; connectionsCheckingInterval: number; handshakeTimeout: number } {
  return {
    requestTimeout: l.requestTimeoutMs,
    headersTimeout: l.headersTimeoutMs,
    keepAliveTimeout: l.keepAliveTimeoutMs,
    connectionsCheckingInterval: checkIntervalMs(l),
    handshakeTimeout: Math.min(l.idleTimeoutMs, l.headersTimeoutMs), // https only; http ignores it
  };
}

/** Sockets per remote address, as the listener counts them (for metrics and tests). */
export interface ListenerGuard {
  open(source: string): number;
  readonly refused: number;
}

/**
 * Applies the limits to a server (before or after `listen`): the caps, the timeouts, the idle socket timeout.
 * Returns the per-source counter.
 */
export function applyListenerLimits(server: HttpServer | HttpsServer, l: ListenerLimits): ListenerGuard {
  server.maxConnections = l.maxConnections;
  server.headersTimeout = l.headersTimeoutMs;
  server.requestTimeout = l.requestTimeoutMs;
  server.keepAliveTimeout = l.keepAliveTimeoutMs;
  // No 'timeout' listener on the server: Node then destroys a socket silent for this long.
  server.setTimeout(l.idleTimeoutMs);
  const perSource = new Map<string, number>();
  let refused = 0;
  // 'connection' is the raw TCP socket, before TLS: a refused source costs no handshake.
  server.prependListener("connection", (socket: Socket) => {
    const source = socket.remoteAddress ?? "unknown";
    const n = (perSource.get(source) ?? 0) + 1;
    if (n > l.maxConnectionsPerSource) {
      refused++;
      socket.destroy();
      return;
    }
    perSource.set(source, n);
    socket.setTimeout(l.idleTimeoutMs); // also before the first byte and during a TLS handshake
    socket.once("timeout", () => socket.destroy());
    socket.once("close", () => {
      const left = (perSource.get(source) ?? 1) - 1;
      if (left <= 0) perSource.delete(source);
      else perSource.set(source, left);
    });
  });
  return {
    open: (source) => perSource.get(source) ?? 0,
    get refused() {
      return refused;
    },
  };
}
