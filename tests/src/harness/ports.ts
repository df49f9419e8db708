/** Loopback helpers for real-platform harnesses: free ports, waiting for a port or an HTTP endpoint. */
import { createServer, connect } from "node:net";

/** A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      if (addr === null || typeof addr === "string") return reject(new Error("no port"));
      srv.close(() => resolve(addr.port));
    });
  });
}

export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `probe` until it returns true; throws `what` (with the last error) after `timeoutMs`. */
export async function waitFor(what: string, timeoutMs: number, probe: () => Promise<boolean>, isDead?: () => string | undefined): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < end) {
    const dead = isDead?.();
    if (dead) throw new Error(`${what}: ${dead}`);
    try {
      if (await probe()) return;
    } catch (e) {
      last = e;
    }
    await sleep(200);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ""}`);
}

/**
 * Polls `probe` until it returns a value (not undefined); a throw counts as "not yet". After `timeoutMs` it
 * throws `what` with the last error and, if given, `context()` (e.g. the processes' recent logs).
 */
export async function pollValue<T>(what: string, probe: () => Promise<T | undefined>, opts: { timeoutMs?: number; intervalMs?: number; context?: () => string } = {}): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (last error: ${last.slice(0, 500)})` : ""}${opts.context ? `\n${opts.context()}` : ""}`);
    await sleep(opts.intervalMs ?? 250);
  }
}
