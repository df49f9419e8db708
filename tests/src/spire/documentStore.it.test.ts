/**
 * The two stores of spire-nodes.json and spire-plugin's status, for real: a ConfigMap in a real kube-apiserver
 * and a file on the real filesystem.
 *  - ConfigMap: created when absent; replaced only with the resourceVersion read (a writer that lost a race reads
 *    again, nobody's write is lost); unchanged bytes are not written; a document over 900 KiB goes gzip-compressed
 *    into binaryData and reads back byte for byte; the watch reports a change (spire-plugin's trigger), also after
 *    the ConfigMap was deleted and created again; an oversized one is refused before parsing.
 *  - spire-plugin under `ha`: of two replicas only the Lease holder runs passes; when it stops, the other takes over.
 *  - file: temp + fsync + rename (a reader polling meanwhile sees the old or the new document, never a mix; no
 *    temp file is left); the directory watch reports the replacement; an oversized file is refused.
 */
import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import { kubeFromConfig, type Kube } from "@fleetd/platform/kube";
import { configMapDocument, DocumentTooLarge, fileDocument, parseNodeList, serializeNodeList } from "@fleetd/platform/spire";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { pollValue } from "../harness/ports.js";
import { eligibleNode, listOf, nodeNames } from "./listFixture.js";
import { parseSpirePluginConfig, startSpirePlugin, type SpirePlugin } from "@fleetd/spire-plugin";
import pino from "pino";

const NS = "fleetd";
const FP = "d".repeat(40);
let cp: ControlPlane;
let kube: Kube;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-docstore-"));
  cp = await startControlPlane();
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  kube = kubeFromConfig(kc);
  await kube.core.createNamespace({ body: { metadata: { name: NS } } });
}, { timeout: 10 * 60_000 });

after(async () => {
  await cp?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const list = (n: number, gen = 1) => Buffer.from(serializeNodeList(listOf("lab.test", [FP], nodeNames(n).map((x) => eligibleNode(x, gen)))));

test("ConfigMap: created when absent, unchanged bytes not written, replaced with the resourceVersion read; the watch fires on each change", async () => {
  const store = configMapDocument({ kube, namespace: NS, name: "spire-nodes", key: "spire-nodes.json" });
  let changes = 0;
  const errors: unknown[] = [];
  const stop = store.watch(() => void changes++, (e) => errors.push(e));
  try {
    assert.equal(await store.read(1 << 20), undefined);
    const a = list(3);
    assert.equal(await store.write(a), true);
    const got = await store.read(1 << 20);
    assert.deepEqual(got?.bytes, a);
    assert.equal(parseNodeList(got?.bytes ?? "", "lab.test").nodes.length, 3);
    await pollValue("the watch to see the create", async () => (changes >= 1 ? true : undefined), { timeoutMs: 10_000, intervalMs: 50 });
    const rv = got?.version;
    assert.equal(await store.write(a), false, "the same bytes: nothing written");
    assert.equal((await store.read(1 << 20))?.version, rv, "resourceVersion unchanged");
    const seen = changes;
    assert.equal(await store.write(list(4)), true);
    await pollValue("the watch to see the update", async () => (changes > seen ? true : undefined), { timeoutMs: 10_000, intervalMs: 50 });
    const cm = await kube.core.readNamespacedConfigMap({ name: "spire-nodes", namespace: NS });
    assert.equal(cm.metadata?.labels?.["fleetd.io/owner"], "fleetd");
    assert.deepEqual(Object.keys(cm.data ?? {}), ["spire-nodes.json"]);
    // deleted and created again by someone: the watch still reports changes (it reconnects)
    await kube.core.deleteNamespacedConfigMap({ name: "spire-nodes", namespace: NS });
    const before2 = changes;
    assert.equal(await store.write(list(2)), true);
    await pollValue("the watch after delete and create", async () => (changes > before2 ? true : undefined), { timeoutMs: 10_000, intervalMs: 50 });
    assert.deepEqual(errors, []);
  } finally {
    stop();
  }
});

test("ConfigMap: a writer that lost a race (409) reads again and writes on the newer version; both writers' last write wins, none is lost midway", async () => {
  const name = "spire-race";
  const a = configMapDocument({ kube, namespace: NS, name, key: "spire-nodes.json" });
  const b = configMapDocument({ kube, namespace: NS, name, key: "spire-nodes.json" });
  await a.write(list(1));
  // Interleave: b's replace runs against a resourceVersion that a's write made stale.
  const real = kube.core.replaceNamespacedConfigMap.bind(kube.core);
  let conflicts = 0;
  let injected = false;
  const racing: Kube = {
    ...kube,
    core: new Proxy(kube.core, {
      get(target, prop, recv) {
        if (prop === "replaceNamespacedConfigMap") {
          return async (req: { name: string; namespace: string; body: k8s.V1ConfigMap }) => {
            if (!injected) {
              injected = true;
              await a.write(list(5)); // someone else writes between b's read and b's replace
            }
            try {
              return await real(req);
            } catch (e) {
              conflicts++;
              throw e;
            }
          };
        }
        return Reflect.get(target, prop, recv) as unknown;
      },
    }),
  };
  const b2 = configMapDocument({ kube: racing, namespace: NS, name, key: "spire-nodes.json" });
  void b;
  assert.equal(await b2.write(list(7)), true);
  assert.equal(conflicts, 1, "the stale replace was refused by the apiserver (409)");
  const now = await a.read(1 << 20);
  assert.equal(parseNodeList(now?.bytes ?? "", "lab.test").nodes.length, 7, "b's write landed on the newer version");
});

test("ConfigMap: a document over 900 KiB is stored gzip-compressed in binaryData and reads back byte for byte; an oversized one is refused", async () => {
  const store = configMapDocument({ kube, namespace: NS, name: "spire-big", key: "spire-nodes.json" });
  const big = list(6000);
  assert.ok(big.byteLength > 900 * 1024, `${big.byteLength} bytes`);
  await store.write(big);
  const cm = await kube.core.readNamespacedConfigMap({ name: "spire-big", namespace: NS });
  assert.equal(cm.data?.["spire-nodes.json"], undefined);
  assert.ok(cm.binaryData?.["spire-nodes.json.gz"]);
  assert.deepEqual((await store.read(32 << 20))?.bytes, big);
  await assert.rejects(store.read(big.byteLength - 1), (e: unknown) => e instanceof DocumentTooLarge);
  // back under the limit: plain data again, the compressed key gone
  await store.write(list(2));
  const cm2 = await kube.core.readNamespacedConfigMap({ name: "spire-big", namespace: NS });
  assert.ok(cm2.data?.["spire-nodes.json"]);
  assert.equal(cm2.binaryData?.["spire-nodes.json.gz"], undefined);
});

test("file: atomic replace — another process reading all along sees only whole documents; the directory watch fires; no temp file stays", async () => {
  const path = join(dir, "lists", "spire-nodes.json");
  const store = fileDocument(path);
  let changes = 0;
  const stop = store.watch(() => void changes++);
  try {
    assert.equal(await store.read(1 << 20), undefined);
    await store.write(list(500, 1));
    // A reader in its own process (truly concurrent with the writes): every read must parse and hold 500 or 1500 nodes.
    const reader = spawn(process.execPath, ["-e", `
      const fs = require("node:fs");
      let reads = 0, torn = 0, sizes = new Set();
      const end = Date.now() + Number(process.argv[2]);
      while (Date.now() < end) {
        try { const l = JSON.parse(fs.readFileSync(process.argv[1], "utf8")); sizes.add(l.nodes.length); reads++; }
        catch (e) { if (e.code !== "ENOENT") torn++; }
      }
      process.stdout.write(JSON.stringify({ reads, torn, sizes: [...sizes].sort((a, b) => a - b) }));
    `, path, "3000"], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    reader.stdout.on("data", (b: Buffer) => (out += b.toString()));
    const done = new Promise<void>((r) => reader.on("exit", () => r()));
    await new Promise((r) => setTimeout(r, 200));
    for (let i = 0; i < 30; i++) {
      await store.write(i % 2 === 0 ? list(1500, 2) : list(500, 3));
      await new Promise((r) => setTimeout(r, 40));
    }
    await done;
    const r = JSON.parse(out) as { reads: number; torn: number; sizes: number[] };
    assert.equal(r.torn, 0, `torn reads: ${out}`);
    assert.ok(r.reads > 100, out);
    assert.deepEqual(r.sizes, [500, 1500], "both documents were seen, nothing else");
    assert.ok(changes > 0, "the watch reported the replacements");
    assert.deepEqual(readdirSync(join(dir, "lists")), ["spire-nodes.json"], "no temp file left");
    assert.equal(await store.write(list(500, 3)), false, "the same bytes: nothing written");
    await assert.rejects(store.read(100), (e: unknown) => e instanceof DocumentTooLarge);
  } finally {
    stop();
  }
});

test("spire-plugin under ha: only the Lease holder runs passes; when it stops, the other replica takes over", async () => {
  const listFile = join(dir, "ha", "spire-nodes.json");
  const passes = async (p: SpirePlugin) => {
    const m = await p.metrics.registry.getSingleMetric("fleetd_spire_plugin_passes_total")?.get();
    return (m?.values ?? []).reduce((a, v) => a + v.value, 0);
  };
  const cfg = (identity: string) => parseSpirePluginConfig({
    // no SPIRE and no list here: the CA bundle is never read
    trustDomain: "lab.test", devidCaPath: join(dir, "ha", "devid-ca-bundle.pem"), socketPath: join(dir, "no-spire.sock"), list: { file: listFile }, status: { file: join(dir, "ha", "status.json") },
    intervalSeconds: 1, listen: { host: "127.0.0.1", port: 0 },
    ha: { kubeconfig: cp.kubeconfig, namespace: NS, identity, leaseDurationSeconds: 4, renewDeadlineSeconds: 3, retryPeriodSeconds: 1 },
  });
  const a = await startSpirePlugin(cfg("replica-a"), { logger: pino({ level: "silent" }) });
  await pollValue("replica-a to lead", async () => (a.elector?.isLeader() ? true : undefined), { timeoutMs: 15_000, intervalMs: 100 });
  const b = await startSpirePlugin(cfg("replica-b"), { logger: pino({ level: "silent" }) });
  try {
    await pollValue("replica-a to pass twice", async () => ((await passes(a)) >= 2 ? true : undefined), { timeoutMs: 15_000, intervalMs: 100 });
    assert.equal(b.elector?.isLeader(), false);
    assert.equal(await passes(b), 0, "the follower runs no pass");
    assert.equal((await b.ready()).checks["leader"]?.ok, true, "the follower knows a leader");
    await a.stop();
    await pollValue("replica-b to take over and pass", async () => (b.elector?.isLeader() && (await passes(b)) >= 1 ? true : undefined), { timeoutMs: 20_000, intervalMs: 100 });
  } finally {
    await b.stop();
    await a.stop().catch(() => undefined);
  }
});
