/**
 * fleetd's generated Templates render as tink-controller v0.25.0 renders them (Go text/template, missingkey=error,
 * Sprig's hermetic functions: tests/go/tinkrender) over the data the controller provides — the Workflow's
 * hardwareMap at the top level and `.Hardware.Disks` — and the rendered attest action's environment is a
 * configuration the action itself accepts, naming the right Workflow (for intake: the name tink-server gives
 * the enrollment Workflow).
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { parse as parseYaml } from "yaml";
import { loadConfig } from "@fleetd/tink-action/config";
import { selfSigned } from "@fleetd/tink-action/testing/selfSigned";
import { enrollmentWorkflowName, buildTemplate, checkTemplateData, TEMPLATE_KINDS, type TemplateKind, buildWorkflow, checkNode } from "@fleetd/platform/tinkerbell";
import { TinkerbellSiteConfig } from "@fleetd/platform/fleet";
import { renderTemplate } from "../harness/tinkRender.js";

const ca = selfSigned("fleetd test CA");
const site = TinkerbellSiteConfig.parse({
  server: { url: "https://fleetd.example.internal:8443", caFile: "/ca.pem" },
  images: {
    action: `registry.example.internal/fleetd/fleetd-tink-action@sha256:${"a".repeat(64)}`,
    wipe: `docker.io/library/debian:bookworm-slim@sha256:${"b".repeat(64)}`,
    image2disk: `quay.io/tinkerbell/actions/image2disk@sha256:${"c".repeat(64)}`,
  },
  talosImageUrl: "https://factory.talos.dev/image/0123abcd/v1.13.9/metal-amd64.raw.zst",
  intake: { enabled: true },
});
const MAC = "0c:c4:7a:00:00:21";

const render = renderTemplate;

/** What the controller renders with: hardwareMap keys, and the Hardware's disks (none for an enrollment). */
function dataFor(kind: TemplateKind): Record<string, unknown> {
  if (kind === "intake") return { device_1: MAC, fleetd_mode: "intake" }; // the rule set's agentValue + kvs; no Hardware
  const wf = buildWorkflow(checkNode({ name: "worker-1", macs: [MAC] }), { mode: kind, requestId: "r1" }, "tinkerbell");
  return { ...wf.spec.hardwareMap, Hardware: { Disks: ["/dev/nvme0n1"] } };
}

for (const kind of TEMPLATE_KINDS) {
  test(`Template fleetd-${kind} renders as tink-controller renders it, to a valid template the action accepts`, () => {
    const t = buildTemplate(kind, { site, serverCaPem: ca.cert }, "tinkerbell");
    const data = dataFor(kind);
    const r = render(t.spec.data, data);
    assert.ok(r.ok, r.ok ? "" : r.error);
    const d = checkTemplateData(parseYaml(r.text), `rendered fleetd-${kind}`);
    const task = d.tasks[0]!;
    assert.equal(task.worker, MAC);
    for (const a of task.actions) {
      for (const v of [...Object.values(a.environment ?? {}), ...(a.command ?? [])]) assert.doesNotMatch(v, /\{\{|\}\}/, `${a.name}: nothing left unrendered`);
      if (a.environment?.["DEST_DISK"]) assert.equal(a.environment["DEST_DISK"], "/dev/nvme0n1");
    }
    const attest = task.actions.find((a) => a.name === "fleetd-attest");
    assert.ok(attest);
    const cfg = loadConfig({ ...task.environment, ...attest.environment });
    assert.equal(cfg.workflow, kind === "intake" ? enrollmentWorkflowName(MAC) : data["fleetd_workflow"]);
    assert.equal(cfg.ca, ca.cert.trim() + "\n");
    assert.deepEqual(attest.command, ["attest", "--mode", kind]);
  });
}

test("a Workflow without fleetd_workflow in its hardwareMap does not render (missingkey=error): the name reaches the action or nothing runs", () => {
  const t = buildTemplate("attest", { site, serverCaPem: ca.cert }, "tinkerbell");
  const r = render(t.spec.data, { device_1: MAC });
  assert.ok(!r.ok && /fleetd_workflow/.test(r.error));
});

test("the lab's provision Template (local-registry images, swtpm Unix socket, loopback OS image, a loop device from the Hardware) renders, and the attest action accepts its TPM transport", () => {
  const lab = TinkerbellSiteConfig.parse({
    server: { url: "http://127.0.0.1:8080", lab: true },
    images: {
      action: `127.0.0.1:5000/fleetd/tink-action@sha256:${"a".repeat(64)}`,
      wipe: `127.0.0.1:5000/fleetd/debian@sha256:${"b".repeat(64)}`,
      image2disk: `127.0.0.1:5000/fleetd/image2disk@sha256:${"c".repeat(64)}`,
    },
    talosImageUrl: "http://127.0.0.1:9080/lab-os.raw.gz",
    workerDir: "/tmp/fleetd-lab/m1/worker",
    tpm: { kind: "unix-socket", hostDir: "/tmp/fleetd-lab/m1/tpm", socket: "swtpm.sock" },
  });
  const t = buildTemplate("provision", { site: lab }, "tinkerbell");
  const wf = buildWorkflow(checkNode({ name: "worker-1", macs: [MAC], installDisk: "/dev/loop7" }), { mode: "provision", requestId: "r1" }, "tinkerbell");
  const r = render(t.spec.data, { ...wf.spec.hardwareMap, Hardware: { Disks: ["/dev/loop7"] } });
  assert.ok(r.ok, r.ok ? "" : r.error);
  const task = checkTemplateData(parseYaml(r.text), "rendered lab fleetd-provision").tasks[0]!;
  assert.ok(task.volumes?.includes("/tmp/fleetd-lab/m1/worker:/worker"));
  const [attest, wipe, install, writeMeta] = task.actions;
  assert.deepEqual(attest?.volumes, ["/tmp/fleetd-lab/m1/tpm:/run/fleetd-tpm"]);
  const cfg = loadConfig({ ...task.environment, ...attest?.environment });
  assert.deepEqual(cfg.tpm, { kind: "unix", path: "/run/fleetd-tpm/swtpm.sock" });
  assert.equal(wipe?.environment?.["DEST_DISK"], "/dev/loop7");
  assert.equal(install?.environment?.["DEST_DISK"], "/dev/loop7");
  assert.deepEqual(install?.namespaces, { network: "host" });
  assert.deepEqual(writeMeta?.command, ["write-meta", "--disk", "/dev/loop7", "--code-file", "/worker/fleetd/install-code"]);
});
