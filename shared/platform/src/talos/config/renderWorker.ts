/**
 * Renders a Talos v1alpha1 machine config for a worker: the common node config (machineConfig.ts) and nothing
 * more. A worker carries CA certificates only, never a key.
 *
 * Every input comes from the site configuration or the node input, both checked with zod first.
 * The caller creates kube-system/bootstrap-token-<id> for the returned token before serving the config.
 */
import { baseConfig, checkInputs, type RenderedConfig, toYaml } from "./machineConfig.js";
import type { BootstrapToken } from "./token.js";

export function renderWorkerConfig(siteInput: unknown, nodeInput: unknown, opts: { token?: BootstrapToken } = {}): RenderedConfig {
  const inputs = checkInputs(siteInput, nodeInput, opts.token);
  const config = baseConfig(inputs);
  return { yaml: toYaml(config), bootstrapToken: inputs.token, seedPaths: config.machine.files.map((f) => f.path) };
}
