/**
 * The example wipe Template (tink-action/examples/wipe-template.yaml): spec.data renders with Go's
 * text/template and missingkey=error as the Tinkerbell controller renders it (tests/go/tinkrender);
 * attest (wipe mode) → whole-disk wipe → clear-tpm, every image pinned by digest once filled in, and the
 * environments are ones the action's configuration loaders accept.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { loadConfig, parseTpmSpec } from "@fleetd/tink-action/config";
import { selfSigned } from "@fleetd/tink-action/testing/selfSigned";
import { renderTemplate } from "../harness/tinkRender.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");
const manifest = parseYaml(readFileSync(join(repo, "tink-action/examples/wipe-template.yaml"), "utf8")) as { apiVersion: string; kind: string; spec: { data: string } };
const Action = z.strictObject({
  name: z.string(), image: z.string(), timeout: z.number().int().positive(), command: z.array(z.string()).optional(),
  environment: z.record(z.string(), z.string()).optional(), namespaces: z.strictObject({ network: z.literal("host").optional() }).optional(),
});
const Data = z.strictObject({
  version: z.string(), name: z.string(), global_timeout: z.number().int().positive(),
  tasks: z.array(z.strictObject({ name: z.string(), worker: z.string().min(1), volumes: z.array(z.string()).optional(), actions: z.array(Action) })).length(1),
});

test("the wipe Template: attest (wipe mode), whole-disk wipe, then clear-tpm; renders as the controller renders it", () => {
  assert.equal(manifest.apiVersion, "tinkerbell.org/v1alpha1");
  assert.equal(manifest.kind, "Template");
  const ca = selfSigned("fleetd test CA");
  const filled = manifest.spec.data.split("FLEETD_TINK_ACTION_DIGEST").join("a".repeat(64)).split("DEBIAN_SLIM_DIGEST").join("b".repeat(64))
    .replace(/( +)-----BEGIN CERTIFICATE-----\n[\s\S]*?-----END CERTIFICATE-----\n/, (_m, indent: string) => ca.cert.trim().split("\n").map((l) => indent + l).join("\n") + "\n");
  const r = renderTemplate(filled, { device_1: "b0:7b:25:00:00:21", fleetd_workflow: "fleetd-wipe-worker-1", Hardware: { Disks: ["/dev/nvme0n1"] } });
  assert.ok(r.ok, r.ok ? "" : r.error);
  const d = Data.parse(parseYaml(r.text));
  const actions = d.tasks[0]?.actions ?? [];
  assert.deepEqual(actions.map((a) => a.name), ["fleetd-attest", "wipe-disk", "fleetd-clear-tpm"]);
  for (const a of actions) assert.match(a.image, /@sha256:[0-9a-f]{64}$/);
  const [attest, wipe, clear] = actions as [z.infer<typeof Action>, z.infer<typeof Action>, z.infer<typeof Action>];
  assert.deepEqual(attest.command, ["attest", "--mode", "wipe"]);
  assert.equal(loadConfig(attest.environment ?? {}).mode, "wipe");
  assert.equal(wipe.environment?.["DEST_DISK"], "/dev/nvme0n1");
  assert.match(wipe.command?.[2] ?? "", /blkdiscard --force "\$DEST_DISK" && cmp --silent --bytes=1048576 "\$DEST_DISK" \/dev\/zero \|\| shred --iterations=0 --zero "\$DEST_DISK"/, "the whole disk, not its first MiB; a discard only where the device reads back zeros");
  assert.deepEqual(clear.command, ["clear-tpm"]);
  assert.equal(clear.image, attest.image, "clear-tpm is the fleetd action image");
  assert.equal(clear.environment?.["FLEETD_CLEAR_TPM"], "yes");
  assert.deepEqual(parseTpmSpec(clear.environment?.["FLEETD_TPM"] ?? ""), { kind: "device", path: "/dev/tpmrm0" });
  assert.ok(d.tasks[0]?.volumes?.includes("/dev:/dev"), "the action needs the TPM device");
});
