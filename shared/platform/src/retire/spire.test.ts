/** Retirement's `spire` step through the runner: it waits (journalled once per reason) until SPIRE's removal is confirmed, and passes where SPIRE is not configured. */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Kube } from "../kube/client.js";
import type { RemovalCheck } from "../spire/syncStatus.js";
import { ProgressConflict, type ProgressRecord, type RetirementProgress } from "./progress.js";
import { runRetirementPass } from "./runner.js";
import { spireStep } from "./spire.js";
import { STEP_NAMES, type RetirementDeps, type RetirementPlatform, type Step } from "./types.js";

function memoryProgress(): RetirementProgress {
  const m = new Map<string, { record: ProgressRecord; version: string }>();
  let v = 0;
  return {
    read: async (n) => m.get(n),
    async write(n, record, version) {
      if (m.get(n)?.version !== version) throw new ProgressConflict("changed");
      const next = String(++v);
      m.set(n, { record, version: next });
      return next;
    },
    remove: async (n) => void m.delete(n),
    list: async () => [...m.keys()],
  };
}

const offline: Step = { name: "netbox-offline", summary: "fake", run: async () => ({ done: true, detail: "offline" }) };

function deps(spire: RetirementDeps["spire"], journal: string[]): RetirementDeps {
  return {
    workload: {} as unknown as Kube, // not used by these steps
    platform: {} as unknown as RetirementPlatform,
    progress: memoryProgress(),
    inventory: { markOffline: async () => "offline" },
    journal: { record: async (_n, e) => void journal.push(`${e.kind}: ${e.summary}`) },
    owner: "replica-a",
    ...(spire ? { spire } : {}),
  };
}

test("the spire step comes right before netbox-offline", () => {
  assert.deepEqual(STEP_NAMES.slice(-2), ["spire", "netbox-offline"]);
});

test("spire step: waits while spire-plugin has not confirmed (journalled once per reason), then done with the detail; netbox-offline only after", async () => {
  const answers: RemovalCheck[] = [
    { confirmed: false, waitingFor: "spire-plugin has not applied the current spire-nodes.json yet" },
    { confirmed: false, waitingFor: "spire-plugin has not applied the current spire-nodes.json yet" },
    { confirmed: false, waitingFor: "spire-plugin has not banned the agents of w1 yet" },
    { confirmed: true, detail: "SPIRE holds no entry of w1; agents banned: spiffe://td/spire/agent/tpm_devid/ab" },
  ];
  const asked: string[] = [];
  const journal: string[] = [];
  const d = deps({ pollMs: 5, confirmRemoved: async (node) => (asked.push(node), answers.shift() as RemovalCheck) }, journal);
  const steps = [spireStep, offline];
  const r1 = await runRetirementPass(d, "w1", steps);
  assert.equal(r1.status, "waiting");
  assert.equal(r1.retryAfterMs, 5);
  assert.deepEqual(r1.completedNow, []);
  await runRetirementPass(d, "w1", steps);
  await runRetirementPass(d, "w1", steps);
  const r4 = await runRetirementPass(d, "w1", steps);
  assert.equal(r4.status, "complete");
  assert.deepEqual(r4.completedNow, ["spire", "netbox-offline"]);
  assert.deepEqual(asked, ["w1", "w1", "w1", "w1"]);
  assert.deepEqual(journal.filter((j) => j.includes("step spire waiting")).length, 2, "one journal entry per new reason");
  assert.ok(journal.some((j) => j.startsWith("success: retirement step spire done: SPIRE holds no entry of w1; agents banned")));
});

test("spire step: a site without SPIRE passes it, saying so", async () => {
  const journal: string[] = [];
  const r = await runRetirementPass(deps(undefined, journal), "w2", [spireStep, offline]);
  assert.equal(r.status, "complete");
  assert.ok(journal.some((j) => /step spire done: SPIRE is not configured/.test(j)));
});
