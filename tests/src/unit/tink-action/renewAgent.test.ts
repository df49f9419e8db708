import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import pino from "pino";
import { AttestationRefused, type RuntimeAttestResult } from "@fleetd/platform/protocol/client";
import type { RenewPurpose } from "@fleetd/platform/protocol";
import { ServerTransportError } from "@fleetd/tink-action/serverTransport";
import { RenewAgent, type AgentDeps } from "@fleetd/tink-action/renewAgent";
import { delayAfter, INITIAL_STATE, nextState, purposeFor } from "@fleetd/tink-action/renewSchedule";
import type { DevidSet } from "@fleetd/tink-action/devidStore";
import { makeKeys, makeSet, writeSeed } from "./renewFixture.js";

const DAY = 86_400_000;
const root = mkdtempSync(join(tmpdir(), "fleetd-renew-agent-"));
after(() => rmSync(root, { recursive: true, force: true }));
const keys = makeKeys();
const T0 = new Date("2026-11-01T00:00:00Z");
const settings = { failuresForVerdict: 3, backoff: { baseMs: 30_000, capMs: 3_600_000 } };

test("scheduling: renewal at two thirds of the LDevID's lifetime; purpose renew from then on", () => {
  const s = makeSet(keys, "worker-1", 1, T0, 30);
  const twoThirds = new Date(T0.getTime() + 20 * DAY);
  assert.equal(purposeFor(s.ldevidCertificate, new Date(twoThirds.getTime() - 1)), "attest");
  assert.equal(purposeFor(s.ldevidCertificate, twoThirds), "renew");
  const pass = nextState(INITIAL_STATE, { kind: "pass" }, settings);
  assert.equal(delayAfter(pass, s.ldevidCertificate, T0, settings, 0.5), 20 * DAY);
  assert.equal(delayAfter(pass, s.ldevidCertificate, new Date(T0.getTime() + 19 * DAY), settings, 0.5), DAY);
  // due already and the server issued nothing (its clock): asked again no sooner than the base
  assert.equal(delayAfter(pass, s.ldevidCertificate, new Date(T0.getTime() + 25 * DAY), settings, 0.5), 30_000);
});

test("scheduling: failures back off exponentially with jitter up to the cap; N failures or a refusal: the verdict fails and retries stay at the cap", () => {
  const cert = makeSet(keys, "worker-1", 1, T0, 30).ldevidCertificate;
  let s = INITIAL_STATE;
  const waits: [number, number][] = [];
  for (let i = 1; i <= 5; i++) {
    s = nextState(s, { kind: "failed" }, settings);
    waits.push([delayAfter(s, cert, T0, settings, 0), Math.round(delayAfter(s, cert, T0, settings, 0.999999) / 1000) * 1000]);
    assert.equal(s.verdict, i >= 3 ? "failed" : "unknown", `after ${i} failures`);
  }
  assert.deepEqual(waits.slice(0, 2), [[15_000, 30_000], [30_000, 60_000]]);
  for (const [lo, hi] of waits.slice(2)) assert.deepEqual([lo, hi], [1_800_000, 3_600_000], "at the cap once the verdict failed");
  s = nextState(s, { kind: "pass" }, settings);
  assert.deepEqual(s, { consecutiveFailures: 0, refused: false, verdict: "pass" });
  const r = nextState(s, { kind: "refused" }, settings);
  assert.equal(r.verdict, "failed", "a refusal by verdict fails at once");
  assert.ok(delayAfter(r, cert, T0, settings, 0) >= 1_800_000, "a refusal is not retried hot");
  const one = nextState(s, { kind: "failed" }, settings);
  assert.equal(one.verdict, "pass", "one failure after a pass keeps the verdict");
});

/** An agent over a temp seed/devid pair with a fake clock and a scripted server. */
function harness(script: (purpose: RenewPurpose, current: DevidSet, now: Date) => Promise<RuntimeAttestResult>) {
  const d = mkdtempSync(join(root, "case-"));
  const seedDir = join(d, "seed");
  const devidDir = join(d, "devid");
  const statusFile = join(d, "status", "status.json");
  const seed = makeSet(keys, "worker-1", 1, T0, 30);
  writeSeed(seedDir, seed);
  let now = T0.getTime() + 3600_000;
  const calls: { purpose: RenewPurpose; generation: number }[] = [];
  const signals: number[] = [];
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  const deps: AgentDeps = {
    log,
    now: () => new Date(now),
    sleep: async (ms) => {
      now += ms;
    },
    random: () => 0.5,
    attest: async (purpose, current) => {
      calls.push({ purpose, generation: current.generation });
      return script(purpose, current, new Date(now));
    },
    signalSpire: () => {
      signals.push(now);
      return { pids: [4242] };
    },
  };
  const agent = new RenewAgent({ seedDir, devidDir, statusFile, ...settings }, deps);
  return { agent, seed, seedDir, devidDir, statusFile, calls, signals, lines, advance: (ms: number) => void (now += ms), now: () => new Date(now) };
}

const renewTo = (g: number) => (_p: RenewPurpose, cur: DevidSet, now: Date): RuntimeAttestResult => {
  const next = makeSet(keys, cur.node, g, now, 30);
  return { verdict: "pass", issued: { ldevidCertificate: next.ldevidCertificate, lakCertificate: next.lakCertificate, caBundle: next.caBundle } };
};
const status = (f: string) => JSON.parse(readFileSync(f, "utf8"));

test("the agent: start → runtime attestation (attest); at two thirds → renew, swap, spire-agent signalled; the seed untouched", async () => {
  const h = harness(async (purpose, cur, now) => (purpose === "renew" ? renewTo(cur.generation + 1)(purpose, cur, now) : { verdict: "pass" }));
  const seedBefore = readdirSync(h.seedDir).map((f) => readFileSync(join(h.seedDir, f), "utf8"));
  h.agent.prepare();
  assert.equal((await h.agent.attempt()).kind, "pass");
  assert.deepEqual(h.calls, [{ purpose: "attest", generation: 1 }]);
  assert.equal(h.signals.length, 0, "nothing issued, nothing signalled");
  const wait = h.agent.delay();
  assert.equal(wait, 20 * DAY - 3600_000, "next attempt at two thirds of the lifetime");
  h.advance(wait);
  assert.equal((await h.agent.attempt()).kind, "pass");
  assert.deepEqual(h.calls[1], { purpose: "renew", generation: 1 });
  assert.equal(h.agent.current?.generation, 2);
  assert.match(readFileSync(join(h.devidDir, "ldevid.crt"), "utf8"), /BEGIN CERTIFICATE/);
  assert.equal(h.signals.length, 1, "spire-agent signalled once, after the swap");
  assert.deepEqual(readdirSync(h.seedDir).map((f) => readFileSync(join(h.seedDir, f), "utf8")), seedBefore, "the seed is untouched");
  h.agent.writeStatus();
  assert.deepEqual([status(h.statusFile).generation, status(h.statusFile).verdict, status(h.statusFile).ready], [2, "pass", true]);
  const text = h.lines.map((l) => JSON.stringify(l)).join("\n");
  for (const blob of [h.seed.ldevidPrivate, h.seed.lakPrivate]) {
    assert.ok(!text.includes(Buffer.from(blob).toString("base64")) && !text.includes(Buffer.from(blob).toString("hex")), "no private blob in the logs");
  }
});

test("the agent: N consecutive failures make the node's verdict failed (one error line, status not ready), retried at the cap; a pass clears it", async () => {
  let fail = true;
  const h = harness(async () => {
    if (fail) throw new ServerTransportError("connect", "http://127.0.0.1:1: ECONNREFUSED");
    return { verdict: "pass" };
  });
  h.agent.prepare();
  const waits: number[] = [];
  for (let i = 0; i < 5; i++) {
    assert.equal((await h.agent.attempt()).kind, "failed");
    h.agent.writeStatus();
    assert.equal(status(h.statusFile).ready, i + 1 < 3, `ready after ${i + 1} failures`);
    waits.push(h.agent.delay());
    h.advance(waits.at(-1) as number);
  }
  assert.deepEqual(waits.map((w) => w >= 1_800_000), [false, false, true, true, true]);
  const verdictLines = h.lines.filter((l) => l["code"] === "node-verdict-failed");
  assert.equal(verdictLines.length, 1, "the failed verdict is logged once, when it happens");
  assert.equal(verdictLines[0]?.["level"], 50);
  assert.equal(status(h.statusFile).consecutiveFailures, 5);
  assert.match(status(h.statusFile).lastError, /ECONNREFUSED/);
  fail = false;
  assert.equal((await h.agent.attempt()).kind, "pass");
  h.agent.writeStatus();
  assert.deepEqual([status(h.statusFile).ready, status(h.statusFile).consecutiveFailures], [true, 0]);
});

test("the agent: a 403 refusal is logged with the server's reasons (escaped), swaps nothing, fails the verdict at once and is not retried hot", async () => {
  const detail = 'event 12 (PCR 4, EV_EFI_BOOT_SERVICES_APPLICATION): digest does not match "data"\n{"level":60}';
  const h = harness(async () => {
    throw new AttestationRefused("renew-evidence", 403, { error: "refused", reasons: [{ check: "runtime.eventlog.replay", detail, event: 12, pcr: 4 }] });
  });
  h.agent.prepare();
  const before = readFileSync(join(h.devidDir, "ldevid.crt"), "utf8");
  assert.equal((await h.agent.attempt()).kind, "refused");
  assert.equal(readFileSync(join(h.devidDir, "ldevid.crt"), "utf8"), before, "nothing swapped");
  assert.equal(h.signals.length, 0);
  const line = h.lines.find((l) => l["code"] === "refused");
  assert.ok(line, "the refusal is logged");
  assert.deepEqual((line["reasons"] as { detail: string }[])[0]?.detail, detail, "the reasons as the server sent them, escaped by JSON");
  assert.ok(!(line["msg"] as string).includes("\n"), "the message line carries no raw newline");
  assert.ok(h.agent.delay() >= 1_800_000, "not retried hot");
  h.agent.writeStatus();
  const s = status(h.statusFile);
  assert.deepEqual([s.ready, s.verdict, s.refused, s.reasons[0].check], [false, "failed", true, "runtime.eventlog.replay"]);
});

test("the agent: a renewal whose certificates do not fit (another key) is a failed attempt; the current files stay", async () => {
  const h = harness(async (_p, cur, now) => {
    const other = makeSet(makeKeys(), cur.node, cur.generation + 1, now, 30);
    return { verdict: "pass", issued: { ldevidCertificate: other.ldevidCertificate, lakCertificate: other.lakCertificate, caBundle: other.caBundle } };
  });
  h.agent.prepare();
  h.advance(21 * DAY);
  assert.equal((await h.agent.attempt()).kind, "failed");
  assert.equal(h.agent.current?.generation, 1);
  assert.equal(h.signals.length, 0);
});

test("the agent: a crash inside the swap leaves the old generation current; the next renewal completes", async () => {
  const h = harness(async (p, cur, now) => renewTo(cur.generation + 1)(p, cur, now));
  h.agent.prepare();
  h.advance(21 * DAY);
  (h.agent.deps as { install?: AgentDeps["install"] }).install = { beforeStep: (s) => { if (s === "swap-current") throw new Error("power lost"); } };
  assert.equal((await h.agent.attempt()).kind, "failed");
  assert.equal(h.signals.length, 0, "no restart without a swap");
  (h.agent.deps as { install?: AgentDeps["install"] }).install = undefined;
  assert.equal((await h.agent.attempt()).kind, "pass");
  assert.equal(h.agent.current?.generation, 2);
  assert.equal(h.signals.length, 1);
});
