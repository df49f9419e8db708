/**
 * The renewal crash window (fleetd issue 14): the node agent stages g<n+1>/ before it confirms the renewal and
 * switches `current` after; a staged generation found at start is resolved with the server first. The server is
 * the protocol engine over in-memory adapters (../platform/protocol/memoryWorld.ts) and the TPM its node:crypto
 * model; the protocol steps run in runtimeAttest's order (challenge, evidence, beforeConfirm, confirm), with a
 * crash injected at each point that matters. Every case ends with a generation the server accepts.
 */
import { strict as assert } from "node:assert";
import { existsSync, mkdtempSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import pino from "pino";
import { AttestationRefused, postStep, RENEW_PATHS, type RuntimeAttestResult, type ServerTransport } from "@fleetd/platform/protocol/client";
import { renewConfirmMessage, type RenewConfirmResponse, type RenewEvidenceResponse, type RenewPurpose } from "@fleetd/platform/protocol";
import { certificateToPem } from "@fleetd/verify/x509";
import { RenewAgent, type AgentDeps, type AttestHooks } from "@fleetd/tink-action/renewAgent";
import { discardStaged, installGeneration, readCurrent, readStaged, stageGeneration, type DevidSet, type InstallStep } from "@fleetd/tink-action/devidStore";
import { b64 } from "../../attestation/machineTypes.js";
import * as steps from "../platform/protocol/memoryWorld.js";
import { makeKeys, makeSet, writeSeed } from "./renewFixture.js";

const DAY = 86_400_000;
const root = mkdtempSync(join(tmpdir(), "fleetd-renew-staging-"));
let w: steps.MemoryWorld;
let t: ServerTransport;
let offset = 0;
const testCa = makeKeys().caCert;

before(async () => {
  w = await steps.startMemoryWorld({ machines: { "worker-2": {}, "worker-3": {} } });
  t = w.transport;
});
after(async () => {
  await w?.stop();
  rmSync(root, { recursive: true, force: true });
});

const unb64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
class Crash extends Error {
  override readonly name = "Crash";
}

/** One node: intake (g1), its seed, and an agent factory (a "restart" is a new agent over the same directories). */
async function node(name: string) {
  const wm = w.machines[name] as steps.WorldMachine;
  const run = await steps.honest(steps.machineOf(wm, t), wm.claims({ mode: "intake" }));
  const held = steps.heldFrom(run);
  const d = mkdtempSync(join(root, `${name}-`));
  const seedDir = join(d, "seed");
  const devidDir = join(d, "devid");
  const seed: DevidSet = {
    node: name,
    generation: 1,
    ldevidCertificate: held.ldevid.certificate,
    lakCertificate: held.lak.certificate,
    caBundle: certificateToPem(testCa),
    ldevidPublic: held.ldevid.key.publicBytes,
    ldevidPrivate: held.ldevid.key.private,
    lakPublic: held.lak.key.publicBytes,
    lakPrivate: held.lak.key.private,
  };
  writeSeed(seedDir, seed);
  const heldOf = (s: DevidSet): steps.Held => ({ ldevid: { certificate: s.ldevidCertificate, key: held.ldevid.key }, lak: { certificate: s.lakCertificate, key: held.lak.key } });
  const boot = steps.bootedTpm(w, "talos");
  const signals: number[] = [];
  const calls: { purpose: RenewPurpose; generation: number }[] = [];

  /** runtimeAttest's order on the software TPM; `crash` throws at a point (the process dies there). */
  async function attest(purpose: RenewPurpose, set: DevidSet, hooks: AttestHooks | undefined, crash?: "before-confirm"): Promise<RuntimeAttestResult> {
    calls.push({ purpose, generation: set.generation });
    const h = heldOf(set);
    const ch = await steps.renewChallengeOf(t, h, purpose);
    const ev = await postStep<RenewEvidenceResponse>(t, RENEW_PATHS.evidence, "renew-evidence", steps.renewEvidenceOf(boot.tpm, h, ch, boot.eventLog));
    if (ev.issued === "none") return { verdict: "pass" };
    const issued = { ldevidCertificate: unb64(ev.ldevidCertificate), lakCertificate: unb64(ev.lakCertificate), caBundle: ev.caBundle };
    await hooks?.beforeConfirm?.(issued);
    if (crash === "before-confirm") throw new Crash("crashed after staging, before the confirm");
    const signature = boot.tpm.sign(h.ldevid.key, renewConfirmMessage(ch.sessionId, issued.ldevidCertificate, issued.lakCertificate));
    await postStep<RenewConfirmResponse>(t, RENEW_PATHS.confirm, "renew-confirm", { sessionId: ch.sessionId, signature: b64(signature) });
    return { verdict: "pass", issued };
  }

  function agent(o: { crash?: "before-confirm"; failStep?: InstallStep } = {}): RenewAgent {
    let crashes = o.crash ? 1 : 0;
    let fails = 0;
    const deps: AgentDeps = {
      log: pino({ level: "silent" }),
      now: () => new Date(Date.now() + offset),
      sleep: async () => undefined,
      random: () => 0.5,
      attest: (purpose, set, hooks) => attest(purpose, set, hooks, purpose === "renew" && crashes-- > 0 ? "before-confirm" : undefined),
      signalSpire: () => {
        signals.push(Date.now());
        return { pids: [4242] };
      },
      install: {
        beforeStep: (s) => {
          if (s === o.failStep && fails-- > 0) throw new Crash(`crashed before ${s}`);
        },
      },
    };
    const a = new RenewAgent({ seedDir, devidDir, statusFile: join(d, "status.json"), failuresForVerdict: 3, backoff: { baseMs: 30_000, capMs: 3_600_000 } }, deps);
    a.prepare();
    fails = o.failStep ? 1 : 0; // armed after the seed was copied
    return a;
  }

  /** The server takes a challenge with the set (it is the node's current generation). */
  async function serverAccepts(s: DevidSet): Promise<void> {
    await steps.renewChallengeOf(t, heldOf(s), "attest");
  }
  async function serverRefuses(s: DevidSet): Promise<string[]> {
    try {
      await steps.renewChallengeOf(t, heldOf(s), "attest");
    } catch (e) {
      if (e instanceof AttestationRefused) return e.refusal.reasons.map((r) => r.check);
      throw e;
    }
    throw new Error(`g${s.generation} was accepted, but it must be refused`);
  }
  return { name, devidDir, agent, signals, calls, serverAccepts, serverRefuses, currentLink: () => readlinkSync(join(devidDir, "current")) };
}

test("crash after staging, before the confirm: at restart the staged generation is refused as void, discarded; the current one renews", async () => {
  const n = await node("worker-1");
  const g1 = n.agent({ crash: "before-confirm" });
  offset = 21 * DAY;
  w.advanceClock(21 * DAY);
  const first = await g1.attempt();
  assert.equal(first.kind, "failed", `the crash ends the attempt: ${JSON.stringify(n.calls)} ${g1.lastError}`);
  assert.equal(n.currentLink(), "g1");
  assert.ok(existsSync(join(n.devidDir, "g2")), "g2 was staged before the confirm");
  const cur1 = readCurrent(n.devidDir) as DevidSet;
  await n.serverAccepts(cur1);
  const staged = readStaged(n.devidDir, cur1);
  assert.ok(staged && "set" in staged && staged.generation === 2);
  assert.ok((await n.serverRefuses(staged.set)).includes("ldevid.void"), "g2 was never confirmed");

  // restart
  const restarted = n.agent();
  n.calls.length = 0;
  assert.equal((await restarted.attempt()).kind, "pass");
  assert.deepEqual(n.calls, [
    { purpose: "attest", generation: 2 },
    { purpose: "renew", generation: 1 },
  ], "the staged g2 first (refused), then g1 renews");
  const cur = readCurrent(n.devidDir) as DevidSet;
  assert.equal(cur.generation, 3, "g2 was void; the renewal issued g3");
  assert.equal(n.currentLink(), "g3");
  assert.ok(!existsSync(join(n.devidDir, "g2")), "the void staged g2 is gone");
  assert.ok(existsSync(join(n.devidDir, "g1")), "the previous generation is kept");
  await n.serverAccepts(cur);
  assert.deepEqual(await n.serverRefuses(cur1), ["ldevid.stale"]);
  offset = 0;
  w.advanceClock(-21 * DAY);
});

test("crash after the confirm, before the switch: g1 is stale server-side; at restart the staged g2 is accepted and becomes current", async () => {
  const n = await node("worker-2");
  const a = n.agent({ failStep: "link-current" });
  offset = 21 * DAY;
  w.advanceClock(21 * DAY);
  assert.equal((await a.attempt()).kind, "failed");
  assert.equal(n.currentLink(), "g1", "current was not switched");
  const g1 = readCurrent(n.devidDir) as DevidSet;
  const staged = readStaged(n.devidDir, g1);
  assert.ok(staged && "set" in staged && staged.generation === 2);
  assert.deepEqual(await n.serverRefuses(g1), ["ldevid.stale"], "without the staged g2 the node would be stranded");
  await n.serverAccepts(staged.set);

  const restarted = n.agent();
  n.calls.length = 0;
  const before = n.signals.length;
  assert.equal((await restarted.attempt()).kind, "pass");
  assert.deepEqual(n.calls, [{ purpose: "attest", generation: 2 }], "the staged generation, accepted: nothing else this attempt");
  assert.equal(n.currentLink(), "g2");
  assert.equal(n.signals.length, before + 1, "spire-agent restarted on the switched files");
  assert.equal(restarted.current?.generation, 2);
  assert.ok(existsSync(join(n.devidDir, "g1")), "current's predecessor is kept, never deleted");
  // the next attempt attests with g2 (fresh: nothing due)
  n.calls.length = 0;
  assert.equal((await restarted.attempt()).kind, "pass");
  assert.deepEqual(n.calls, [{ purpose: "attest", generation: 2 }]);
  offset = 0;
  w.advanceClock(-21 * DAY);
});

test("staging fails (disk): no confirm is sent; g1 stays current server-side and the next attempt renews", async () => {
  const n = await node("worker-3");
  const a = n.agent({ failStep: "rename-generation" });
  offset = 21 * DAY;
  w.advanceClock(21 * DAY);
  assert.equal((await a.attempt()).kind, "failed");
  assert.equal(n.currentLink(), "g1");
  const g1 = readCurrent(n.devidDir) as DevidSet;
  await n.serverAccepts(g1);
  assert.equal((await a.attempt()).kind, "pass");
  const cur = readCurrent(n.devidDir) as DevidSet;
  assert.ok(cur.generation > 1);
  await n.serverAccepts(cur);
  offset = 0;
  w.advanceClock(-21 * DAY);
});

test("devidStore: a staged generation is only one newer than current; discarding never touches current or older ones", () => {
  const keys = makeKeys();
  const dir = join(mkdtempSync(join(root, "store-")), "devid");
  installGeneration(dir, makeSet(keys, "worker-9", 2));
  const cur = readCurrent(dir) as DevidSet;
  assert.equal(readStaged(dir, cur), undefined);
  stageGeneration(dir, makeSet(keys, "worker-9", 3));
  assert.equal(readlinkSync(join(dir, "current")), "g2", "staging does not switch current");
  const s = readStaged(dir, cur);
  assert.ok(s && "set" in s && s.generation === 3);
  assert.throws(() => discardStaged(dir, 2), /not a staged generation/);
  assert.throws(() => discardStaged(dir, 1), /not a staged generation/);
  // a staged set with other keys is unusable
  stageGeneration(dir, makeSet(makeKeys(), "worker-9", 4));
  assert.ok(!existsSync(join(dir, "g3")), "staging g4 removes the older staged g3");
  const bad = readStaged(dir, cur);
  assert.ok(bad && "problem" in bad && /other key blobs/.test(bad.problem));
  discardStaged(dir, 4);
  assert.equal(readStaged(dir, cur), undefined);
  assert.equal((readCurrent(dir) as DevidSet).generation, 2);
});
