/**
 * spire-plugin's entry sync against a real spire-server v1.13.3 (the shipped server.conf, SQLite, admin socket):
 * the service started through its own assembly (`startSpirePlugin`) with the list and status in files, passes
 * triggered by the file watch (the interval is an hour here, so nothing else runs them):
 *  - N nodes → exactly N entries; a second pass makes zero write RPCs;
 *  - a renewed LDevID (new CN) is one BatchUpdateEntry of the same entry ID;
 *  - a node leaving the list loses exactly its entry; the status confirms it (retirement's check);
 *  - foreign entries (another owner's alias, a join-token alias, a workload entry parented to a node entry, an
 *    entry of the same SPIFFE ID under another ID) are never written;
 *  - a malformed, oversized, invalid or wrong-trust-domain list changes nothing and is reported (metric, readyz);
 *  - a dry run writes nothing and prints the plan;
 *  - SPIRE stopped: passes fail as outages with backoff; restarted: the loop converges without a trigger.
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { createHash, X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { outageOf } from "@fleetd/platform/outage";
import {
  nodeEntryId, nodeListDigest, parseSyncStatus, rootFingerprints, serverId, spireRemovalConfirmed, type Entry, type NodeList,
  type RpcOutcome, type SpireServerClient,
} from "@fleetd/platform/spire";
import { parseSpirePluginConfig, startSpirePlugin, dryRun, type SpirePlugin, type SpirePluginConfig, type PassResult } from "@fleetd/spire-plugin";
import { makeCa } from "@fleetd/testkit/pki";
import { pollValue } from "../harness/ports.js";
import { startSpireServer, type SpireServer } from "../harness/spire.js";
import { eligibleNode, listBytes, listOf, nodeNames, type ListNode } from "./listFixture.js";
import pino from "pino";
import { repoRoot } from "../netbox/fixture.js";

const N = 25;
const WRITES = new Set(["Entry/BatchCreateEntry", "Entry/BatchUpdateEntry", "Entry/BatchDeleteEntry", "Agent/BanAgent"]);

let dir: string;
let server: SpireServer;
let spire: SpireServerClient;
let plugin: SpirePlugin;
let cfg: SpirePluginConfig;
let root: string;
const rpcs: { rpc: string; outcome: RpcOutcome }[] = [];
const writes = () => rpcs.filter((r) => WRITES.has(r.rpc));
let nodes: ListNode[];
let current: NodeList;
const foreign: Entry[] = [];

const td = () => server.trustDomain;
const listFile = () => join(dir, "lists", "spire-nodes.json");
const statusFile = () => join(dir, "status", "spire-sync-status.json");

/** Publish a list the way netbox-script does (temp + rename) and wait for the pass the watch triggers. */
async function publish(list: NodeList | Buffer | string): Promise<PassResult> {
  const next = plugin.sync.nextPass();
  const tmp = `${listFile()}.tmp`;
  writeFileSync(tmp, Buffer.isBuffer(list) || typeof list === "string" ? list : listBytes(list));
  renameSync(tmp, listFile());
  if (!Buffer.isBuffer(list) && typeof list !== "string") current = list;
  return next;
}

const ours = async () => (await spire.listEntries({ byParentId: serverId(td()) })).filter((e) => e.id.startsWith("fleetd.node."));
const status = () => parseSyncStatus(readFileSync(statusFile()));

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-spire-sync-"));
  await makeCa(dir, "ca", "sync test CA");
  const caDer = new X509Certificate(readFileSync(join(dir, "ca.crt"))).raw;
  root = rootFingerprints([caDer])[0] as string;
  assert.equal(root, createHash("sha1").update(caDer).digest("hex"));
  server = await startSpireServer({ devidCaPath: join(dir, "ca.crt"), endorsementCaPath: join(dir, "ca.crt") });
  spire = server.client();
  // Foreign entries, made before fleetd's sync ever runs.
  const made = await spire.batchCreateEntry([
    // another owner's node alias
    { id: "other-owner.node-a", spiffeId: `spiffe://${td()}/node/other-a`, parentId: serverId(td()), selectors: [{ type: "tpm_devid", value: "subject:cn:other-a.g1" }] },
    // a join-token alias (what `spire-server entry create -node -selector spiffe_id:…join_token…` makes)
    { spiffeId: `spiffe://${td()}/node/jt-host`, parentId: serverId(td()), selectors: [{ type: "spiffe_id", value: `spiffe://${td()}/spire/agent/join_token/abc123` }] },
    // a workload entry parented to a node fleetd will declare
    { spiffeId: `spiffe://${td()}/workload/web`, parentId: `spiffe://${td()}/node/node-00001`, selectors: [{ type: "unix", value: "uid:1000" }] },
    // an alias of one of fleetd's node IDs under someone else's entry ID and selectors
    { id: "ops.manual.node-00002", spiffeId: `spiffe://${td()}/node/node-00002`, parentId: serverId(td()), selectors: [{ type: "tpm_devid", value: "subject:cn:manual" }] },
  ]);
  for (const r of made) {
    assert.equal(r.status.codeName, "OK", JSON.stringify(r.status));
    foreign.push(r.entry as Entry);
  }
  cfg = parseSpirePluginConfig({
    trustDomain: td(),
    devidCaPath: join(dir, "ca.crt"),
    socketPath: server.socketPath,
    list: { file: listFile() },
    status: { file: statusFile() },
    intervalSeconds: 3600,
    maxListBytes: 64 * 1024,
    listen: { host: "127.0.0.1", port: 0 },
  });
  plugin = await startSpirePlugin(cfg, { logger: pino({ level: "silent" }), onRpc: (rpc, outcome) => rpcs.push({ rpc, outcome }) });
}, { timeout: 5 * 60_000 });

after(async () => {
  await plugin?.stop();
  spire?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function foreignUntouched(): Promise<void> {
  for (const f of foreign) {
    const [now] = await spire.listEntries({ bySpiffeId: f.spiffeId, byParentId: f.parentId, bySelectors: { selectors: f.selectors, match: "MATCH_EXACT" } });
    assert.ok(now, `foreign entry ${f.id} (${f.spiffeId}) still exists`);
    assert.equal(now.id, f.id);
    assert.equal(now.revisionNumber, f.revisionNumber, `foreign entry ${f.id} was not written`);
  }
}

test("no list yet: nothing written, readyz names the missing list", async () => {
  const r = await plugin.sync.pass(false);
  assert.equal(r.outcome, "no-list");
  assert.equal(writes().length, 0);
  const ready = await plugin.ready();
  assert.equal(ready.checks["list"]?.ok, false);
});

test(`sync of ${N} nodes creates exactly ${N} entries; a second pass makes zero write RPCs; foreign entries untouched`, async () => {
  nodes = nodeNames(N).map((n) => eligibleNode(n));
  const r = await publish(listOf(td(), [root], nodes));
  assert.equal(r.outcome, "converged", JSON.stringify(r));
  assert.equal(r.creates, N);
  const mine = await ours();
  assert.equal(mine.length, N);
  assert.deepEqual(mine.map((e) => e.id).sort(), nodes.map((n) => nodeEntryId(n.name, root)).sort());
  const e1 = mine.find((e) => e.id === nodeEntryId("node-00001", root));
  assert.deepEqual(e1?.selectors.map((s) => `${s.type}:${s.value}`).sort(), [`tpm_devid:ca:fingerprint:${root}`, "tpm_devid:subject:cn:node-00001.g1"]);
  assert.equal(e1?.spiffeId, `spiffe://${td()}/node/node-00001`);
  assert.equal(writes().filter((w) => w.rpc === "Entry/BatchCreateEntry").length, 1, "25 entries are one batch");
  await foreignUntouched();
  assert.equal(status().listDigest, nodeListDigest(current));
  assert.equal(status().converged, true);

  const before = writes().length;
  const again = await plugin.sync.pass(false);
  assert.equal(again.outcome, "converged");
  assert.equal(again.unchanged, N);
  assert.equal(writes().length - before, 0, "a second pass makes no write RPC");
  const metrics = await plugin.metrics.registry.metrics();
  assert.match(metrics, /fleetd_spire_plugin_writes_total\{kind="spire.entry",op="create",result="ok"\} 25/);
});

test("a renewed LDevID (next generation CN) is one update of the same entry ID", async () => {
  nodes = nodes.map((n) => (n.name === "node-00003" ? eligibleNode(n.name, 2) : n));
  const before = writes().length;
  const r = await publish(listOf(td(), [root], nodes));
  assert.equal(r.outcome, "converged");
  assert.deepEqual([r.creates, r.updates, r.deletes], [0, 1, 0]);
  assert.deepEqual(writes().slice(before).map((w) => w.rpc), ["Entry/BatchUpdateEntry"]);
  const [e] = await spire.listEntries({ bySpiffeId: `spiffe://${td()}/node/node-00003` });
  assert.equal(e?.id, nodeEntryId("node-00003", root));
  assert.ok(e?.selectors.some((s) => s.value === "subject:cn:node-00003.g2"));
  assert.ok(!e?.selectors.some((s) => s.value === "subject:cn:node-00003.g1"), "the old generation's CN no longer matches");
});

test("a node that leaves the list loses exactly its entry; the status confirms it; foreign entries untouched", async () => {
  const gone = "node-00001";
  const t0 = Date.now();
  nodes = nodes.filter((n) => n.name !== gone);
  const r = await publish(listOf(td(), [root], nodes));
  const ms = Date.now() - t0;
  assert.equal(r.outcome, "converged", JSON.stringify(r));
  assert.deepEqual([r.creates, r.updates, r.deletes], [0, 0, 1]);
  const mine = await ours();
  assert.equal(mine.length, N - 1);
  assert.ok(!mine.some((e) => e.id === nodeEntryId(gone, root)));
  process.stdout.write(`# one node left the list: its entry removed ${ms} ms after the list changed\n`);
  const s = status();
  assert.deepEqual(s.pendingBans, []);
  assert.deepEqual(s.bans.map((b) => [b.node, b.agents]), [[gone, []]], "the ban ran (no agent of it was attested here)");
  const check = spireRemovalConfirmed(s, current, gone);
  assert.equal(check.confirmed, true, JSON.stringify(check));
  const stillListed = spireRemovalConfirmed(s, current, "node-00002");
  assert.equal(stillListed.confirmed, false);
  await foreignUntouched();
});

test("bad lists change nothing and are reported: malformed, oversized, invalid, wrong trust domain, another node's CN, an untrusted root", async () => {
  const before = writes().length;
  const entriesBefore = (await ours()).map((e) => `${e.id}@${e.revisionNumber}`).sort();
  const good = listOf(td(), [root], nodes.slice(0, 3));
  const cases: [string, Buffer | string][] = [
    ["node-list-not-json", "{ not json"],
    ["node-list-too-large", Buffer.alloc(65 * 1024, 0x20)],
    ["node-list-invalid", JSON.stringify({ ...good, nodes: [...good.nodes].reverse() })],
    ["node-list-invalid", JSON.stringify({ ...good, nodes: good.nodes.map((n) => ({ ...n, spiffeId: `spiffe://${td()}/node/someone-else` })) })],
    ["node-list-invalid", JSON.stringify({ ...good, apiVersion: "fleetd.io/spire-nodes/v0" })],
    ["node-list-wrong-trust-domain", listBytes(listOf("other.test", [root], nodes.slice(0, 3)))],
    // whoever can write the list cannot point a node at another node's LDevID, nor name a root SPIRE does not trust
    ["node-list-invalid", JSON.stringify({ ...good, nodes: good.nodes.map((n, i) => ({ ...n, cn: `${(good.nodes[(i + 1) % good.nodes.length] as { name: string }).name}.g1` })) })],
    ["node-list-unknown-root", listBytes(listOf(td(), [root, "f".repeat(40)], nodes.slice(0, 3)))],
  ];
  for (const [code, bytes] of cases) {
    const r = await publish(bytes);
    assert.equal(r.outcome, "list-refused", `${code}: ${JSON.stringify(r)}`);
    const ready = await plugin.ready();
    const list = ready.checks["list"];
    assert.ok(list && !list.ok && list.detail.startsWith(code), `${code}: readyz ${JSON.stringify(list)}`);
    assert.equal(ready.ready, false);
    assert.equal(status().converged, false);
    assert.match(status().error ?? "", new RegExp(code));
  }
  assert.equal(writes().length - before, 0, "no write RPC for a refused list");
  assert.deepEqual((await ours()).map((e) => `${e.id}@${e.revisionNumber}`).sort(), entriesBefore);
  const m = await plugin.metrics.registry.metrics();
  assert.match(m, /fleetd_spire_plugin_list_refusals_total\{code="node-list-invalid"\} 4/);
  assert.match(m, /fleetd_spire_plugin_list_refusals_total\{code="node-list-too-large"\} 1/);
  assert.match(m, /fleetd_spire_plugin_list_refusals_total\{code="node-list-unknown-root"\} 1/);
  // the good list again: converged, nothing to write (it is the one applied before)
  const back = await publish(current);
  assert.equal(back.outcome, "converged");
  assert.equal(writes().length - before, 0);
  assert.equal((await plugin.ready()).checks["list"]?.ok, true);
});

test("dry run: the plan is computed against the real server, nothing is written", async () => {
  const plan = listOf(td(), [root], [...nodes.filter((n) => n.name !== "node-00004"), eligibleNode("node-new")].sort((a, b) => (a.name < b.name ? -1 : 1)));
  // write the list without waking the running loop's pass into the count: stop the loop first
  await plugin.sync.stop();
  writeFileSync(listFile(), listBytes(plan));
  const before = rpcs.length;
  const statusBefore = readFileSync(statusFile(), "utf8");
  const seen: string[] = [];
  const r = await dryRun(cfg, { logger: pino({ level: "silent" }), onRpc: (rpc) => seen.push(rpc) });
  assert.equal(r.outcome, "dry-run");
  assert.deepEqual(r.plan, { create: [nodeEntryId("node-new", root)], update: [], delete: [nodeEntryId("node-00004", root)], ban: ["node-00004"], reattest: [] });
  assert.ok(seen.every((x) => !WRITES.has(x)), `only reads: ${seen.join(", ")}`);
  assert.equal(rpcs.length, before);
  assert.equal(readFileSync(statusFile(), "utf8"), statusBefore, "the status is not written");
  assert.ok((await ours()).some((e) => e.id === nodeEntryId("node-00004", root)));
  // The binary: `spire-plugin --config FILE --dry-run` prints the same plan and exits 0; nothing changes.
  const revisions = (await ours()).map((e) => `${e.id}@${e.revisionNumber}`).sort();
  const cfgFile = join(dir, "spire-plugin.json");
  writeFileSync(cfgFile, JSON.stringify({ trustDomain: td(), devidCaPath: join(dir, "ca.crt"), socketPath: server.socketPath, list: { file: listFile() }, status: { file: statusFile() }, listen: { host: "127.0.0.1", port: 0 } }));
  const bin = spawnSync(process.execPath, [join(repoRoot, "spire-plugin/dist/main.js"), "--config", cfgFile, "--dry-run"], { encoding: "utf8", env: { ...process.env, FLEETD_LOG_LEVEL: "silent" }, timeout: 60_000 });
  assert.equal(bin.status, 0, bin.stderr);
  assert.deepEqual((JSON.parse(bin.stdout) as PassResult).plan, r.plan);
  assert.deepEqual((await ours()).map((e) => `${e.id}@${e.revisionNumber}`).sort(), revisions, "the binary's dry run wrote no entry");
  assert.equal(readFileSync(statusFile(), "utf8"), statusBefore, "nor the status");
  // back to the applied list, loop running again
  writeFileSync(listFile(), listBytes(current));
  const next = plugin.sync.nextPass();
  await plugin.sync.start();
  assert.equal((await next).outcome, "converged");
});

test("SPIRE stopped: passes are outages (nothing lost, readyz says so); restarted: the loop converges by itself", async () => {
  await server.halt();
  nodes = [...nodes, eligibleNode("node-late")].sort((a, b) => (a.name < b.name ? -1 : 1));
  const r = await publish(listOf(td(), [root], nodes));
  assert.equal(r.outcome, "spire-unavailable", JSON.stringify(r));
  // readyz's SPIRE probe is cached for 2 s
  const spireCheck = await pollValue("readyz to report SPIRE down", async () => {
    const c = (await plugin.ready()).checks["spire"];
    return c && !c.ok ? c : undefined;
  }, { timeoutMs: 10_000, intervalMs: 250 });
  assert.ok(outageOf(new Error(spireCheck.detail)) === undefined && spireCheck.detail.length > 0);
  assert.equal(status().converged, false);
  // a second failed pass comes on its own (backoff), without a trigger
  const second = await plugin.sync.nextPass();
  assert.equal(second.outcome, "spire-unavailable");
  await server.start();
  const done = await pollValue("the loop to converge after SPIRE is back", async () => {
    const p = await plugin.sync.nextPass();
    return p.outcome === "converged" ? p : undefined;
  }, { timeoutMs: 90_000, intervalMs: 0 });
  assert.equal(done.creates, 1);
  assert.ok((await ours()).some((e) => e.id === nodeEntryId("node-late", root)));
  assert.equal(status().listDigest, nodeListDigest(current));
  assert.equal(status().converged, true);
  await foreignUntouched();
});
