import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { WorkflowObject } from "./api.js";
import { judgeOutcome } from "./outcome.js";

const ours = { "fleetd.io/owner": "fleetd", "fleetd.io/node": "n1", "fleetd.io/mode": "provision" };
const wf = (status: object | undefined, labels: Record<string, string> = ours, annotations: Record<string, string> = {}) =>
  WorkflowObject.parse({ metadata: { name: "fleetd-n1-provision-0123456789", labels, annotations }, spec: { templateRef: "fleetd-provision" }, ...(status ? { status } : {}) });
const bootFailed = { state: "FAILED", conditions: [{ type: "BootJobFailed", status: "True", message: "BMC said no" }] };

test("outcome: skips what is not fleetd's, retirement's, unfinished or journalled", () => {
  assert.deepEqual(judgeOutcome(wf({ state: "FAILED" }, {}), 3), { kind: "skip", why: "not fleetd's" });
  assert.deepEqual(judgeOutcome(wf({ state: "FAILED" }, { ...ours, "fleetd.io/retirement": "true" }), 3), { kind: "skip", why: "retirement's" });
  for (const state of [undefined, "", "PREPARING", "PENDING", "RUNNING", "POST", "SOMETHING-NEW"]) {
    assert.deepEqual(judgeOutcome(wf(state === undefined ? undefined : { state }), 3), { kind: "skip", why: "unfinished" }, String(state));
  }
  assert.deepEqual(judgeOutcome(wf({ state: "SUCCESS" }, ours, { "fleetd.io/outcome-journalled": "SUCCESS" }), 3), { kind: "skip", why: "journalled" });
});

test("outcome: a boot-Job failure restarts within the budget (the count from the annotation), then is journalled as danger", () => {
  const v1 = judgeOutcome(wf(bootFailed), 2);
  assert.ok(v1.kind === "restart" && v1.attempt === 1 && v1.of === 2 && v1.entry.kind === "warning");
  const v2 = judgeOutcome(wf(bootFailed, ours, { "fleetd.io/boot-restarts": "1" }), 2);
  assert.ok(v2.kind === "restart" && v2.attempt === 2);
  const v3 = judgeOutcome(wf(bootFailed, ours, { "fleetd.io/boot-restarts": "2" }), 2);
  assert.ok(v3.kind === "journal" && v3.entry.kind === "danger" && /also after 2 restart\(s\)/.test(v3.entry.summary));
  assert.equal(judgeOutcome(wf(bootFailed), 0).kind, "journal", "a budget of 0 never restarts");
  // tink-controller's own AlreadyExists while setting the Job up counts as a boot failure too
  const setup = judgeOutcome(wf({ state: "FAILED", conditions: [{ type: "BootJobSetupComplete", status: "True" }, { type: "BootJobSetupFailed", status: "True", message: "error creating job: already exists" }] }), 1);
  assert.ok(setup.kind === "restart" && setup.entry.reasons?.[0]?.detail.includes("BootJobSetupFailed: error creating job: already exists"));
  // a garbled count counts as 0; an action that ran means it was not the boot Job
  assert.equal(judgeOutcome(wf(bootFailed, ours, { "fleetd.io/boot-restarts": "lots" }), 1).kind, "restart");
  const ran = judgeOutcome(wf({ ...bootFailed, currentState: { actionName: "wipe-disk", state: "FAILED" } }), 3);
  assert.ok(ran.kind === "journal" && ran.entry.summary.endsWith("failed at action wipe-disk"));
});

test("outcome: success lists the actions; a timeout names the action and the global timeout; a failed template is a reason", () => {
  const ok = judgeOutcome(wf({ state: "SUCCESS", tasks: [{ actions: [{ name: "a" }, { name: "b" }] }] }), 3);
  assert.deepEqual(ok, { kind: "journal", entry: { kind: "success", summary: "provision Workflow fleetd-n1-provision-0123456789 succeeded: a → b; no BMC: power-cycle the machine to boot the installed OS (its netboot is off now)" } });
  const t = judgeOutcome(wf({ state: "TIMEOUT", globalTimeout: 5400, currentState: { actionName: "install-talos", state: "TIMEOUT" }, tasks: [{ actions: [{ name: "install-talos", state: "TIMEOUT", message: "x".repeat(2000) }] }] }), 3);
  assert.ok(t.kind === "journal");
  assert.equal(t.entry.summary, "provision Workflow fleetd-n1-provision-0123456789 timed out at action install-talos (global timeout 5400 s)");
  assert.equal(t.entry.reasons?.[0]?.check, "workflow.timeout");
  assert.ok((t.entry.reasons?.[0]?.detail.length ?? 0) < 600, "an agent's long message is clipped");
  // the agent's text is a code span in NetBox's Markdown: no link, no markup, no way out of the span
  const md = judgeOutcome(wf({ state: "FAILED", currentState: { actionName: "wipe-disk" }, tasks: [{ actions: [{ name: "wipe-disk", state: "FAILED", message: "x` [click](https://evil.example)\n# owned" }] }] }), 3);
  assert.ok(md.kind === "journal");
  assert.equal(md.entry.reasons?.[0]?.detail, "wipe-disk (FAILED): `x  [click](https://evil.example) # owned`");
  const tpl = judgeOutcome(wf({ state: "FAILED", templateRendering: "failed" }), 3);
  assert.ok(tpl.kind === "journal" && tpl.entry.reasons?.some((r) => r.check === "workflow.template"));
});

test("outcome: a provision that succeeded boots the installed OS through the BMC (bootMode netboot), or tells the operator to; other modes do not", () => {
  const withBmc = WorkflowObject.parse({ metadata: { name: "fleetd-n1-provision-0123456789", labels: ours }, spec: { templateRef: "fleetd-provision", bootOptions: { toggleAllowNetboot: true, bootMode: "netboot" } }, status: { state: "SUCCESS" } });
  const v = judgeOutcome(withBmc, 3);
  assert.ok(v.kind === "journal");
  assert.equal(v.bootDiskJob, "fleetd-n1-provision-0123456789-boot-disk");
  assert.match(v.entry.summary, /succeeded; booting the installed OS: Rufio Job fleetd-n1-provision-0123456789-boot-disk \(power off, boot device disk, power on\)$/);
  const without = judgeOutcome(wf({ state: "SUCCESS" }), 3);
  assert.ok(without.kind === "journal" && without.bootDiskJob === undefined && /no BMC: power-cycle the machine/.test(without.entry.summary));
  const attest = judgeOutcome(WorkflowObject.parse({ ...withBmc, metadata: { ...withBmc.metadata, labels: { ...ours, "fleetd.io/mode": "attest" } } }), 3);
  assert.ok(attest.kind === "journal" && attest.bootDiskJob === undefined && !/boot/.test(attest.entry.summary));
  const failed = judgeOutcome(WorkflowObject.parse({ ...withBmc, status: { state: "FAILED", currentState: { actionName: "wipe-disk" } } }), 3);
  assert.ok(failed.kind === "journal" && failed.bootDiskJob === undefined, "a failed provision boots nothing");
});

test("property: any status the schema admits gets a verdict, never a throw; only FAILED restarts", () => {
  const text = fc.string({ maxLength: 20 });
  const status = fc.record({
    state: fc.constantFrom("", "PENDING", "RUNNING", "SUCCESS", "FAILED", "TIMEOUT"),
    conditions: fc.array(fc.record({ type: fc.constantFrom("BootJobFailed", "BootJobComplete", "X"), status: fc.constantFrom("True", "False"), message: text }), { maxLength: 3 }),
    currentState: fc.option(fc.record({ actionName: text, state: text }), { nil: undefined }),
    tasks: fc.array(fc.record({ actions: fc.array(fc.record({ name: text, state: text, message: text }), { maxLength: 3 }) }), { maxLength: 2 }),
  }, { requiredKeys: ["state"] });
  fc.assert(fc.property(status, fc.nat(5), fc.nat(12), (s, restarts, budget) => {
    const v = judgeOutcome(wf(s, ours, { "fleetd.io/boot-restarts": String(restarts) }), budget);
    if (v.kind === "restart") assert.ok(s.state === "FAILED" && restarts < budget);
    if (!["SUCCESS", "FAILED", "TIMEOUT"].includes(s.state)) assert.equal(v.kind, "skip");
  }));
});
