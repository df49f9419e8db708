import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Node } from "../fleet/node.js";
import {
  canonicalJson, NodeListError, nodeEntries, nodeEntryId, nodeListDigest, nodeListEligibility, parseNodeEntryId, parseNodeList, renderNodeList,
  serializeNodeList, type EligibilityOptions,
} from "./nodeList.js";
import { spireRemovalConfirmed, SYNC_STATUS_API_VERSION, type SyncStatus } from "./syncStatus.js";

type N = Pick<Node, "name" | "status" | "role" | "ldevid" | "runtime" | "unattributed">;
const NOW = new Date("2026-06-01T00:00:00Z");
const FP = "a".repeat(40);
const FP2 = "b".repeat(40);
const opts: EligibilityOptions = { now: NOW, keepFailedControlPlanes: true };
const node = (name: string, over: Partial<N> = {}): N => ({
  name, status: "active", role: "worker", unattributed: [],
  ldevid: { serial: "01", cn: `${name}.g1`, notAfter: new Date("2026-06-20T00:00:00Z") },
  runtime: { verdict: "pass", at: new Date("2026-05-30T00:00:00Z"), lastPassAt: new Date("2026-05-30T00:00:00Z") },
  ...over,
});
const render = (nodes: N[], o: Partial<EligibilityOptions> = {}, fps = [FP]) => renderNodeList(nodes, { ...opts, ...o, trustDomain: "lab.test", caFingerprints: fps });

test("eligibility: active, current LDevID, a passing runtime verdict; failed workers quarantined; failed control planes per the site setting", () => {
  const failAt = new Date("2026-05-31T00:00:00Z");
  const cases: [string, N, boolean, EligibilityOptions?][] = [
    ["eligible", node("a"), true],
    ["planned", node("a", { status: "planned" }), false],
    ["decommissioning", node("a", { status: "decommissioning" }), false],
    ["offline", node("a", { status: "offline" }), false],
    ["no LDevID", node("a", { ldevid: undefined }), false],
    ["expired LDevID", node("a", { ldevid: { serial: "1", cn: "a.g1", notAfter: NOW } }), false],
    ["HookOS verdict only (no runtime)", node("a", { runtime: undefined }), false],
    ["quarantined worker", node("a", { runtime: { verdict: "fail", at: failAt, lastPassAt: failAt } }), false],
    ["failed control plane that passed once, kept", node("a", { role: "control-plane", runtime: { verdict: "fail", at: failAt, lastPassAt: new Date("2026-05-01T00:00:00Z") } }), true],
    ["failed control plane that never passed", node("a", { role: "control-plane", runtime: { verdict: "fail", at: failAt } }), false],
    ["failed control plane, site does not keep them", node("a", { role: "control-plane", runtime: { verdict: "fail", at: failAt, lastPassAt: failAt } }), false, { now: NOW, keepFailedControlPlanes: false }],
    ["renamed by someone else", node("a", { unattributed: [{ field: "name", code: "name-unattributed", reason: "x" }] }), false],
    ["another node's CN", node("a", { ldevid: { serial: "1", cn: "b.g1", notAfter: new Date("2027-01-01T00:00:00Z") } }), false],
    ["a LAK CN", node("a", { ldevid: { serial: "1", cn: "a.g1.lak", notAfter: new Date("2027-01-01T00:00:00Z") } }), false],
    ["CN unusable as a selector", node("a", { ldevid: { serial: "1", cn: "a b", notAfter: new Date("2027-01-01T00:00:00Z") } }), false],
  ];
  for (const [what, n, want, o] of cases) {
    const e = nodeListEligibility(n, o ?? opts);
    assert.equal(e.eligible, want, `${what}: ${JSON.stringify(e)}`);
    if (!e.eligible) assert.ok(e.why.length > 0);
  }
});

test("rendering: sorted by name, canonical bytes independent of input order, digest stable; two devices of one name: neither", () => {
  const a = render([node("c"), node("a"), node("b", { status: "offline" })]);
  const b = render([node("a"), node("c"), node("b", { status: "offline" })]);
  assert.deepEqual(a.list.nodes.map((n) => n.name), ["a", "c"]);
  assert.equal(serializeNodeList(a.list), serializeNodeList(b.list));
  assert.equal(nodeListDigest(a.list), nodeListDigest(b.list));
  assert.match(nodeListDigest(a.list), /^sha256:[0-9a-f]{64}$/);
  assert.deepEqual(a.excluded, [{ name: "b", why: "status offline" }]);
  assert.equal(a.list.nodes[0]?.spiffeId, "spiffe://lab.test/node/a");
  assert.equal(a.list.nodes[0]?.cn, "a.g1");
  const dup = render([node("a"), node("a", { ldevid: { serial: "2", cn: "a.g2", notAfter: new Date("2026-07-01T00:00:00Z") } })]);
  assert.deepEqual(dup.list.nodes, []);
  assert.deepEqual(dup.excluded.map((x) => x.why), ["two devices have this name"]);
  // a change of one node changes the digest
  const c = render([node("a"), node("c", { ldevid: { serial: "2", cn: "c.g2", notAfter: new Date("2026-07-01T00:00:00Z") } })]);
  assert.notEqual(nodeListDigest(c.list), nodeListDigest(a.list));
  assert.equal(canonicalJson({ b: 1, a: [{ d: 1, c: 2 }] }), '{"a":[{"c":2,"d":1}],"b":1}\n');
});

test("parsing: size before JSON, JSON, schema (order, SPIFFE ID, fingerprints), trust domain", () => {
  const { list } = render([node("a"), node("b")]);
  const text = serializeNodeList(list);
  assert.deepEqual(parseNodeList(text, "lab.test"), list);
  const refuse = (bytes: string, code: string, td = "lab.test", max?: number) =>
    assert.throws(() => parseNodeList(bytes, td, max), (e: unknown) => e instanceof NodeListError && e.code === code, code);
  refuse(text, "node-list-too-large", "lab.test", text.length - 1);
  refuse("{", "node-list-not-json");
  refuse(text, "node-list-wrong-trust-domain", "other.test");
  refuse(JSON.stringify({ ...list, nodes: [...list.nodes].reverse() }), "node-list-invalid");
  refuse(JSON.stringify({ ...list, nodes: [list.nodes[0], list.nodes[0]] }), "node-list-invalid");
  refuse(JSON.stringify({ ...list, nodes: list.nodes.map((n) => ({ ...n, spiffeId: "spiffe://lab.test/node/x" })) }), "node-list-invalid");
  refuse(JSON.stringify({ ...list, caFingerprints: [] }), "node-list-invalid");
  refuse(JSON.stringify({ ...list, caFingerprints: ["A".repeat(40)] }), "node-list-invalid");
  refuse(JSON.stringify({ ...list, extra: 1 }), "node-list-invalid");
  refuse(JSON.stringify({ ...list, nodes: list.nodes.map((n) => ({ ...n, cn: "a:b" })) }), "node-list-invalid");
  // a node pointed at another node's (or no node's) LDevID
  for (const cn of ["b.g1", "a.g0", "a.g01", "a.g", "a.g1.lak", "ab.g1", "a.g1x"]) {
    refuse(JSON.stringify({ ...list, nodes: [{ ...list.nodes[0], cn }, list.nodes[1]] }), "node-list-invalid");
  }
  // the reader's trusted roots (spire-server's devid_ca_path)
  assert.deepEqual(parseNodeList(text, "lab.test", undefined, [FP2, FP]), list);
  assert.throws(() => parseNodeList(text, "lab.test", undefined, [FP2]), (e: unknown) => e instanceof NodeListError && e.code === "node-list-unknown-root" && e.message.includes(FP));
});

test("entries: one per node and root (a CA rollover gives two per node), deterministic IDs, parent the server, CN + fingerprint selectors", () => {
  const { list } = render([node("a"), node("b")], {}, [FP2, FP]);
  const e = nodeEntries(list);
  assert.deepEqual(e.map((x) => x.id), [nodeEntryId("a", FP), nodeEntryId("a", FP2), nodeEntryId("b", FP), nodeEntryId("b", FP2)]);
  assert.deepEqual(e[0], {
    id: `fleetd.node.a.${FP}`,
    spiffeId: "spiffe://lab.test/node/a",
    parentId: "spiffe://lab.test/spire/server",
    selectors: [{ type: "tpm_devid", value: "subject:cn:a.g1" }, { type: "tpm_devid", value: `ca:fingerprint:${FP}` }],
  });
  assert.deepEqual(parseNodeEntryId(`fleetd.node.a.${FP}`), { name: "a", caFingerprint: FP });
  for (const foreign of ["a", "fleetd.node.a", `fleetd.node.A.${FP}`, `other.node.a.${FP}`, `fleetd.node.a.${FP}x`, "9e1c0b4e-uuid"]) assert.equal(parseNodeEntryId(foreign), undefined, foreign);
});

test("retirement's confirmation: the current list applied, the node absent, converged, no ban pending", () => {
  const { list } = render([node("a")]);
  const base: SyncStatus = { apiVersion: SYNC_STATUS_API_VERSION, listDigest: nodeListDigest(list), at: NOW.toISOString(), converged: true, entries: 1, pendingBans: [], bans: [{ node: "b", agents: ["spiffe://lab.test/spire/agent/tpm_devid/x"], at: NOW.toISOString() }] };
  const ok = spireRemovalConfirmed(base, list, "b");
  assert.ok(ok.confirmed && /agents banned: spiffe/.test(ok.detail));
  assert.equal(spireRemovalConfirmed(base, list, "a").confirmed, false, "still listed");
  assert.equal(spireRemovalConfirmed(undefined, list, "b").confirmed, false, "no status");
  assert.equal(spireRemovalConfirmed({ ...base, listDigest: `sha256:${"0".repeat(64)}` }, list, "b").confirmed, false, "another list applied");
  assert.equal(spireRemovalConfirmed({ ...base, pendingBans: [{ node: "b", selectors: [] }] }, list, "b").confirmed, false, "ban pending");
  assert.equal(spireRemovalConfirmed({ ...base, converged: false }, list, "b").confirmed, false, "not converged");
});
