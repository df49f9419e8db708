/** `fleetd inventory check FILE [--json] [--config FILE]`: file vs NetBox vs what machines reported; 1 on drift. */
import { inventoryCheck, renderTable } from "@fleetd/platform/inventory";
import { createNetBox } from "@fleetd/platform/netbox";
import { loadSiteConfig } from "@fleetd/platform/fleet";
import { type CliCommand, EXIT, parseOptions, printJson } from "@fleetd/platform/cmd";
import { readNodesFile } from "./inventory-apply.js";

export const command: CliCommand = {
  usage: "FILE [--json] [--config FLEETD_CONFIG]",
  async run(args) {
    const { values, positionals } = parseOptions(args, { json: { type: "boolean" }, config: { type: "string" } }, [], 1);
    const file = readNodesFile(positionals[0]);
    const cfg = loadSiteConfig(typeof values["config"] === "string" ? values["config"] : undefined);
    const rows = await inventoryCheck(createNetBox(cfg.netbox), file, cfg.accounts.apply);
    const drift = rows.filter((r) => !r.ok);
    if (values["json"] === true) printJson({ drift: drift.length, rows });
    else process.stdout.write(`${renderTable(rows)}\n${drift.length === 0 ? "no drift" : `${drift.length} difference(s)`}\n`);
    return drift.length === 0 ? EXIT.ok : EXIT.refused;
  },
};
