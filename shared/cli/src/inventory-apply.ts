/** `fleetd inventory apply FILE [--dry-run] [--config FILE]`: put a nodes file into NetBox, idempotently. */
import { readFileSync } from "node:fs";
import { inventoryApply } from "@fleetd/platform/inventory";
import { NodesFileError, parseNodesFile, loadSiteConfig } from "@fleetd/platform/fleet";
import { ProfileError } from "@fleetd/verify/policy";
import { loadProfile } from "@fleetd/platform/trust";
import { createNetBox, renderPlan } from "@fleetd/platform/netbox";
import { type CliCommand, CliUsageError, EXIT, parseOptions } from "@fleetd/platform/cmd";

export function readNodesFile(path: string | undefined): ReturnType<typeof parseNodesFile> {
  if (!path) throw new CliUsageError("missing nodes FILE");
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new CliUsageError(`cannot read nodes file ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const file = parseNodesFile(text, path);
  // A class names a policy profile: refuse a file whose classes no profile answers to.
  const unknown = Object.entries(file.nodes).filter(([, n]) => {
    try {
      loadProfile(n.class);
      return false;
    } catch (e) {
      if (e instanceof ProfileError) return true;
      throw e;
    }
  });
  if (unknown.length > 0) {
    throw new NodesFileError(
      path,
      unknown.map(([name, n]) => ({ path: `nodes.${name}.class`, line: undefined, message: `no policy profile named ${n.class} (see policy/)` })),
    );
  }
  return file;
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
      return EXIT.refused;
    }
    return EXIT.ok;
  },
};
