/** The quarantine cordon over a fake Node API: fleetd lifts only what its own label and annotation say it set. */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type * as k8s from "@kubernetes/client-node";
import { outageOf } from "../outage/outage.js";
import { QUARANTINE_LABEL, QUARANTINE_TAINT } from "../fleet/ownership.js";
import { KubeNodeQuarantine } from "./quarantine.js";

function fakeCore(nodes: Map<string, k8s.V1Node>, o: { conflicts?: number; fail?: number } = {}) {
  let rv = 1;
  let conflicts = o.conflicts ?? 0;
  const core = {
    async readNode({ name }: { name: string }) {
      if (o.fail) throw Object.assign(new Error("down"), { code: o.fail });
      const n = nodes.get(name);
      if (!n) throw Object.assign(new Error("not found"), { code: 404 });
      return structuredClone(n);
    },
    async replaceNode({ name, body }: { name: string; body: k8s.V1Node }) {
      const cur = nodes.get(name);
      if (!cur) throw Object.assign(new Error("not found"), { code: 404 });
      if (conflicts-- > 0 || body.metadata?.resourceVersion !== cur.metadata?.resourceVersion) throw Object.assign(new Error("conflict"), { code: 409 });
      nodes.set(name, { ...structuredClone(body), metadata: { ...body.metadata, resourceVersion: String(++rv) } });
      return body;
    },
  };
  return core as unknown as k8s.CoreV1Api;
}
const node = (name: string, spec: k8s.V1NodeSpec = {}): k8s.V1Node => ({ metadata: { name, resourceVersion: "1", labels: { "kubernetes.io/hostname": name } }, spec });

test("cordon sets fleetd's taint, unschedulable and label, keeps the operator's taints; uncordon takes back exactly those", async () => {
  const nodes = new Map([["w1", node("w1", { taints: [{ key: "ops/maintenance", effect: "NoExecute" }] })]]);
  const q = new KubeNodeQuarantine({ core: fakeCore(nodes, { conflicts: 2 }) });
  assert.equal(await q.cordon("w1", "policy.authority"), "cordoned");
  let n = nodes.get("w1") as k8s.V1Node;
  assert.equal(n.spec?.unschedulable, true);
  assert.deepEqual(n.spec?.taints?.map((t) => t.key), ["ops/maintenance", QUARANTINE_TAINT]);
  assert.equal(n.metadata?.labels?.[QUARANTINE_LABEL], "fleetd");
  assert.equal(await q.cordon("w1", "again"), "already");
  assert.equal(await q.uncordon("w1"), "lifted");
  n = nodes.get("w1") as k8s.V1Node;
  assert.equal(n.spec?.unschedulable, false);
  assert.deepEqual(n.spec?.taints?.map((t) => t.key), ["ops/maintenance"]);
  assert.equal(n.metadata?.labels?.[QUARANTINE_LABEL], undefined);
  assert.equal(n.metadata?.labels?.["kubernetes.io/hostname"], "w1");
  assert.equal(await q.uncordon("w1"), "not-ours", "nothing of fleetd's is left");
});

test("a Node the operator had cordoned stays cordoned when fleetd lifts its quarantine; a Node without fleetd's label is not touched", async () => {
  const nodes = new Map([["w2", node("w2", { unschedulable: true })], ["w3", node("w3", { unschedulable: true, taints: [{ key: QUARANTINE_TAINT, effect: "NoSchedule" }] })]]);
  const q = new KubeNodeQuarantine({ core: fakeCore(nodes) });
  await q.cordon("w2", "x");
  await q.uncordon("w2");
  assert.equal(nodes.get("w2")?.spec?.unschedulable, true, "the operator's cordon stays");
  assert.deepEqual(nodes.get("w2")?.spec?.taints ?? [], []);
  assert.equal(await q.uncordon("w3"), "not-ours");
  assert.equal(nodes.get("w3")?.spec?.taints?.length, 1, "someone else's taint of the same key, without fleetd's label, stays");
  assert.equal(await q.cordon("gone", "x"), "absent");
});

test("an API server that does not answer (or 5xx) is an outage the outbox retries; a 403 is not", async () => {
  for (const [code, reason] of [[503, "kubernetes-unavailable"], [403, undefined]] as const) {
    const q = new KubeNodeQuarantine({ core: fakeCore(new Map(), { fail: code }) });
    const e = await q.cordon("w1", "x").then(() => undefined, (x: unknown) => x);
    assert.ok(e, `${code} throws`);
    assert.equal(outageOf(e)?.reason, reason);
  }
});
