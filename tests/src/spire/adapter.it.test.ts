/**
 * fleetd's SPIRE adapter (shared/platform/src/spire) against a real spire-server v1.13.3 (the shipped server.conf, SQLite,
 * the admin API on its Unix socket): paging, filters, every batch item status SPIRE gives, the update's input
 * mask, refusals before any RPC, and a stopped server as an outage — not a refusal — that ends when it is back.
 * No agent here (tpm_devid needs the CA files only: a throw-away CA stands in for both).
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { outageOf } from "@fleetd/platform/outage";
import { SpireApiError, type RpcOutcome, type SpireServerClient, serverId, type EntrySpec } from "@fleetd/platform/spire";
import { makeCa } from "@fleetd/testkit/pki";
import { pollValue } from "../harness/ports.js";
import { startSpireServer, type SpireServer } from "../harness/spire.js";

let dir: string;
let server: SpireServer;
let spire: SpireServerClient;
const rpcs: { rpc: string; outcome: RpcOutcome }[] = [];
const calls = (rpc: string) => rpcs.filter((r) => r.rpc === rpc).length;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-spire-adapter-"));
  await makeCa(dir, "ca", "adapter test CA");
  server = await startSpireServer({ devidCaPath: join(dir, "ca.crt"), endorsementCaPath: join(dir, "ca.crt") });
  spire = server.client({ onRpc: (rpc, outcome) => rpcs.push({ rpc, outcome }) });
}, { timeout: 5 * 60_000 });

after(async () => {
  spire?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const td = () => server.trustDomain;
const node = (name: string, cn = `${name}.g1`, extra: Partial<EntrySpec> = {}): EntrySpec => ({
  spiffeId: `spiffe://${td()}/node/${name}`,
  parentId: serverId(td()),
  selectors: [{ type: "tpm_devid", value: `subject:cn:${cn}` }],
  ...extra,
});

test("health on the admin socket", async () => {
  assert.equal(await spire.health(), "SERVING");
});

test("paging: every entry once over pages of the asked size, until SPIRE's token is empty; filters by parent, SPIFFE ID, selectors, hint", async () => {
  const n = 23;
  const made = await spire.batchCreateEntry(Array.from({ length: n }, (_, i) => node(`page-${String(i).padStart(2, "0")}`, undefined, { hint: "paging" })));
  assert.ok(made.every((r) => r.status.codeName === "OK"), JSON.stringify(made.filter((r) => r.status.code !== 0)));
  const before = calls("Entry/ListEntries");
  const pages: number[] = [];
  for await (const page of spire.entryPages({ byHint: "paging" }, 5)) pages.push(page.length);
  assert.deepEqual(pages, [5, 5, 5, 5, 3]);
  // SPIRE returns a token after every non-empty page: the sixth call answers an empty page and no token.
  assert.equal(calls("Entry/ListEntries") - before, 6);
  const all = await spire.listEntries({ byParentId: serverId(td()) }, 7);
  assert.deepEqual(all.filter((e) => e.hint === "paging").map((e) => e.spiffeId).sort(), made.map((r) => r.entry?.spiffeId).sort());
  assert.equal(new Set(all.map((e) => e.id)).size, all.length, "no entry twice");
  assert.equal(await spire.countEntries({ byHint: "paging" }), n);
  const one = await spire.listEntries({ bySpiffeId: `spiffe://${td()}/node/page-07` });
  assert.deepEqual(one.map((e) => e.selectors), [[{ type: "tpm_devid", value: "subject:cn:page-07.g1" }]]);
  const bySel = await spire.listEntries({ bySelectors: { selectors: [{ type: "tpm_devid", value: "subject:cn:page-11.g1" }], match: "MATCH_EXACT" } });
  assert.deepEqual(bySel.map((e) => e.spiffeId), [`spiffe://${td()}/node/page-11`]);
  const deleted = await spire.batchDeleteEntry(made.map((r) => r.entry?.id as string));
  assert.ok(deleted.every((d) => d.status.codeName === "OK"));
  assert.equal(await spire.countEntries({ byHint: "paging" }), 0);
});

test("BatchCreateEntry: one status per item in request order — OK, ALREADY_EXISTS (similar: with the existing entry; same ID: without), INVALID_ARGUMENT", async () => {
  const r = await spire.batchCreateEntry([
    node("create-a", undefined, { id: "fleetd.node.create-a" }),
    // similar = same SPIFFE ID, parent and selector set (SPIRE's lookupSimilarEntry), whatever the ID
    node("create-a", undefined, { id: "fleetd.node.create-a-again" }),
    // a reserved path: SPIRE refuses /spire/... as an entry's SPIFFE ID
    { ...node("create-b"), spiffeId: `spiffe://${td()}/spire/agent/x` },
    // another trust domain
    { ...node("create-c"), spiffeId: "spiffe://other.test/node/create-c" },
    node("create-d", undefined, { id: "fleetd.node.create-d" }),
  ]);
  assert.deepEqual(
    r.map((x) => x.status.codeName),
    ["OK", "ALREADY_EXISTS", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "OK"],
    JSON.stringify(r.map((x) => x.status)),
  );
  assert.equal(r[0]?.entry?.id, "fleetd.node.create-a");
  assert.equal(r[1]?.entry?.id, "fleetd.node.create-a", "ALREADY_EXISTS returns the similar entry that exists");
  assert.match(r[1]?.status.message ?? "", /similar entry already exists/);
  assert.equal(r[2]?.entry, undefined);
  // the same client-chosen ID for a different entry: the datastore's unique index refuses it
  const dup = await spire.batchCreateEntry([node("create-e", undefined, { id: "fleetd.node.create-d" })]);
  assert.equal(dup[0]?.status.codeName, "ALREADY_EXISTS", JSON.stringify(dup));
  assert.equal(dup[0]?.entry, undefined);
  assert.equal((await spire.listEntries({ bySpiffeId: `spiffe://${td()}/node/create-e` })).length, 0);
});

test("BatchUpdateEntry writes exactly the masked fields (revision bumped); NOT_FOUND per unknown ID; BatchDeleteEntry likewise", async () => {
  const [created] = await spire.batchCreateEntry([node("update-a", undefined, { id: "fleetd.node.update-a", hint: "before", x509SvidTtl: 600 })]);
  const old = created?.entry;
  assert.ok(old);
  const r = await spire.batchUpdateEntry(
    [
      // selectors and TTL given but not in the mask: not written
      { ...node("update-a", "update-a.g2", { hint: "after", x509SvidTtl: 900 }), id: "fleetd.node.update-a" },
      { ...node("update-x"), id: "fleetd.node.missing" },
    ],
    ["hint"],
  );
  assert.deepEqual(r.map((x) => x.status.codeName), ["OK", "NOT_FOUND"], JSON.stringify(r));
  const [now] = await spire.listEntries({ bySpiffeId: `spiffe://${td()}/node/update-a` });
  assert.equal(now?.hint, "after");
  assert.deepEqual(now?.selectors, old.selectors, "selectors are not in the mask");
  assert.equal(now?.x509SvidTtl, 600, "the TTL is not in the mask");
  assert.ok((now?.revisionNumber ?? 0) > old.revisionNumber, "SPIRE bumps the revision");

  const sel = await spire.batchUpdateEntry([{ ...node("update-a", "update-a.g2"), id: "fleetd.node.update-a" }], ["selectors"]);
  assert.equal(sel[0]?.status.codeName, "OK");
  assert.deepEqual(sel[0]?.entry?.selectors, [{ type: "tpm_devid", value: "subject:cn:update-a.g2" }]);
  assert.equal(sel[0]?.entry?.hint, "after");

  const d = await spire.batchDeleteEntry(["fleetd.node.update-a", "fleetd.node.missing", "fleetd.node.update-a"]);
  assert.deepEqual(d.map((x) => [x.id, x.status.codeName]), [["fleetd.node.update-a", "OK"], ["fleetd.node.missing", "NOT_FOUND"], ["fleetd.node.update-a", "NOT_FOUND"]]);
});

test("bad input is refused before any RPC and changes nothing; SPIRE's own refusals are refusals, not outages", async () => {
  const count = rpcs.length;
  const bad: [Promise<unknown>, RegExp][] = [
    [spire.batchCreateEntry([node("ok-1"), { ...node("bad"), selectors: [] }]), /entry 1: an entry needs at least one selector/],
    [spire.batchCreateEntry([{ ...node("bad"), parentId: "spiffe://Bad/x" }]), /parentId/],
    [spire.batchUpdateEntry([{ ...node("bad"), id: "x" }], []), /must name the fields/],
    [spire.batchDeleteEntry(["a", ""]), /empty entry ID/],
    [spire.listEntries({}, 0), /page size/],
  ];
  for (const [p, why] of bad) await assert.rejects(p, (e: unknown) => e instanceof SpireApiError && e.code === "spire-bad-request" && why.test(e.message) && outageOf(e) === undefined);
  assert.equal(rpcs.length, count, "no RPC was made");
  assert.equal((await spire.listEntries({ bySpiffeId: `spiffe://${td()}/node/ok-1` })).length, 0, "the good entry of a refused batch was not created");
  // SPIRE refuses a reserved SPIFFE ID as a filter: an RPC-level INVALID_ARGUMENT
  await assert.rejects(spire.listEntries({ bySpiffeId: `spiffe://${td()}/spire/server` }), (e: unknown) => e instanceof SpireApiError && e.code === "spire-refused" && e.grpcCode === 3 && outageOf(e) === undefined);
});

test("a stopped server is an outage (spire-unavailable) for every RPC, and the same client works again once it is back, data kept", async () => {
  await spire.batchCreateEntry([node("outage-a", undefined, { id: "fleetd.node.outage-a" })]);
  await server.halt();
  const down: Promise<unknown>[] = [spire.listEntries(), spire.countEntries(), spire.batchCreateEntry([node("outage-b")]), spire.batchDeleteEntry(["fleetd.node.outage-a"]), spire.banAgent(`spiffe://${td()}/spire/agent/x/y`), spire.health()];
  for (const p of down) {
    await assert.rejects(p, (e: unknown) => {
      const o = outageOf(e);
      return e instanceof SpireApiError && e.code === "spire-unavailable" && o?.reason === "spire-unavailable" && /SPIRE did not answer/.test(o.detail);
    });
  }
  assert.ok(rpcs.slice(-down.length).every((r) => r.outcome === "unavailable"));
  await server.start();
  const back = await pollValue("the adapter to reach the restarted server", async () => {
    try {
      return await spire.listEntries({ bySpiffeId: `spiffe://${td()}/node/outage-a` });
    } catch (e) {
      if (outageOf(e)) return undefined; // still coming back
      throw e;
    }
  }, { timeoutMs: 60_000, intervalMs: 200 });
  assert.deepEqual(back.map((e) => e.id), ["fleetd.node.outage-a"], "the entry made before the stop is there; the create during the stop is not");
  assert.equal((await spire.listEntries({ bySpiffeId: `spiffe://${td()}/node/outage-b` })).length, 0);
});
