/** `fleetd netbox setup [--dry-run] [--config FILE]`: custom fields, choice sets, webhook, event rules, links. */
import { createNetBox, netboxSetup, renderPlan } from "@fleetd/platform/netbox";
import { loadSiteConfig } from "@fleetd/platform/fleet";
import { type CliCommand, EXIT, parseOptions } from "@fleetd/platform/cmd";

export const command: CliCommand = {
  usage: "[--dry-run] [--config FLEETD_CONFIG]",
  async run(args) {
    const { values } = parseOptions(args, { "dry-run": { type: "boolean" }, config: { type: "string" } });
    const cfg = loadSiteConfig(typeof values["config"] === "string" ? values["config"] : undefined);
    const dryRun = values["dry-run"] === true;
    const changes = await netboxSetup(createNetBox(cfg.netbox), cfg, dryRun);
    process.stdout.write(renderPlan(changes, dryRun ? "Plan" : "Applied") + "\n");
    return EXIT.ok;
  },
};
