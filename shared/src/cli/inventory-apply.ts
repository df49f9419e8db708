/** `fleetd inventory apply FILE [--dry-run] [--config FILE]`: put a nodes file into NetBox, idempotently. */
import { readFileSync } from "node:fs";
import { inventoryApply } from "../inventory/apply.js";
import { parseNodesFile } from "../inventory/nodesFile.js";
import { createNetBox } from "../netbox/client.js";
import { loadSiteConfig } from "../netbox/config.js";
import { renderPlan } from "../netbox/sync.js";
import { type CliCommand, CliUsageError, parseOptions } from "./common.js";

export function readNodesFile(path: string | undefined): ReturnType<typeof parseNodesFile> {
  if (!path) throw new CliUsageError("missing nodes FILE");
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new CliUsageError(`cannot read nodes file ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  return parseNodesFile(text, path);
}

export const command: CliCommand = {
  usage: "FILE [--dry-run] [--config FLEETD_CONFIG]",
  async run(args) {
    const { values, positionals } = parseOptions(args, { "dry-run": { type: "boolean" }, config: { type: "string" } }, [], 1);
    const file = readNodesFile(positionals[0]);
    const cfg = loadSiteConfig(typeof values["config"] === "string" ? values["config"] : undefined);
    const nb = createNetBox(cfg.netbox);
    const dryRun = values["dry-run"] === true;
    const res = await inventoryApply(nb, file, { dryRun, applyAccount: cfg.accounts.apply });
    process.stdout.write(renderPlan(res.changes, dryRun || res.conflicts.length > 0 ? "Plan" : "Applied") + "\n");
    if (res.conflicts.length > 0) {
      process.stderr.write(`refused: nothing was changed in NetBox:\n${res.conflicts.map((c) => `  ${c}`).join("\n")}\n`);
      return 1;
    }
    return 0;
  },
};
