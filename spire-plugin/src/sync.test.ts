import { strict as assert } from "node:assert";
import { test } from "node:test";
import { pino } from "pino";
import {
  type AgentApi, type DocumentStore, type EntryApi, fullSpec, parseSyncStatus, type ReattestApi, type SyncStatus,
} from "@fleetd/platform/spire";
import type { Agent, Entry, EntryField, EntrySpec, Selector } from "@fleetd/platform/spire";
import { createSyncMetrics, EntrySync, REATTEST_GIVE_UP_MS, REATTEST_RECHECK_CAP_MS, REATTEST_RECHECK_MS, type SyncMetrics } from "./sync.js";

const TD = "lab.test";
const FP = "c".repeat(40);
const ok = { code: 0, codeName: "OK", message: "" };
const cnSel = (cn: string): Selector => ({ type: "tpm_devid", value: `subject:cn:${cn}` });
const fpSel = (fp: string): Selector => ({ type: "tpm_devid", value: `ca:fingerprint:${fp}` });
const agentId = (x: string) => `spiffe://${TD}/spire/agent/tpm_devid/${x}`;

const listText = (nodes: [string, number][]): string =>
  JSON.stringify({
    apiVersion: "fleetd.io/spire-nodes/v1",
    trustDomain: TD,
    caFingerprints: [FP],
    nodes: nodes.map(([name, gen]) => ({ name, spiffeId: `spiffe://${TD}/node/${name}`, cn: `${name}.g${gen}`, verdict: "pass", verdictAt: "2026-01-01T00:00:00.000Z", role: "worker", ldevidNotAfter: "2027-01-01T00:00:00.000Z" })),
  });

/** SPIRE's entry and agent APIs in memory; `down` makes every call fail as an unreachable server would. */
class FakeSpire implements EntryApi, AgentApi, ReattestApi {
  entries = new Map<string, Entry>();
  agents = new Map<string, Agent>();
  deleted: string[] = [];
  bannedIds: string[] = [];
  down = false;
  agentsDown = false;
  private rev = 0;
  private check(agents = false): void {
    if (this.down || (agents && this.agentsDown)) throw new Error("connect ECONNREFUSED spire-server.sock");
  }
  attest(id: string, selectors: Selector[]): void {
    this.agents.set(agentId(id), { id: agentId(id), attestationType: "tpm_devid", x509SvidSerialNumber: "1", x509SvidExpiresAt: 0, selectors, banned: false, canReattest: true, agentVersion: "1.13.3" });
  }
  private put(e: EntrySpec & { id: string }): Entry {
    const x: Entry = { ...fullSpec(e), revisionNumber: ++this.rev, createdAt: 1 };
    this.entries.set(x.id, x);
    return x;
  }
  async listEntriesPage(filter: { byParentId?: string }, pageSize: number, token: string) {
    this.check();
    const all = [...this.entries.values()].filter((e) => filter.byParentId === undefined || e.parentId === filter.byParentId).sort((a, b) => (a.id < b.id ? -1 : 1));
    const start = token === "" ? 0 : Number(token);
    const page = all.slice(start, start + pageSize);
    return { entries: page, next: page.length === 0 ? "" : String(start + page.length) };
  }
  async batchCreateEntry(entries: readonly EntrySpec[]) {
    this.check();
    return entries.map((e) => ({ status: ok, entry: this.put({ ...e, id: e.id ?? `uuid-${this.rev}` }) }));
  }
  async batchUpdateEntry(entries: readonly (EntrySpec & { id: string })[], _fields: readonly EntryField[]) {
    this.check();
    return entries.map((e) => ({ status: ok, entry: this.put(e) }));
  }
  async batchDeleteEntry(ids: readonly string[]) {
    this.check();
    return ids.map((id) => (this.entries.delete(id), { status: ok, id }));
  }
  listAgentCalls = 0;
  async listAgents(f: Parameters<AgentApi["listAgents"]>[0] = {}): Promise<Agent[]> {
    this.listAgentCalls++;
    this.check(true);
    const want = new Set((f.bySelectors?.selectors ?? []).map((s) => `${s.type}:${s.value}`));
    return [...this.agents.values()].filter((a) => (f.byBanned === undefined || a.banned === f.byBanned) && [...want].every((w) => a.selectors.some((s) => `${s.type}:${s.value}` === w)));
  }
  async banAgent(id: string): Promise<void> {
    this.check(true);
    const a = this.agents.get(id);
    if (a) this.agents.set(id, { ...a, banned: true });
    this.bannedIds.push(id);
  }
  async deleteAgent(id: string): Promise<void> {
    this.check(true);
    this.agents.delete(id);
    this.deleted.push(id);
  }
}

class MemoryDocument implements DocumentStore {
  readonly describe = "memory";
  bytes: Uint8Array | undefined;
  private v = 0;
  async read() {
    return this.bytes ? { bytes: this.bytes, version: String(this.v) } : undefined;
  }
  async write(b: Uint8Array) {
    this.bytes = b;
    this.v++;
    return true;
  }
  watch() {
    return () => {};
  }
  set(text: string): void {
    this.bytes = Buffer.from(text);
    this.v++;
  }
}

function rig(spire = new FakeSpire(), status = new MemoryDocument(), clock = { now: new Date("2026-06-01T00:00:00.000Z") }) {
  const list = new MemoryDocument();
  const metrics: SyncMetrics = createSyncMetrics();
  const sync = new EntrySync({
    client: spire, trustDomain: TD, trustedRoots: () => [FP], list, status, log: pino({ level: "silent" }), metrics, intervalMs: 3_600_000, maxListBytes: 1 << 20, now: () => clock.now,
  });
  const statusDoc = (): SyncStatus => parseSyncStatus(status.bytes ?? "");
  const counter = async (name: string) => Object.fromEntries(((await metrics.registry.getSingleMetric(name)?.get())?.values ?? []).map((v) => [String(v.labels["result"] ?? ""), v.value]));
  return { spire, list, status, sync, statusDoc, metrics, clock, counter };
}

test("a renewal moves a node's entry: its agent with the old CN is deleted (attests again); others untouched; pending until the new CN's agent is listed", async () => {
  const { spire, list, sync, statusDoc, counter } = rig();
  list.set(listText([["a", 1], ["b", 1]]));
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]);
  spire.attest("b1", [cnSel("b.g1"), fpSel(FP)]);
  // a.g1's CN under another CA root: not all of a's entry's selectors, not a's agent
  spire.attest("foreign", [cnSel("a.g1"), fpSel("e".repeat(40))]);
  const first = await sync.pass(false);
  assert.deepEqual([first.outcome, first.creates, first.reattested], ["converged", 2, []]);

  list.set(listText([["a", 2], ["b", 1]]));
  const moved = await sync.pass(false);
  assert.deepEqual([moved.outcome, moved.updates, moved.reattested], ["converged", 1, [agentId("a1")]]);
  assert.deepEqual(spire.deleted, [agentId("a1")]);
  assert.deepEqual(spire.bannedIds, [], "deleted, not banned: it may attest again");
  assert.ok(spire.agents.has(agentId("b1")) && spire.agents.has(agentId("foreign")), "b's agent and the other CA's agent untouched");
  const pending = statusDoc().pendingReattests;
  assert.deepEqual(pending?.map((r) => [r.node, r.previous, r.current, r.deletions]), [["a", [cnSel("a.g1"), fpSel(FP)], [[cnSel("a.g2"), fpSel(FP)]], 1]]);
  assert.equal(statusDoc().converged, true, "a pending re-attestation does not hold back convergence (retirement)");

  // spire-agent was not restarted on the renewed files yet: it attested again with the old leaf → deleted again
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]);
  const again = await sync.pass(false);
  assert.deepEqual(again.reattested, [agentId("a1")]);
  assert.equal(statusDoc().pendingReattests?.[0]?.deletions, 2);

  // restarted on the renewed files, it attests with the new leaf: a new agent ID with the new CN; nothing deleted, cleared
  spire.attest("a2", [cnSel("a.g2"), fpSel(FP)]);
  const done = await sync.pass(false);
  assert.deepEqual([done.outcome, done.reattested], ["converged", []]);
  assert.ok(spire.agents.has(agentId("a2")), "the agent with the current selectors is never deleted");
  assert.equal(statusDoc().pendingReattests, undefined);
  assert.deepEqual(await counter("fleetd_spire_plugin_reattests_total"), { deleted: 2, done: 1 });
  // quiet afterwards: no more agent calls delete anything
  await sync.pass(false);
  assert.deepEqual(spire.deleted, [agentId("a1"), agentId("a1")]);
});

test("SPIRE failing the agent calls: the re-attestation stays pending (status, gauge), survives a restart, and is done once SPIRE answers", async () => {
  const status = new MemoryDocument();
  const spire = new FakeSpire();
  const a = rig(spire, status);
  a.list.set(listText([["a", 1]]));
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]);
  await a.sync.pass(false);
  spire.agentsDown = true;
  a.list.set(listText([["a", 2]]));
  const r = await a.sync.pass(false);
  assert.deepEqual([r.updates, r.reattested], [1, []]);
  assert.deepEqual(a.statusDoc().pendingReattests?.map((x) => [x.node, x.deletions]), [["a", 0]]);
  assert.equal((await a.metrics.registry.getSingleMetric("fleetd_spire_plugin_pending_reattests")?.get())?.values[0]?.value, 1);
  assert.deepEqual(await a.counter("fleetd_spire_plugin_reattests_total"), { error: 1 });
  const still = await a.sync.pass(false);
  assert.deepEqual([still.updates, still.reattested], [0, []]);

  // a new replica (or a restart) reads the pending re-attestation from the status and does it
  spire.agentsDown = false;
  const b = rig(spire, status);
  b.list.set(listText([["a", 2]]));
  await b.sync.start();
  const next = await b.sync.nextPass();
  await b.sync.stop();
  assert.deepEqual([next.updates, next.reattested], [0, [agentId("a1")]]);
  assert.deepEqual(b.statusDoc().pendingReattests?.map((x) => [x.node, x.deletions]), [["a", 1]]);
});

test("a node with no attested agent is not waited for; one whose agent never comes back with the new CN is given up after REATTEST_GIVE_UP_MS", async () => {
  const { spire, list, sync, statusDoc, clock, counter } = rig();
  list.set(listText([["a", 1], ["b", 1]]));
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]);
  await sync.pass(false);
  list.set(listText([["a", 2], ["b", 2]]));
  const r = await sync.pass(false);
  assert.deepEqual(r.reattested, [agentId("a1")]);
  assert.deepEqual(statusDoc().pendingReattests?.map((x) => x.node), ["a"], "b had no agent: nothing to wait for");
  clock.now = new Date(clock.now.getTime() + REATTEST_GIVE_UP_MS + 1);
  await sync.pass(false);
  assert.equal(statusDoc().pendingReattests, undefined);
  assert.deepEqual(await counter("fleetd_spire_plugin_reattests_total"), { deleted: 1, "no-agent": 1, "gave-up": 1 });
});

test("a node whose agent does not come back is tried again after a back-off of its own (5 s doubling to the cap), not at every pass; a try that deleted an agent is followed at once", async () => {
  const { spire, list, sync, statusDoc, clock } = rig();
  const later = (ms: number) => (clock.now = new Date(clock.now.getTime() + ms));
  list.set(listText([["a", 1]]));
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]);
  await sync.pass(false);
  list.set(listText([["a", 2]]));
  assert.deepEqual((await sync.pass(false)).reattested, [agentId("a1")], "the move deletes the old agent");
  // the agent has not attested again yet: the next pass tries (a deletion was progress), finds nothing, backs off
  let calls = spire.listAgentCalls;
  await sync.pass(false);
  assert.ok(spire.listAgentCalls > calls, "tried at the next pass after a deletion");
  const tries: number[] = [];
  for (const wait of [REATTEST_RECHECK_MS - 1, 1, 2 * REATTEST_RECHECK_MS - 1, 1]) {
    later(wait);
    calls = spire.listAgentCalls;
    await sync.pass(false);
    tries.push(spire.listAgentCalls - calls > 0 ? 1 : 0);
  }
  assert.deepEqual(tries, [0, 1, 0, 1], "tried after 5 s, then after 10 s — never in between");
  // the back-off stops doubling at the cap
  for (let i = 0; i < 12; i++) {
    later(REATTEST_RECHECK_CAP_MS);
    await sync.pass(false);
  }
  later(REATTEST_RECHECK_CAP_MS - 1);
  calls = spire.listAgentCalls;
  await sync.pass(false);
  assert.equal(spire.listAgentCalls, calls, "not due before the cap");
  later(1);
  await sync.pass(false);
  assert.ok(spire.listAgentCalls > calls, "due at the cap");
  // the agent attests again with the old leaf (not restarted on the renewed files): deleted, and tried at once after
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]);
  later(REATTEST_RECHECK_CAP_MS);
  assert.deepEqual((await sync.pass(false)).reattested, [agentId("a1")]);
  spire.attest("a2", [cnSel("a.g2"), fpSel(FP)]);
  await sync.pass(false);
  assert.equal(statusDoc().pendingReattests, undefined, "done at the pass after the deletion, no back-off in between");
});

test("a removed node's agents are still banned (not deleted), and its pending re-attestation is dropped", async () => {
  const { spire, list, sync, statusDoc } = rig();
  list.set(listText([["a", 1], ["b", 1]]));
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]);
  spire.attest("b1", [cnSel("b.g1"), fpSel(FP)]);
  await sync.pass(false);
  list.set(listText([["a", 2], ["b", 1]]));
  await sync.pass(false);
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]); // came back with the old leaf
  list.set(listText([["b", 1]]));
  const r = await sync.pass(false);
  assert.deepEqual([r.banned, r.reattested], [[agentId("a1")], []], "its agent still on the old CN is banned too; no re-attestation of a removed node");
  assert.equal(statusDoc().pendingReattests, undefined);
  assert.deepEqual(statusDoc().pendingBans, []);
  list.set(listText([]));
  const gone = await sync.pass(false);
  assert.deepEqual([gone.banned, gone.reattested], [[agentId("b1")], []]);
  assert.deepEqual(spire.deleted, [agentId("a1")], "only the re-attestation's deletion");
});

test("dry run: the plan names the nodes whose agents would attest again; nothing is deleted", async () => {
  const { spire, list, sync } = rig();
  list.set(listText([["a", 1]]));
  spire.attest("a1", [cnSel("a.g1"), fpSel(FP)]);
  await sync.pass(false);
  list.set(listText([["a", 2]]));
  const r = await sync.pass(true);
  assert.deepEqual(r.plan?.reattest, ["a"]);
  assert.deepEqual(spire.deleted, []);
});
