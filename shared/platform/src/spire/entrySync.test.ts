import { strict as assert } from "node:assert";
import { test } from "node:test";
import { banAgentsOf, fullSpec, MANAGED_ENTRY_FIELDS, nodeEntryBackend, reattestAgentsOf, sameEntry, syncNodeEntries, type AgentApi, type EntryApi, type PendingReattest, type ReattestApi } from "./entrySync.js";
import { nodeEntries, nodeEntryId, type NodeList } from "./nodeList.js";
import type { Agent, Entry, EntryField, EntrySpec } from "./wire.js";
import type { DeleteResult, EntryResult } from "./server.js";

const FP = "c".repeat(40);
const TD = "lab.test";
const list = (names: [string, number][]): NodeList => ({
  apiVersion: "fleetd.io/spire-nodes/v1",
  trustDomain: TD,
  caFingerprints: [FP],
  nodes: names.map(([name, gen]) => ({ name, spiffeId: `spiffe://${TD}/node/${name}`, cn: `${name}.g${gen}`, verdict: "pass", verdictAt: "2026-01-01T00:00:00.000Z", role: "worker", ldevidNotAfter: "2027-01-01T00:00:00.000Z" })),
});
const ok = { code: 0, codeName: "OK", message: "" };

/** An in-memory SPIRE Entry API with SPIRE's per-item statuses (enough for the backend's contract). */
class FakeSpire implements EntryApi {
  entries = new Map<string, Entry>();
  calls: string[] = [];
  updateMasks: (readonly EntryField[])[] = [];
  private rev = 0;
  put(e: EntrySpec & { id: string }): Entry {
    const d = fullSpec({ ...e, selectors: e.selectors, spiffeId: e.spiffeId, parentId: e.parentId, id: e.id });
    const x: Entry = { ...d, revisionNumber: ++this.rev, createdAt: 1 };
    this.entries.set(x.id, x);
    return x;
  }
  async listEntriesPage(filter: { byParentId?: string }, pageSize: number, token: string) {
    this.calls.push("list");
    const all = [...this.entries.values()].filter((e) => filter.byParentId === undefined || e.parentId === filter.byParentId).sort((a, b) => (a.id < b.id ? -1 : 1));
    const start = token === "" ? 0 : Number(token);
    const page = all.slice(start, start + pageSize);
    return { entries: page, next: page.length === 0 ? "" : String(start + page.length) };
  }
  async batchCreateEntry(entries: readonly EntrySpec[]): Promise<EntryResult[]> {
    this.calls.push(`create:${entries.length}`);
    return entries.map((e) => {
      const existing = e.id !== undefined ? this.entries.get(e.id) : undefined;
      if (existing) return { status: { code: 6, codeName: "ALREADY_EXISTS", message: "similar entry already exists" }, entry: existing };
      return { status: ok, entry: this.put({ ...e, id: e.id ?? `uuid-${this.rev}` }) };
    });
  }
  async batchUpdateEntry(entries: readonly (EntrySpec & { id: string })[], fields: readonly EntryField[]): Promise<EntryResult[]> {
    this.calls.push(`update:${entries.length}`);
    this.updateMasks.push(fields);
    return entries.map((e) => (this.entries.has(e.id) ? { status: ok, entry: this.put(e) } : { status: { code: 5, codeName: "NOT_FOUND", message: "not found" } }));
  }
  async batchDeleteEntry(ids: readonly string[]): Promise<DeleteResult[]> {
    this.calls.push(`delete:${ids.length}`);
    return ids.map((id) => (this.entries.delete(id) ? { status: ok, id } : { status: { code: 5, codeName: "NOT_FOUND", message: "entry not found" }, id }));
  }
}

test("keying and ownership: the key is the deterministic entry ID; only fleetd.node.* entries parented to the server are owned", () => {
  const b = nodeEntryBackend(new FakeSpire(), { trustDomain: TD });
  const [d] = nodeEntries(list([["a", 1]]));
  assert.ok(d);
  assert.equal(b.keyOfDeclared(d), nodeEntryId("a", FP));
  const mk = (over: Partial<Entry>): Entry => ({ ...fullSpec(d), revisionNumber: 1, createdAt: 1, ...over });
  assert.equal(b.owned(mk({})), true);
  assert.equal(b.keyOfCurrent(mk({})), d.id);
  assert.equal(b.owned(mk({ id: "5f0c-uuid" })), false, "a SPIRE-generated ID");
  assert.equal(b.owned(mk({ id: "other.node.a" })), false, "another owner's prefix");
  assert.equal(b.owned(mk({ parentId: `spiffe://${TD}/node/a` })), false, "a workload entry under a node (never listed: another parent)");
  assert.equal(b.owned(mk({ selectors: [{ type: "spiffe_id", value: `spiffe://${TD}/spire/agent/join_token/x` }], id: "jt-alias" })), false, "a join-token alias");
  assert.equal(b.batchSize, 200);
});

test("same(): every managed field counts (selectors as a set), nothing else does", () => {
  const [d] = nodeEntries(list([["a", 1]]));
  assert.ok(d);
  const cur: Entry = { ...fullSpec(d), revisionNumber: 7, createdAt: 99 };
  assert.equal(sameEntry(cur, d), true);
  assert.equal(sameEntry({ ...cur, selectors: [...cur.selectors].reverse() }, d), true, "selector order does not matter");
  assert.equal(sameEntry({ ...cur, revisionNumber: 8, createdAt: 1 }, d), true, "server bookkeeping does not matter");
  const differs: Partial<Entry>[] = [
    { selectors: [{ type: "tpm_devid", value: "subject:cn:a.g2" }, cur.selectors[1] as Entry["selectors"][number]] },
    { selectors: cur.selectors.slice(0, 1) },
    { spiffeId: `spiffe://${TD}/node/b` },
    { x509SvidTtl: 60 }, { jwtSvidTtl: 60 }, { admin: true }, { downstream: true }, { federatesWith: ["x.test"] },
    { dnsNames: ["a.example"] }, { storeSvid: true }, { hint: "x" }, { expiresAt: 5 },
  ];
  for (const over of differs) assert.equal(sameEntry({ ...cur, ...over }, d), false, JSON.stringify(over));
  assert.deepEqual([...MANAGED_ENTRY_FIELDS].sort(), ["admin", "dnsNames", "downstream", "expiresAt", "federatesWith", "hint", "jwtSvidTtl", "parentId", "selectors", "spiffeId", "storeSvid", "x509SvidTtl"]);
});

test("sync: creates in batches, a second run writes nothing, a CN change is an update with the full mask, a removal is a delete, foreign entries stay", async () => {
  const spire = new FakeSpire();
  const foreign = spire.put({ id: "uuid-foreign", spiffeId: `spiffe://${TD}/node/n0`, parentId: `spiffe://${TD}/spire/server`, selectors: [{ type: "tpm_devid", value: "subject:cn:manual" }] });
  const workload = spire.put({ id: "uuid-wl", spiffeId: `spiffe://${TD}/w`, parentId: `spiffe://${TD}/node/n0`, selectors: [{ type: "unix", value: "uid:0" }] });
  const names = Array.from({ length: 450 }, (_, i): [string, number] => [`n${i}`, 1]);
  const r1 = await syncNodeEntries(spire, list(names), { batchSize: 200, pageSize: 100 });
  assert.equal(r1.report.creates.filter((c) => c.outcome === "ok").length, 450);
  assert.deepEqual(spire.calls.filter((c) => !c.startsWith("list")), ["create:200", "create:200", "create:50"]);
  spire.calls = [];
  const r2 = await syncNodeEntries(spire, list(names), { batchSize: 200, pageSize: 100 });
  assert.equal(r2.report.unchanged, 450);
  assert.deepEqual(spire.calls.filter((c) => !c.startsWith("list")), [], "no write");
  assert.equal(r2.report.ignoredUnowned, 1, "the foreign alias is listed and ignored; the workload entry is not listed at all");
  spire.calls = [];
  const changed = names.filter(([n]) => n !== "n7").map(([n]): [string, number] => [n, n === "n3" ? 2 : 1]);
  const r3 = await syncNodeEntries(spire, list(changed), {});
  assert.deepEqual(spire.calls.filter((c) => !c.startsWith("list")), ["update:1", "delete:1"]);
  assert.deepEqual(spire.updateMasks.at(-1), MANAGED_ENTRY_FIELDS);
  assert.deepEqual(r3.removedNodes.map((b) => b.node), ["n7"]);
  assert.deepEqual(r3.removedNodes[0]?.selectors.map((s) => s.value).sort(), [`ca:fingerprint:${FP}`, "subject:cn:n7.g1"]);
  assert.equal(spire.entries.get("uuid-foreign")?.revisionNumber, foreign.revisionNumber);
  assert.equal(spire.entries.get("uuid-wl")?.revisionNumber, workload.revisionNumber);
  // a dry run plans and writes nothing
  spire.calls = [];
  const dry = await syncNodeEntries(spire, list([["n1", 1]]), { dryRun: true });
  assert.equal(dry.report.deletes.length, 448);
  assert.ok(dry.report.deletes.every((d) => d.outcome === "dry_run"));
  assert.deepEqual(spire.calls.filter((c) => !c.startsWith("list")), []);
  assert.deepEqual(dry.removedNodes, [], "nothing was removed, nothing to ban");
});

test("create: our own ID already there counts as done (a lost answer); a similar entry of another owner is an item error", async () => {
  const spire = new FakeSpire();
  const b = nodeEntryBackend(spire, { trustDomain: TD });
  const [d] = nodeEntries(list([["a", 1]]));
  assert.ok(d);
  spire.put(d);
  const [r] = await b.create([d]);
  assert.equal(r?.ok, true);
  const other: FakeSpire = Object.assign(new FakeSpire(), {
    batchCreateEntry: async (): Promise<EntryResult[]> => [{ status: { code: 6, codeName: "ALREADY_EXISTS", message: "similar entry already exists" }, entry: { ...fullSpec(d), id: "uuid-x", revisionNumber: 1, createdAt: 1 } }],
  });
  const [r2] = await nodeEntryBackend(other, { trustDomain: TD }).create([d]);
  assert.ok(r2 && !r2.ok && /similar entry uuid-x exists that fleetd does not own/.test(r2.error));
  // delete: NOT_FOUND is done (already gone)
  const [del] = await b.delete([{ ...fullSpec(d), id: "fleetd.node.gone." + FP, revisionNumber: 1, createdAt: 1 }]);
  assert.equal(del?.ok, true);
});

test("bans: agents whose selectors include all of the removed entry's, not banned yet; others untouched", async () => {
  const sel = [{ type: "tpm_devid", value: "subject:cn:a.g1" }, { type: "tpm_devid", value: `ca:fingerprint:${FP}` }];
  const agent = (id: string, selectors: Agent["selectors"], banned = false): Agent => ({ id: `spiffe://${TD}/spire/agent/tpm_devid/${id}`, attestationType: "tpm_devid", x509SvidSerialNumber: "1", x509SvidExpiresAt: 0, selectors, banned, canReattest: true, agentVersion: "1.13.3" });
  const banned: string[] = [];
  let asked: unknown;
  const api: AgentApi = {
    listAgents: async (f) => {
      asked = f;
      // what a server might return: the match plus agents the client must not trust the filter for
      return [agent("match", [...sel, { type: "tpm_devid", value: "issuer:cn:ca" }]), agent("other-cn", [{ type: "tpm_devid", value: "subject:cn:b.g1" }, sel[1] as Agent["selectors"][number]]), agent("old", sel, true)];
    },
    banAgent: async (id) => void banned.push(id),
  };
  const r = await banAgentsOf(api, { node: "a", selectors: sel });
  assert.deepEqual(r, [`spiffe://${TD}/spire/agent/tpm_devid/match`]);
  assert.deepEqual(banned, r);
  assert.deepEqual(asked, { byAttestationType: "tpm_devid", byBanned: false, bySelectors: { selectors: sel, match: "MATCH_SUPERSET" } });
});

const AT = new Date("2026-06-01T00:00:00.000Z");
const cnSel = (cn: string) => ({ type: "tpm_devid", value: `subject:cn:${cn}` });
const fpSel = (fp: string) => ({ type: "tpm_devid", value: `ca:fingerprint:${fp}` });

test("re-attestations: an update that moves a listed node's CN is one; unchanged, created and removed nodes are none", async () => {
  const spire = new FakeSpire();
  await syncNodeEntries(spire, list([["a", 1], ["b", 1], ["c", 1]]));
  const r = await syncNodeEntries(spire, list([["a", 2], ["b", 1], ["d", 1]]), { now: () => AT });
  assert.deepEqual(r.report.updates.map((u) => u.key), [nodeEntryId("a", FP)]);
  assert.deepEqual(r.movedNodes, [{ node: "a", previous: [cnSel("a.g1"), fpSel(FP)], current: [[cnSel("a.g2"), fpSel(FP)]], since: AT.toISOString(), deletions: 0 }]);
  assert.deepEqual(r.removedNodes.map((b) => b.node), ["c"], "a removed node is banned, not re-attested");
  // a dry run writes nothing: no move
  const dry = await syncNodeEntries(spire, list([["a", 3], ["b", 1], ["d", 1]]), { dryRun: true });
  assert.deepEqual(dry.movedNodes, []);
});

test("re-attestations: a root no longer listed (its entry deleted, the node listed under the other root) is one", async () => {
  const spire = new FakeSpire();
  const FP2 = "d".repeat(40);
  const two: NodeList = { ...list([["a", 1]]), caFingerprints: [FP, FP2] };
  await syncNodeEntries(spire, two);
  const r = await syncNodeEntries(spire, { ...list([["a", 1]]), caFingerprints: [FP2] }, { now: () => AT });
  assert.deepEqual(r.removedNodes, [], "the node is listed: no ban");
  assert.deepEqual(r.movedNodes, [{ node: "a", previous: [cnSel("a.g1"), fpSel(FP)], current: [[cnSel("a.g1"), fpSel(FP2)]], since: AT.toISOString(), deletions: 0 }]);
});

test("reattestAgentsOf: deletes the agents with the previous selectors only; never one carrying the current ones, a banned one or another node's", async () => {
  const agent = (id: string, selectors: Agent["selectors"], banned = false): Agent => ({ id: `spiffe://${TD}/spire/agent/tpm_devid/${id}`, attestationType: "tpm_devid", x509SvidSerialNumber: "1", x509SvidExpiresAt: 0, selectors, banned, canReattest: true, agentVersion: "1.13.3" });
  const r: PendingReattest = { node: "a", previous: [cnSel("a.g1"), fpSel(FP)], current: [[cnSel("a.g2"), fpSel(FP)]], since: AT.toISOString(), deletions: 0 };
  let agents: Agent[] = [];
  const deleted: string[] = [];
  const asked: unknown[] = [];
  const api: ReattestApi = {
    // the server's answer is not trusted for the match: everything is returned, the client checks
    listAgents: async (f) => {
      asked.push(f);
      return agents;
    },
    deleteAgent: async (id) => void deleted.push(id),
  };
  agents = [agent("old", [...r.previous, { type: "tpm_devid", value: "issuer:cn:ca" }]), agent("banned", r.previous, true), agent("other", [cnSel("b.g1"), fpSel(FP)]), agent("new", r.current[0] as Agent["selectors"])];
  assert.deepEqual(await reattestAgentsOf(api, r), { deleted: [`spiffe://${TD}/spire/agent/tpm_devid/old`], done: "attested" });
  assert.deepEqual(deleted, [`spiffe://${TD}/spire/agent/tpm_devid/old`]);
  assert.deepEqual(asked[0], { byAttestationType: "tpm_devid", byBanned: false, bySelectors: { selectors: r.previous, match: "MATCH_SUPERSET" } });
  assert.deepEqual(asked[1], { byAttestationType: "tpm_devid", byBanned: false, bySelectors: { selectors: r.current[0], match: "MATCH_SUPERSET" } });
  // an agent carrying both (never the case with one root, but checked) is not deleted
  deleted.length = 0;
  agents = [agent("both", [...r.previous, ...(r.current[0] as Agent["selectors"])])];
  assert.deepEqual(await reattestAgentsOf(api, r), { deleted: [], done: "attested" });
  assert.deepEqual(deleted, []);
  // deleted now, not attested with the current selectors yet: still pending
  agents = [agent("old", r.previous)];
  assert.deepEqual(await reattestAgentsOf(api, r), { deleted: [`spiffe://${TD}/spire/agent/tpm_devid/old`] });
  // none of either: done when nothing was ever deleted for it (no agent to move), pending otherwise
  agents = [];
  assert.deepEqual(await reattestAgentsOf(api, r), { deleted: [], done: "no-agent" });
  assert.deepEqual(await reattestAgentsOf(api, { ...r, deletions: 1 }), { deleted: [] });
});
