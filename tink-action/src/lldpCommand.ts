/**
 * `fleetd-tink-action lldp [--interface IF] [--wait SECONDS] [--root DIR]` — what the attest step would claim
 * about the switch port: the boot interface it picks and the LLDP neighbour lldpd sees there (JSON on
 * stdout). For operators checking the cabling, and for tests.
 */
import { type CliCommand, CliUsageError, EXIT, parseOptions, printJson, str } from "@fleetd/platform/cmd";
import { bootInterface, listInterfaces } from "./claims.js";
import { DEFAULT_LLDP_WAIT_SECONDS, IFNAME } from "./config.js";
import { readLldp } from "./lldp/lldpd.js";

export const command: CliCommand = {
  usage: `[--interface IF] [--wait SECONDS (default ${DEFAULT_LLDP_WAIT_SECONDS})] [--root DIR (default /)]`,
  async run(args) {
    const { values } = parseOptions(args, { interface: { type: "string" }, wait: { type: "string" }, root: { type: "string" } });
    const iface = values["interface"] !== undefined ? str(values, "interface") : undefined;
    if (iface !== undefined && !IFNAME.test(iface)) throw new CliUsageError("--interface must be a network interface name");
    const waitText = values["wait"] !== undefined ? str(values, "wait") : String(DEFAULT_LLDP_WAIT_SECONDS);
    if (!/^\d{1,3}$/.test(waitText)) throw new CliUsageError("--wait must be whole seconds (0-999)");
    const root = values["root"] !== undefined ? str(values, "root") : "/";
    const boot = bootInterface(root, iface ? [] : listInterfaces(root), iface);
    if (!boot) {
      printJson({ bootInterface: null, lldp: null, reason: "no boot interface found (give --interface)" });
      return EXIT.refused;
    }
    const r = await readLldp({ iface: boot.name, waitMs: Number(waitText) * 1000, onProgress: (m) => process.stderr.write(m + "\n") });
    printJson({ bootInterface: boot, lldp: r.lldp, reason: r.reason });
    return r.lldp ? EXIT.ok : EXIT.refused;
  },
};
