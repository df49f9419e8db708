/**
 * `fleetd retire status [NODE] [--config FILE] [--json]` — where each retirement stands, from its progress
 * record (ConfigMap `fleetd-retire-<node>` in the management namespace of the site configuration's
 * `kubernetes` section): per step its state, attempts, owner, completion or what it waits for. Without NODE,
 * every node with a record. Exit 0; 1 when NODE has no record.
 */
import { ConfigError, loadSiteConfig } from "@fleetd/platform/fleet";
import { type ProgressRecord, configMapProgress, STEP_NAMES } from "@fleetd/platform/retire";
import { type CliCommand, EXIT, parseOptions, printJson } from "@fleetd/platform/cmd";
import { kubeOption } from "./kubeInput.js";

export function renderProgress(rec: ProgressRecord): string {
  const rows = STEP_NAMES.map((s) => {
    const r = rec.steps[s];
    if (!r) return [s, "pending", "0", "", ""];
    const what = r.state === "done" ? `${r.completedAt ?? ""} ${r.detail ?? ""}` : `${r.blocked ? "BLOCKED: " : ""}${r.waitingFor ?? `claimed at ${r.claimedAt}`}`;
    return [s, r.state, String(r.attempts), r.owner, what.trim()];
  });
  const head = ["STEP", "STATE", "ATTEMPTS", "OWNER", "DETAIL"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join("  ");
  const status = rec.finishedAt ? `complete at ${rec.finishedAt}` : `in progress since ${rec.startedAt}`;
  return [`${rec.node}: retirement ${status}`, line(head), ...rows.map(line)].join("\n");
}

export const command: CliCommand = {
  usage: "[NODE] [--config FLEETD_CONFIG] [--json]",
  async run(args) {
    const { values, positionals } = parseOptions(args, { config: { type: "string" }, json: { type: "boolean" } }, [], 1);
    const cfg = loadSiteConfig(typeof values["config"] === "string" ? values["config"] : undefined);
    if (!cfg.kubernetes) throw new ConfigError("the configuration has no kubernetes section (management kubeconfig and namespace)");
    const progress = configMapProgress(kubeOption(cfg.kubernetes.management.kubeconfig, "kubernetes.management.kubeconfig"), cfg.kubernetes.management.namespace);
    const nodes = positionals[0] !== undefined ? [positionals[0]] : (await progress.list()).sort();
    const records: ProgressRecord[] = [];
    for (const n of nodes) {
      const got = await progress.read(n);
      if (got) records.push(got.record);
      else if (positionals[0] !== undefined) {
        process.stderr.write(`fleetd retire status: no retirement record for ${n}\n`);
        return EXIT.refused;
      }
    }
    if (values["json"] === true) printJson({ retirements: records });
    else process.stdout.write(records.length ? `${records.map(renderProgress).join("\n\n")}\n` : "no retirements\n");
    return EXIT.ok;
  },
};
