/**
 * fleetd's Templates (tinkerbell.org/v1alpha1), one per workflow kind, rendered from the site configuration.
 * The actions follow tink-action/examples/template.yaml: fleetd-attest (host network, /worker shared volume),
 * then, by kind, wipe-disk, install-talos (image2disk) and fleetd-write-meta. The Workflow's hardwareMap gives
 * `device_1` (the boot MAC, the agent ID) and `fleetd_workflow` (its own name; enrollment Workflows get theirs
 * rendered from device_1, as tink-server names them). Pure: no I/O.
 */
import { stringify } from "yaml";
import { z } from "zod";
import { apiVersionOf, ownedLabels, TEMPLATE } from "./api.js";
import { TinkerbellError } from "./errors.js";
import { PINNED_IMAGE, type TinkerbellSiteConfig } from "../fleet/tinkerbellSiteConfig.js";

/** Every kind starts with fleetd-attest: no Template wipes or installs a machine that has not proven its TPM. */
export type TemplateKind = "intake" | "provision" | "attest" | "wipe";
export const TEMPLATE_KINDS: readonly TemplateKind[] = ["intake", "provision", "attest", "wipe"];
export const templateName = (kind: TemplateKind): string => `fleetd-${kind}`;

/** The template YAML's schema as tink-controller reads it (TB tink/controller/internal/workflow/types.go). */
const Action = z.strictObject({
  name: z.string().min(1),
  image: z.string().regex(PINNED_IMAGE, "must be pinned by digest (…@sha256:<64 hex>)"),
  timeout: z.number().int().positive("must be > 0 (0 times out at once)"),
  command: z.array(z.string()).optional(),
  environment: z.record(z.string(), z.string()).optional(),
  volumes: z.array(z.string()).optional(),
  namespaces: z.strictObject({ network: z.literal("host").optional(), pid: z.literal("host").optional() }).optional(),
});
const Task = z.strictObject({
  name: z.string().min(1),
  worker: z.string().min(1),
  volumes: z.array(z.string()).optional(),
  environment: z.record(z.string(), z.string()).optional(),
  actions: z.array(Action).min(1),
});
export const TemplateData = z
  .strictObject({ version: z.literal("0.1"), name: z.string().min(1).max(199), global_timeout: z.number().int().positive(), tasks: z.array(Task).min(1) })
  .superRefine((d, ctx) => {
    const tasks = new Set<string>();
    d.tasks.forEach((t, i) => {
      if (tasks.has(t.name)) ctx.addIssue({ code: "custom", path: ["tasks", i, "name"], message: `task name ${t.name} repeats` });
      tasks.add(t.name);
      const actions = new Set<string>();
      t.actions.forEach((a, j) => {
        if (actions.has(a.name)) ctx.addIssue({ code: "custom", path: ["tasks", i, "actions", j, "name"], message: `action name ${a.name} repeats in task ${t.name}` });
        actions.add(a.name);
      });
    });
  });
export type TemplateData = z.infer<typeof TemplateData>;

/** Refuses a template whose structure tink-controller would refuse, or whose images are not pinned by digest. */
export function checkTemplateData(data: unknown, what: string): TemplateData {
  const r = TemplateData.safeParse(data);
  if (!r.success) {
    const pinned = r.error.issues.find((i) => i.path[i.path.length - 1] === "image");
    const issues = r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
    throw new TinkerbellError(pinned ? "image-not-pinned" : "template-invalid", `Template ${what}: ${issues}`);
  }
  return r.data;
}

export interface TemplateInputs {
  site: TinkerbellSiteConfig;
  /** The CA PEM the action pins (site.server.caFile, read by the caller); undefined for a lab http:// server. */
  serverCaPem?: string;
}

const DISK = "{{ index .Hardware.Disks 0 }}";
/** Every action of the task: HookOS's devices and firmware, and the directory the actions share as /worker. */
const volumesOf = (i: TemplateInputs): string[] => ["/dev:/dev", "/dev/console:/dev/console", "/lib/firmware:/lib/firmware:ro", `${i.site.workerDir}:/worker`];
/** Where a lab swtpm's socket directory appears inside the TPM actions. */
export const TPM_SOCKET_DIR = "/run/fleetd-tpm";

/** Where a lab machine's sysfs/procfs directory appears inside fleetd-attest (FLEETD_ROOT). */
export const LAB_MACHINE_DIR = "/run/fleetd-machine";

/** FLEETD_TPM for the TPM actions, and the volume that brings a lab swtpm's socket into them (none for a device). */
function tpmOf(i: TemplateInputs): { env: string; volumes?: string[] } {
  const t = i.site.tpm;
  return t.kind === "device" ? { env: t.path } : { env: `unix:${TPM_SOCKET_DIR}/${t.socket}`, volumes: [`${t.hostDir}:${TPM_SOCKET_DIR}`] };
}

/** A URL on the host's loopback is reachable only from the host's network namespace (the lab's OS image server). */
export function isLoopbackUrl(u: string): boolean {
  const h = new URL(u).hostname;
  return h === "localhost" || h === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

function attestAction(i: TemplateInputs, mode: "intake" | "provision" | "attest" | "wipe"): z.infer<typeof Action> {
  const env: Record<string, string> = {
    FLEETD_SERVER: i.site.server.url,
    FLEETD_MODE: mode,
    // tink-server names an enrollment Workflow enrollment-<agent ID, ':' → '-'>; others get their name in hardwareMap.
    FLEETD_WORKFLOW: mode === "intake" ? 'enrollment-{{ .device_1 | replace ":" "-" }}' : "{{ .fleetd_workflow }}",
    FLEETD_TPM: tpmOf(i).env,
    FLEETD_OUT: "/worker/fleetd",
    FLEETD_TIMEOUT_SECONDS: String(Math.max(30, i.site.timeouts.attest - 300)),
    FLEETD_LLDP_WAIT_SECONDS: "35",
  };
  if (i.serverCaPem) env["FLEETD_SERVER_CA"] = i.serverCaPem;
  // A TPM 1.2 machine attests in intake and wipe only (the action detects the TPM family); it needs the owner secret.
  if ((mode === "intake" || mode === "wipe") && i.site.tpm12OwnerAuth) env["FLEETD_TPM12_OWNER_AUTH"] = i.site.tpm12OwnerAuth;
  if (i.site.server.url.startsWith("http://")) env["FLEETD_ALLOW_HTTP"] = "lab";
  const volumes = [...(tpmOf(i).volumes ?? [])];
  const lab = i.site.labMachine;
  if (lab) {
    env["FLEETD_ROOT"] = LAB_MACHINE_DIR;
    env["FLEETD_LLDP"] = lab.lldp;
    if (lab.bootInterface) env["FLEETD_BOOT_INTERFACE"] = lab.bootInterface;
    volumes.push(`${lab.root}:${LAB_MACHINE_DIR}:ro`);
  }
  return {
    name: "fleetd-attest",
    image: i.site.images.action,
    timeout: i.site.timeouts.attest,
    command: ["attest", "--mode", mode],
    namespaces: { network: "host" },
    environment: env,
    ...(volumes.length > 0 ? { volumes } : {}),
  };
}

/**
 * Erase the install disk. Before an install its signatures suffice (the image is written over it); retirement
 * (`whole`) erases the whole disk and then checks no signature is left. A discard counts only where the device then
 * reads back zeros (its first MiB, where the partition table wipefs left was): a device may take BLKDISCARD and
 * keep the data (QEMU's default `discard=ignore` does, and SSDs without deterministic zeroes after TRIM may), so
 * otherwise the disk is zeroed end to end.
 */
const wipeAction = (i: TemplateInputs, whole = false): z.infer<typeof Action> => ({
  name: "wipe-disk",
  image: i.site.images.wipe,
  timeout: whole ? i.site.timeouts.wholeDiskWipe : i.site.timeouts.wipe,
  command: ["/bin/sh", "-c", whole
    ? 'wipefs --all --force "$DEST_DISK" && { blkdiscard --force "$DEST_DISK" && cmp --silent --bytes=1048576 "$DEST_DISK" /dev/zero || shred --iterations=0 --zero "$DEST_DISK"; } && wipefs --all --force "$DEST_DISK"'
    : 'wipefs --all --force "$DEST_DISK" && (blkdiscard --force "$DEST_DISK" || dd if=/dev/zero of="$DEST_DISK" bs=1M count=64 conv=fsync)'],
  environment: { DEST_DISK: DISK },
});

/** Retirement, where the site allows it: TPM2_Clear (owner hierarchy), so the old LDevID/LAK blobs no longer load. */
const clearTpmAction = (i: TemplateInputs): z.infer<typeof Action> => ({
  name: "fleetd-clear-tpm",
  image: i.site.images.action,
  timeout: i.site.timeouts.clearTpm,
  command: ["clear-tpm"],
  environment: { FLEETD_TPM: tpmOf(i).env, FLEETD_CLEAR_TPM: "yes" },
  ...(tpmOf(i).volumes ? { volumes: tpmOf(i).volumes } : {}),
});

function actionsOf(kind: TemplateKind, i: TemplateInputs): z.infer<typeof Action>[] {
  switch (kind) {
    case "intake":
      return [attestAction(i, "intake")];
    case "attest":
      return [attestAction(i, "attest")];
    case "wipe":
      return [attestAction(i, "wipe"), wipeAction(i, true), ...(i.site.clearTpmOnRetire ? [clearTpmAction(i)] : [])];
    case "provision":
      return [
        attestAction(i, "provision"),
        wipeAction(i),
        { name: "install-talos", image: i.site.images.image2disk, timeout: i.site.timeouts.install,
          environment: { IMG_URL: i.site.talosImageUrl, DEST_DISK: DISK, COMPRESSED: "true" },
          ...(isLoopbackUrl(i.site.talosImageUrl) ? { namespaces: { network: "host" as const } } : {}) },
        { name: "fleetd-write-meta", image: i.site.images.action, timeout: i.site.timeouts.writeMeta,
          command: ["write-meta", "--disk", DISK, "--code-file", "/worker/fleetd/install-code"] },
      ];
  }
}

export function buildTemplateData(kind: TemplateKind, i: TemplateInputs): TemplateData {
  if (i.site.server.url.startsWith("https://") && !i.serverCaPem?.includes("-----BEGIN CERTIFICATE-----")) {
    throw new TinkerbellError("template-invalid", `Template ${templateName(kind)}: an https server needs its CA certificate (PEM) for the action to pin`);
  }
  const actions = actionsOf(kind, i);
  const data = {
    version: "0.1" as const,
    name: templateName(kind),
    // the actions' own timeouts may add up to more than the site's global timeout (zeroing a disk)
    global_timeout: Math.max(i.site.timeouts.global, actions.reduce((n, a) => n + a.timeout, 0)),
    tasks: [{ name: kind, worker: "{{ .device_1 }}", volumes: volumesOf(i), actions }],
  };
  return checkTemplateData(data, templateName(kind));
}

export interface TemplateObject {
  apiVersion: string;
  kind: "Template";
  metadata: { name: string; namespace: string; labels: Record<string, string> };
  spec: { data: string };
}

export function buildTemplate(kind: TemplateKind, i: TemplateInputs, namespace: string): TemplateObject {
  const data = buildTemplateData(kind, i);
  return {
    apiVersion: apiVersionOf(TEMPLATE),
    kind: "Template",
    metadata: { name: templateName(kind), namespace, labels: { ...ownedLabels(), "fleetd.io/template": kind } },
    spec: { data: stringify(data, { lineWidth: 0 }) },
  };
}

/** The Templates fleetd keeps in the namespace: all kinds (intake only when auto-enrollment is on). */
export function buildTemplates(i: TemplateInputs, namespace: string): TemplateObject[] {
  return TEMPLATE_KINDS.filter((k) => k !== "intake" || i.site.intake.enabled).map((k) => buildTemplate(k, i, namespace));
}
