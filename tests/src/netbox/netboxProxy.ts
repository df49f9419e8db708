/**
 * A pass-through in front of the real NetBox, for races: every request is forwarded unchanged, but a test can
 * run something (another user's edit, straight to NetBox) at the moment the handler sends a given request —
 * between its read and its effect. Nothing is answered by the proxy itself: NetBox answers everything.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export type ProxyHook = (method: string, path: string) => Promise<boolean>;

export interface NetBoxProxy {
  url: string;
  /**
   * Runs `action` once, just before the first request for which `when(method, path)` is true is forwarded.
   * Resolves when it has run.
   */
  once(when: (method: string, path: string) => boolean, action: () => Promise<void>): Promise<void>;
  stop(): Promise<void>;
}

export async function startNetBoxProxy(target: string): Promise<NetBoxProxy> {
  const t = new URL(target);
  let hooks: { when: (m: string, p: string) => boolean; action: () => Promise<void>; done: () => void; fail: (e: unknown) => void }[] = [];
  const server: Server = createServer((req: IncomingMessage, res) => {
    void (async () => {
      const method = req.method ?? "GET";
      const path = req.url ?? "/";
      const hit = hooks.find((h) => h.when(method, path));
      if (hit) {
        hooks = hooks.filter((h) => h !== hit);
        try {
          await hit.action();
          hit.done();
        } catch (e) {
          hit.fail(e);
        }
      }
      const up = httpRequest(
        { host: t.hostname, port: t.port, method, path, headers: { ...req.headers, host: t.host } },
        (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        },
      );
      up.on("error", () => res.destroy());
      req.pipe(up);
    })();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const addr = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${addr.port}`,
    once: (when, action) => new Promise<void>((done, fail) => void hooks.push({ when, action, done, fail })),
    stop: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}
