/**
 * The example Tinkerbell Template (tink-action/examples/template.yaml). The Tinkerbell CRDs are not in this
 * repository, so the Template is checked against the v1alpha1 field list in research/tinkerbell.md §1.2 (the
 * controller's types.go and template_validator.go, as read there): a strict schema, so a misspelt key fails.
 * spec.data is rendered with Go's own text/template and missingkey=error, as the controller renders it
 * (tests/go/tinkrender). Then fleetd's own rules: order, digests, namespaces,
 * the shared volume, and an attest environment the action's configuration loader accepts.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { loadConfig } from "@fleetd/tink-action/config";
import { selfSigned } from "@fleetd/tink-action/testing/selfSigned";
import { renderTemplate } from "../harness/tinkRender.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");
const manifest = parseYaml(readFileSync(join(repo, "tink-action/examples/template.yaml"), "utf8")) as { apiVersion: string; kind: string; metadata: { name: string }; spec: { data: string } };

/** distribution/reference's grammar, simplified: [registry/]path[:tag][@sha256:hex]. */
const OCI_REF = /^(?:(?:[a-zA-Z0-9-]+\.)+[a-zA-Z0-9-]+(?::\d+)?\/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$/;
const volume = z.string().regex(/^\/[^:]*:\/[^:]*(?::ro)?$/, "src:dst[:ro]");
const env = z.record(z.string(), z.string());
const Action = z
  .object({
    name: z.string().min(1),
    image: z.string().regex(OCI_REF, "an OCI reference"),
    timeout: z.number().int().positive("0 or missing TIMEOUTs at once (tinkerbell.md §3)"),
    command: z.array(z.string()).optional(),
    environment: env.optional(),
    volumes: z.array(volume).optional(),
    pid: z.literal("host").optional(),
    namespaces: z.object({ pid: z.literal("host").optional(), network: z.literal("host").optional() }).strict().optional(),
  })
  .strict();
const TemplateData = z
  .object({
    version: z.string(),
    name: z.string().min(1).max(199),
    global_timeout: z.number().int().positive(),
    tasks: z
      .array(
        z
          .object({ name: z.string().min(1), worker: z.string().min(1, "worker must render non-empty"), volumes: z.array(volume).optional(), environment: env.optional(), actions: z.array(Action).min(1) })
          .strict(),
      )
      .min(1),
  })
  .strict()
  .superRefine((d, ctx) => {
    const names = d.tasks.map((t) => t.name);
    if (new Set(names).size !== names.length) ctx.addIssue({ code: "custom", message: "task names must be unique" });
    for (const t of d.tasks) {
      const a = t.actions.map((x) => x.name);
      if (new Set(a).size !== a.length) ctx.addIssue({ code: "custom", message: `action names in ${t.name} must be unique` });
    }
  });
type TemplateData = z.infer<typeof TemplateData>;

const ca = selfSigned("fleetd test CA");
const digest = (c: string) => c.repeat(64);
const PLACEHOLDERS: Record<string, string> = { FLEETD_TINK_ACTION_DIGEST: digest("a"), DEBIAN_SLIM_DIGEST: digest("b"), IMAGE2DISK_DIGEST: digest("c"), TALOS_SCHEMATIC_ID: digest("d") };
const hardwareMap = { device_1: "b0:7b:25:00:00:21", fleetd_workflow: "fleetd-provision-worker-1" };
const renderData = { ...hardwareMap, Hardware: { Disks: ["/dev/nvme0n1"] } };

/** The operator's edits: placeholders replaced, the CA pasted in (indented as the block scalar wants). */
function filledIn(data: string): string {
  let out = data;
  for (const [k, v] of Object.entries(PLACEHOLDERS)) out = out.split(k).join(v);
  return out.replace(/( +)-----BEGIN CERTIFICATE-----\n[\s\S]*?-----END CERTIFICATE-----\n/, (_m, indent: string) => ca.cert.trim().split("\n").map((l) => indent + l).join("\n") + "\n");
}

const render = renderTemplate;

function rendered(): TemplateData {
  const r = render(filledIn(manifest.spec.data), renderData);
  assert.ok(r.ok, r.ok ? "" : r.error);
  return TemplateData.parse(parseYaml(r.text));
}

test("a Template manifest whose spec.data renders (Go text/template, missingkey=error) to a valid v1alpha1 template", () => {
  assert.equal(manifest.apiVersion, "tinkerbell.org/v1alpha1");
  assert.equal(manifest.kind, "Template");
  assert.equal(typeof manifest.spec.data, "string");
  const d = rendered();
  assert.equal(d.tasks[0]?.worker, hardwareMap.device_1);
  // Without the workflow name in hardwareMap the controller refuses to render (missingkey=error).
  const missing = render(filledIn(manifest.spec.data), { device_1: hardwareMap.device_1, Hardware: renderData.Hardware });
  assert.ok(!missing.ok && /fleetd_workflow/.test(missing.error));
  // The schema is strict: a misspelt key would be refused.
  assert.throws(() => TemplateData.parse({ ...d, tasks: [{ ...d.tasks[0], actions: [{ ...d.tasks[0]?.actions[0], enviroment: {} }] }] }));
});

test("attest first, then wipe, install and write-meta; every image pinned by digest; unfilled placeholders are invalid references", () => {
  const d = rendered();
  const task = d.tasks[0];
  assert.ok(task && d.tasks.length === 1);
  assert.deepEqual(task.actions.map((a) => a.name), ["fleetd-attest", "wipe-disk", "install-talos", "fleetd-write-meta"]);
  for (const a of task.actions) assert.match(a.image, /@sha256:[0-9a-f]{64}$/, `${a.name} is pinned by digest`);
  const [attest, wipe, install, meta] = task.actions as [z.infer<typeof Action>, z.infer<typeof Action>, z.infer<typeof Action>, z.infer<typeof Action>];
  assert.equal(attest.image, meta.image, "attest and write-meta are the same fleetd image");
  assert.match(install.image, /^quay\.io\/tinkerbell\/actions\/image2disk@/);
  // As shipped, the placeholders make the references invalid: nothing runs until an operator pins real digests.
  const raw = manifest.spec.data.match(/image: (\S+)/g)?.map((l) => l.slice("image: ".length)) ?? [];
  assert.equal(raw.length, 4);
  for (const r of raw) assert.doesNotMatch(r, OCI_REF, `${r} must not be usable unfilled`);
  // The disk: one device for wipe, install and META.
  assert.equal(wipe.environment?.["DEST_DISK"], "/dev/nvme0n1");
  assert.equal(install.environment?.["DEST_DISK"], "/dev/nvme0n1");
  assert.deepEqual(meta.command?.slice(0, 2), ["write-meta", "--disk"]);
  assert.equal(meta.command?.[2], "/dev/nvme0n1");
  assert.match(install.environment?.["IMG_URL"] ?? "", /^https:\/\/factory\.talos\.dev\/image\/[0-9a-f]{64}\/v\d+\.\d+\.\d+\/metal-amd64\.raw\.(zst|xz)$/);
  assert.equal(install.environment?.["COMPRESSED"], "true");
});

test("the attest action: host network namespace, provision mode, a configuration the action accepts, its results where write-meta reads them", () => {
  const d = rendered();
  const task = d.tasks[0];
  assert.ok(task);
  const attest = task.actions[0];
  const meta = task.actions[3];
  assert.ok(attest && meta);
  assert.deepEqual(attest.namespaces, { network: "host" }, "real MACs and LLDP need the host network namespace");
  assert.deepEqual(attest.command, ["attest", "--mode", "provision"]);
  const e = { ...task.environment, ...attest.environment };
  assert.equal(e["FLEETD_MODE"], "provision");
  const cfg = loadConfig(e);
  assert.equal(cfg.server.protocol, "https:");
  assert.equal(cfg.ca, ca.cert.trim() + "\n", "the pasted CA is pinned");
  assert.equal(cfg.workflow, hardwareMap.fleetd_workflow);
  assert.deepEqual(cfg.tpm, { kind: "device", path: "/dev/tpmrm0" });
  // The shared volume: mounted for every action (task level), and the code file is under FLEETD_OUT.
  assert.ok(task.volumes?.includes("/worker:/worker"));
  assert.ok(cfg.out.startsWith("/worker/"));
  assert.equal(meta.command?.[3], "--code-file");
  assert.equal(meta.command?.[4], `${cfg.out}/install-code`);
  assert.ok(task.volumes?.includes("/dev:/dev"), "the TPM and the disk");
  // The action gives up on its own (exit 3, EXIT.pending) before Tinkerbell's timeout kills it.
  assert.ok(attest.timeout > cfg.timeoutSeconds + cfg.lldpWaitSeconds + 120, `timeout ${attest.timeout} leaves room for the pull, LLDP and the pending budget`);
  const total = task.actions.reduce((s, a) => s + a.timeout, 0);
  assert.ok(total <= d.global_timeout, `the actions' timeouts (${total}) fit in global_timeout (${d.global_timeout})`);
});

test("as shipped (the CA not pasted in), the attest action refuses to start rather than trust anything", () => {
  const r = render(manifest.spec.data.split("FLEETD_TINK_ACTION_DIGEST").join(digest("a")), renderData);
  assert.ok(r.ok, r.ok ? "" : r.error);
  const d = parseYaml(r.text) as TemplateData;
  const attest = d.tasks[0]?.actions[0];
  assert.throws(() => loadConfig(attest?.environment ?? {}), /FLEETD_SERVER_CA: no PEM certificate found/);
});
