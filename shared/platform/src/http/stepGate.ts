/**
 * A bound on the protocol requests a server works on at once, taken before the body is read. A power-on storm
 * sends hundreds of evidence bodies (event logs of tens of KB each) together: read and parsed all at once they
 * are held in memory together (measured: a 1,000-machine storm took the server from 177 to 425 MiB), while the
 * CPU can only work on a few at a time anyway. A request past the bound waits in arrival order with its body
 * unread (Node stops reading a socket whose request nobody consumes); one that has waited `maxWaitMs` is answered
 * 503 with Retry-After, which the machine's client retries — a wait, never a refusal of the machine.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { OutageReason } from "../outage/outage.js";

const SERVER_BUSY: OutageReason = "server-busy";

export interface StepGateOptions {
  /** Requests worked on at once (body read, checks, answer). */
  concurrency: number;
  /** A request waits at most this long for its turn; then 503 with Retry-After. */
  maxWaitMs: number;
  /** Told of each request that gave up waiting (a metric). */
  onShed?: () => void;
}

export interface StepGateStats {
  inside: number;
  waiting: number;
}

/** Connect-style middleware (express `app.use`): `next()` once the request has its turn. */
export function stepGate(o: StepGateOptions): ((req: IncomingMessage, res: ServerResponse, next: () => void) => void) & { stats(): StepGateStats } {
  if (!Number.isInteger(o.concurrency) || o.concurrency < 1) throw new RangeError(`stepGate: concurrency must be a positive integer, not ${o.concurrency}`);
  let inside = 0;
  const queue: { admit: () => void; res: ServerResponse }[] = [];

  const admitNext = () => {
    while (inside < o.concurrency && queue.length > 0) {
      const w = queue.shift() as (typeof queue)[number];
      if (w.res.destroyed || w.res.writableEnded) continue; // the client went away (or was answered) while waiting
      w.admit();
    }
  };

  const gate = (_req: IncomingMessage, res: ServerResponse, next: () => void): void => {
    const enter = () => {
      inside++;
      let left = false;
      const leave = () => {
        if (left) return;
        left = true;
        inside--;
        admitNext();
      };
      res.once("finish", leave);
      res.once("close", leave);
      next();
    };
    if (inside < o.concurrency && queue.length === 0) {
      enter();
      return;
    }
    const timer = setTimeout(() => {
      const i = queue.indexOf(w);
      if (i < 0) return;
      queue.splice(i, 1);
      o.onShed?.();
      const retryAfter = Math.max(1, Math.ceil(o.maxWaitMs / 1000));
      res.statusCode = 503;
      res.setHeader("retry-after", String(retryAfter));
      res.setHeader("content-type", "application/json");
      res.setHeader("connection", "close"); // the body was never read
      res.end(JSON.stringify({ error: "unavailable", reason: SERVER_BUSY, reasons: [{ check: SERVER_BUSY, detail: `the server is working on ${o.concurrency} requests and this one waited ${o.maxWaitMs} ms; retry later (nothing was read or changed)` }] }));
    }, o.maxWaitMs);
    timer.unref();
    const w = {
      res,
      admit: () => {
        clearTimeout(timer);
        enter();
      },
    };
    queue.push(w);
    res.once("close", () => {
      const i = queue.indexOf(w);
      if (i >= 0) {
        queue.splice(i, 1);
        clearTimeout(timer);
      }
    });
  };
  return Object.assign(gate, { stats: (): StepGateStats => ({ inside, waiting: queue.length }) });
}
