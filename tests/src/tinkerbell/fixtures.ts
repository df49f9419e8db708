/**
 * Shared pieces of the Tinkerbell integration tests: one control plane + Tinkerbell per test file, typed
 * access to the tinkerbell.org and bmc.tinkerbell.org objects, and the objects fleetd creates (Hardware,
 * Template, Workflow, BMC Secret, Machine).
 */
import * as k8s from "@kubernetes/client-node";
import { z } from "zod";
import { startControlPlane, type ControlPlane, type ControlPlaneOptions } from "../harness/kube.js";
import { startTinkerbell, type Tinkerbell } from "../harness/tinkerbell.js";
import { installTinkerbellCrds } from "../harness/tinkerbellCrds.js";
import { pollValue } from "../harness/ports.js";

export interface Env {
  cp: ControlPlane;
  tb: Tinkerbell;
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  custom: k8s.CustomObjectsApi;
  namespace: string;
  crds: string[];
  /** Control plane and Tinkerbell output, for failure messages. */
  logs(): string;
  stop(): Promise<void>;
}

export async function startEnv(namespace: string, opts: { autoEnrollment?: boolean; controlPlane?: ControlPlaneOptions } = {}): Promise<Env> {
  const cp = await startControlPlane(opts.controlPlane);
  try {
    const crds = await installTinkerbellCrds(cp);
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(cp.kubeconfig);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    const tb = await startTinkerbell(cp, { namespace, logLevel: 1, ...(opts.autoEnrollment ? { autoEnrollment: true } : {}) });
    return {
      cp, tb, kc, core, custom: kc.makeApiClient(k8s.CustomObjectsApi), namespace, crds,
      logs: () => `--- tinkerbell\n${tb.logs()}\n${cp.logs().slice(-3000)}`,
      stop: async () => {
        await tb.stop();
        await cp.stop();
      },
    };
  } catch (e) {
    await cp.stop();
    throw e;
  }
}

export type Kind = "hardware" | "templates" | "workflows" | "machines" | "jobs" | "tasks";
const groupOf = (k: Kind) => (k === "machines" || k === "jobs" || k === "tasks" ? "bmc.tinkerbell.org" : "tinkerbell.org");

export async function create(env: Env, kind: Kind, body: object): Promise<unknown> {
  return env.custom.createNamespacedCustomObject({ group: groupOf(kind), version: "v1alpha1", namespace: env.namespace, plural: kind, body });
}

export async function get(env: Env, kind: Kind, name: string): Promise<unknown> {
  return env.custom.getNamespacedCustomObject({ group: groupOf(kind), version: "v1alpha1", namespace: env.namespace, plural: kind, name });
}

/** Every object of `kind` in the namespace. */
export async function list(env: Env, kind: Kind): Promise<unknown[]> {
  const r = (await env.custom.listNamespacedCustomObject({ group: groupOf(kind), version: "v1alpha1", namespace: env.namespace, plural: kind })) as { items?: unknown[] };
  return r.items ?? [];
}

export async function remove(env: Env, kind: Kind, name: string): Promise<void> {
  await env.custom.deleteNamespacedCustomObject({ group: groupOf(kind), version: "v1alpha1", namespace: env.namespace, plural: kind, name });
}

/** Poll `probe` until it returns a value; the failure message carries the last error and Tinkerbell's log. */
export function poll<T>(env: Env, what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  return pollValue(what, probe, { timeoutMs, context: () => env.logs().slice(-6000) });
}

/** The HTTP status and body of a failed Kubernetes API call (client-node's ApiException). */
export function apiError(e: unknown): { code: number; body: string } {
  const x = e as { code?: unknown; body?: unknown };
  if (typeof x.code !== "number") throw e;
  return { code: x.code, body: typeof x.body === "string" ? x.body : JSON.stringify(x.body) };
}

// ---- what the tests read back ------------------------------------------------------------------------------

export const WorkflowAction = z.object({
  id: z.string(),
  name: z.string(),
  image: z.string(),
  timeout: z.number().optional(),
  command: z.array(z.string()).optional(),
  volumes: z.array(z.string()).optional(),
  environment: z.record(z.string(), z.string()).optional(),
  state: z.string().optional(),
  message: z.string().optional(),
}).passthrough();

export const Workflow = z.object({
  metadata: z.object({ name: z.string(), uid: z.string() }).passthrough(),
  status: z.object({
    state: z.string().optional(),
    agentID: z.string().optional(),
    templateRendering: z.string().optional(),
    tasks: z.array(z.object({
      id: z.string().optional(),
      name: z.string(),
      agentID: z.string(),
      volumes: z.array(z.string()).optional(),
      environment: z.record(z.string(), z.string()).optional(),
      actions: z.array(WorkflowAction),
    }).passthrough()).optional(),
    bootOptions: z.object({
      allowNetboot: z.object({ toggledTrue: z.boolean().optional(), toggledFalse: z.boolean().optional() }).passthrough().optional(),
      jobs: z.record(z.string(), z.object({ uid: z.string().optional(), complete: z.boolean().optional(), existingJobDeleted: z.boolean().optional() }).passthrough()).optional(),
    }).passthrough().optional(),
    conditions: z.array(z.object({ type: z.string(), status: z.string(), reason: z.string().optional(), message: z.string().optional() }).passthrough()).optional(),
  }).passthrough().optional(),
}).passthrough();
export type Workflow = z.infer<typeof Workflow>;

export const Hardware = z.object({
  metadata: z.object({ name: z.string(), annotations: z.record(z.string(), z.string()).optional() }).passthrough(),
  spec: z.object({
    interfaces: z.array(z.object({
      dhcp: z.object({ mac: z.string() }).passthrough().optional(),
      netboot: z.object({ allowPXE: z.boolean().optional(), allowWorkflow: z.boolean().optional() }).passthrough().optional(),
    }).passthrough()).optional(),
  }).passthrough(),
}).passthrough();

/** Rufio v0.25.0's duplicate-Task race: a Job's first Task is created twice and the Job fails with this message. */
export const RUFIO_TASK_RACE = /failed to create Task \S+: tasks\.bmc\.tinkerbell\.org "\S+" already exists/;

export const Condition = z.object({ type: z.string(), status: z.string(), message: z.string().optional() }).passthrough();
export const BmcJob = z.object({
  metadata: z.object({ name: z.string(), ownerReferences: z.array(z.object({ kind: z.string(), name: z.string(), uid: z.string() }).passthrough()).optional() }).passthrough(),
  spec: z.object({ machineRef: z.object({ name: z.string(), namespace: z.string() }), tasks: z.array(z.record(z.string(), z.unknown())) }).passthrough(),
  status: z.object({ conditions: z.array(Condition).optional() }).passthrough().optional(),
}).passthrough();
export const Machine = z.object({
  status: z.object({ powerState: z.string().optional(), conditions: z.array(Condition).optional() }).passthrough().optional(),
}).passthrough();

export async function workflow(env: Env, name: string): Promise<Workflow> {
  return Workflow.parse(await get(env, "workflows", name));
}

export const condition = (conds: readonly z.infer<typeof Condition>[] | undefined, type: string) => conds?.find((c) => c.type === type);

// ---- objects as fleetd writes them -------------------------------------------------------------------------

export function hardwareBody(name: string, mac: string, extra: { bmcRef?: string; allowPXE?: boolean } = {}): object {
  return {
    apiVersion: "tinkerbell.org/v1alpha1",
    kind: "Hardware",
    metadata: { name },
    spec: {
      ...(extra.bmcRef ? { bmcRef: { apiGroup: "bmc.tinkerbell.org", kind: "Machine", name: extra.bmcRef } } : {}),
      disks: [{ device: "/dev/nvme0n1" }],
      interfaces: [{
        dhcp: {
          mac, hostname: name, arch: "x86_64", uefi: true,
          ip: { address: "192.0.2.21", netmask: "255.255.255.0", gateway: "192.0.2.1" },
          name_servers: ["192.0.2.1"],
        },
        netboot: { allowPXE: extra.allowPXE ?? false, allowWorkflow: true },
      }],
      metadata: { instance: { id: `${name}-instance`, hostname: name } },
      userData: "#talos-config-placeholder",
    },
  };
}

/** A two-action template that renders Hardware fields into env (as fleetd's tink-action expects them). */
export const templateData = [
  'version: "0.1"',
  "name: fleetd-provision",
  "global_timeout: 1800",
  "tasks:",
  "  - name: provision",
  '    worker: "{{.device_1}}"',
  "    volumes:",
  '      - "/dev:/dev"',
  "    environment:",
  '      WORKER_ID: "{{.device_1}}"',
  "    actions:",
  "      - name: attest",
  '        image: "registry.invalid/fleetd/tink-action:test"',
  "        timeout: 600",
  "        environment:",
  '          HW_NAME: "{{ .hardware.metadata.name }}"',
  '          DISK: "{{ index .Hardware.Disks 0 }}"',
  '          INSTANCE_ID: "{{ .hardware.spec.metadata.instance.id }}"',
  "      - name: write-config",
  '        image: "registry.invalid/fleetd/writefile:test"',
  "        timeout: 300",
  '        command: ["--mode", "0600"]',
  "        environment:",
  '          DEST_DISK: "{{ index .Hardware.Disks 0 }}p2"',
  '          WORKER_ID: "overridden-by-action"',
  "",
].join("\n");

export function templateBody(name: string): object {
  return { apiVersion: "tinkerbell.org/v1alpha1", kind: "Template", metadata: { name }, spec: { data: templateData } };
}

export function workflowBody(name: string, hw: string, tpl: string, mac: string, bootOptions?: object): object {
  return {
    apiVersion: "tinkerbell.org/v1alpha1",
    kind: "Workflow",
    metadata: { name },
    spec: { templateRef: tpl, hardwareRef: hw, hardwareMap: { device_1: mac }, ...(bootOptions ? { bootOptions } : {}) },
  };
}

export async function bmcSecret(env: Env, name: string, username: string, password: string): Promise<void> {
  await env.core.createNamespacedSecret({ namespace: env.namespace, body: { metadata: { name }, type: "kubernetes.io/basic-auth", stringData: { username, password } } });
}

export function machineBody(name: string, port: number, secret: string, namespace: string): object {
  return {
    apiVersion: "bmc.tinkerbell.org/v1alpha1",
    kind: "Machine",
    metadata: { name },
    spec: {
      connection: {
        host: "127.0.0.1",
        authSecretRef: { name: secret, namespace },
        insecureTLS: true,
        providerOptions: { preferredOrder: ["gofish"], redfish: { port, useBasicAuth: true } },
      },
    },
  };
}

const digest = (c: string) => `sha256:${c.repeat(64)}`;

/**
 * The site configuration's `kubernetes` section the handler tests use: one cluster as both management and
 * workload, fleetd's images pinned by (made-up) digests, the server's CA from `caFile`; `extra` is merged into
 * the `tinkerbell` block (BMC provider settings, clearTpmOnRetire…).
 */
export function kubernetesSection(kubeconfig: string, namespace: string, caFile: string, extra: Record<string, unknown> = {}): object {
  return {
    management: {
      kubeconfig,
      namespace,
      tinkerbell: {
        server: { url: "https://fleetd.example.internal:8443", caFile, lab: false },
        images: {
          action: `registry.example.internal/fleetd/fleetd-tink-action@${digest("a")}`,
          wipe: `docker.io/library/debian:bookworm-slim@${digest("b")}`,
          image2disk: `quay.io/tinkerbell/actions/image2disk@${digest("c")}`,
        },
        talosImageUrl: "https://factory.talos.dev/image/0123abcd/v1.13.9/metal-amd64.raw.zst",
        ...extra,
      },
    },
    workload: { kubeconfig },
  };
}
