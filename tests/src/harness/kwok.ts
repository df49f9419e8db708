/**
 * KWOK (sigs.k8s.io/kwok) against a real control plane: it marks the Nodes it manages Ready (and keeps their
 * leases) and moves pods bound to them through their lifecycle — Running and Ready, then gone once deleted
 * (an eviction's delete) — so node retirement is tested with real evictions and no kubelet or container runtime.
 * Built by tests/go/kwok/build.sh (cached). Only Nodes annotated `kwok.x-k8s.io/node: fake` are managed.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type * as k8s from "@kubernetes/client-node";
import { freeLoopbackPorts, registerCleanup, startDaemon, type Daemon } from "./process.js";
import { runSetupScript } from "./setupScript.js";

export const KWOK_ANNOTATION = "kwok.x-k8s.io/node";

export async function kwokBinary(): Promise<string> {
  return join(await runSetupScript("tests/go/kwok/build.sh", { needs: "Go >= 1.26 and the Go module proxy" }), "kwok");
}

export interface Kwok {
  readonly daemon: Daemon;
  stop(): Promise<void>;
}

/** Start kwok with an admin kubeconfig; its own server listens on loopback only. */
export async function startKwok(kubeconfig: string): Promise<Kwok> {
  const bin = await kwokBinary();
  const dir = mkdtempSync(join(tmpdir(), "fleetd-kwok-"));
  const unregister = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  const config = join(dir, "kwok.yaml");
  writeFileSync(config, "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions: {}\n");
  const [port] = (await freeLoopbackPorts(1)) as [number];
  const daemon = startDaemon("kwok", bin, [
    `--kubeconfig=${kubeconfig}`, `--config=${config}`,
    `--manage-nodes-with-annotation-selector=${KWOK_ANNOTATION}=fake`,
    "--node-ip=127.0.0.1", `--server-address=127.0.0.1:${port}`, "--cidr=10.244.0.1/24",
  ], { env: { ...process.env, HOME: dir } });
  return {
    daemon,
    async stop() {
      await daemon.stop(3000);
      rmSync(dir, { recursive: true, force: true });
      unregister();
    },
  };
}

/** A Node object KWOK manages (it sets the Ready condition and addresses). */
export function kwokNode(name: string, labels: Record<string, string> = {}): k8s.V1Node {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name, annotations: { [KWOK_ANNOTATION]: "fake" }, labels: { "kubernetes.io/hostname": name, type: "kwok", ...labels } },
    status: { allocatable: { cpu: "32", memory: "256Gi", pods: "110" }, capacity: { cpu: "32", memory: "256Gi", pods: "110" } },
  };
}
