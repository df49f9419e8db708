/**
 * Lease leader election against a real kube-apiserver: of three candidates exactly one leads and a loop run
 * with runWhileLeader is never running on two at once; a leader that stops steps down first and releases the
 * Lease, and another takes over at once; a leader killed with SIGKILL (its own process) is replaced once its
 * Lease lapses, with leaseTransitions counting each change of holder.
 */
import { strict as assert } from "node:assert";
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { loadKube, type Kube, INTERNAL_URL_ANNOTATION, LeaderElector, runWhileLeader } from "@fleetd/platform/kube";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { waitFor } from "../harness/ports.js";
import { repoRoot } from "../netbox/fixture.js";

let cp: ControlPlane;
let kube: Kube;
const NS = "fleetd-ha";

before(async () => {
  cp = await startControlPlane();
  kube = loadKube(cp.kubeconfig);
  await kube.core.createNamespace({ body: { metadata: { name: NS } } });
}, { timeout: 60 * 60_000 });
after(async () => {
  await cp?.stop();
});

const fast = { leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 0.5 };
const lease = (name: string) => kube.coordination.readNamespacedLease({ name, namespace: NS });

test("three candidates: one leader, a leader-only loop never runs twice; stop steps down, releases, another takes over", async () => {
  let running = 0;
  let maxRunning = 0;
  const starts: string[] = [];
  const electors = ["a", "b", "c"].map((id) => new LeaderElector({ kube, namespace: NS, name: "loops", identity: id, annotations: { [INTERNAL_URL_ANNOTATION]: `http://${id}` }, ...fast }));
  for (const e of electors) {
    runWhileLeader(e, {
      start() {
        running++;
        maxRunning = Math.max(maxRunning, running);
        starts.push(e.identity);
      },
      async stop() {
        running--;
      },
    });
    e.start();
  }
  try {
    await waitFor("a leader", 20_000, async () => electors.some((e) => e.isLeader()));
    await Promise.all(electors.map((e) => e.settled()));
    const leaders = electors.filter((e) => e.isLeader());
    assert.equal(leaders.length, 1);
    const first = leaders[0] as LeaderElector;
    const l1 = await lease("loops");
    assert.equal(l1.spec?.holderIdentity, first.identity);
    assert.equal(l1.metadata?.annotations?.[INTERNAL_URL_ANNOTATION], `http://${first.identity}`);
    assert.equal((await electors[0]?.holder())?.identity, first.identity, "followers see the holder");
    assert.deepEqual(starts, [first.identity]);

    await first.stop();
    assert.equal(running, 0, "the loop stopped before the Lease was released");
    await waitFor("another leader", 20_000, async () => electors.some((e) => e !== first && e.isLeader()));
    const second = electors.find((e) => e !== first && e.isLeader()) as LeaderElector;
    await second.settled();
    const l2 = await lease("loops");
    assert.equal(l2.spec?.holderIdentity, second.identity);
    assert.equal(l2.spec?.leaseTransitions, (l1.spec?.leaseTransitions ?? 0) + 1);
    assert.deepEqual(starts, [first.identity, second.identity]);
    assert.equal(maxRunning, 1, "never two leaders' loops at once");
  } finally {
    for (const e of electors) await e.stop();
  }
});

test("a leader killed with SIGKILL is replaced after its Lease lapses", async () => {
  const child: ChildProcess = spawn(process.execPath, [join(repoRoot, "tests/dist/ha/electorChild.js"), cp.kubeconfig, NS, "killed", "child"], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout?.on("data", (b: Buffer) => (out += b.toString("utf8")));
  child.stderr?.on("data", (b: Buffer) => (out += b.toString("utf8")));
  const survivor = new LeaderElector({ kube, namespace: NS, name: "killed", identity: "survivor", ...fast });
  try {
    await waitFor("the child leads", 20_000, async () => out.includes("started"));
    survivor.start();
    // The child holds and renews it: the survivor must not take it meanwhile.
    await new Promise((r) => setTimeout(r, 4000));
    assert.equal(survivor.isLeader(), false, "a held Lease is not taken");
    assert.equal((await lease("killed")).spec?.holderIdentity, "child");
    const before = (await lease("killed")).spec?.leaseTransitions ?? 0;
    child.kill("SIGKILL");
    await waitFor("the survivor leads", 20_000, async () => survivor.isLeader());
    const l = await lease("killed");
    assert.equal(l.spec?.holderIdentity, "survivor");
    assert.equal(l.spec?.leaseTransitions, before + 1);
    assert.doesNotMatch(out, /stopped/, "a killed process does not step down: the Lease lapsed");
  } finally {
    child.kill("SIGKILL");
    await survivor.stop();
  }
});
