/**
 * A node's Talos machine config by its inventory role: one entry point for the attestation server's renderer
 * (protocol/server/adapters/renderer.ts), so a role the renderers do not know cannot fall through to a worker.
 */
import type { RenderedConfig } from "./machineConfig.js";
import { renderControlPlaneConfig } from "./renderControlPlane.js";
import { renderWorkerConfig } from "./renderWorker.js";
import type { BootstrapToken } from "./token.js";

export type NodeRole = "worker" | "control-plane";

export function renderNodeConfig(siteInput: unknown, role: NodeRole, nodeInput: unknown, opts: { token?: BootstrapToken } = {}): RenderedConfig {
  switch (role) {
    case "worker":
      return renderWorkerConfig(siteInput, nodeInput, opts);
    case "control-plane":
      return renderControlPlaneConfig(siteInput, nodeInput, opts);
  }
}
