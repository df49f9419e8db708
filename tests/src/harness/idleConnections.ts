/**
 * Opens `n` idle TCP connections (sending nothing) to a listener and reports which the server closed within
 * `withinMs`: a listener with fleetd's limits (shared/platform/src/http/listenerLimits.ts) closes every connection beyond
 * its per-source cap at once. The caller's connections are closed afterwards.
 */
import { connect, type Socket } from "node:net";

export async function idleConnections(url: string, n: number, withinMs = 500): Promise<{ open: number; closed: number }> {
  const u = new URL(url);
  const port = Number(u.port);
  const sockets: Socket[] = [];
  const closed: boolean[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const s = connect(port, u.hostname.replace(/^\[|\]$/g, ""));
      s.on("error", () => undefined);
      s.resume();
      closed.push(false);
      s.once("close", () => (closed[i] = true));
      await new Promise<void>((r) => {
        s.once("connect", () => r());
        s.once("close", () => r());
      });
      sockets.push(s);
    }
    await new Promise((r) => setTimeout(r, withinMs));
    const c = closed.filter(Boolean).length;
    return { open: n - c, closed: c };
  } finally {
    for (const s of sockets) s.destroy();
  }
}
