#!/usr/bin/env node
/**
 * `fleetd-tink-action` — the commands the HookOS action container runs, one per workflow step:
 *   fleetd-tink-action attest --mode intake|provision|attest|wipe      (FLEETD_* environment; see attest.ts)
 *   fleetd-tink-action write-meta --disk DEV (--code-file FILE | --code HEX) [--init] [--sector-size N]
 *   fleetd-tink-action lldp [--interface IF] [--wait S]               (what attest would claim about the switch port)
 *   fleetd-tink-action clear-tpm                                      (FLEETD_CLEAR_TPM=yes: TPM2_Clear at retirement)
 *   fleetd-tink-action renew [--once | --seed-only] [flags]           (the node agent on Talos; renewCommand.ts)
 * Exit codes, every subcommand: fleetd's one table (`EXIT`, @fleetd/platform/cmd; `--help` lists it): 0 done;
 * 1 refused (write-meta: the disk is left unchanged); 2 usage, configuration or local input; 3 still pending at
 * the timeout (attest); 4 an unexpected failure; 5 TPM or transport failure (renew: the per-mode details are in
 * renewCommand.ts — running, it retries failures instead of exiting).
 */
import { type CliCommand, CliUsageError, EXIT, EXIT_CODES_HELP, type ExitCode, exitCodeOf, printError } from "@fleetd/platform/cmd";

const COMMANDS: Record<string, { summary: string; load: () => Promise<{ command: CliCommand }> }> = {
  attest: {
    summary: "attest this machine's TPM to the fleetd server and leave the results (and, in provision, the install code) on the shared volume",
    load: () => import("./attest.js"),
  },
  lldp: {
    summary: "show the boot interface and the LLDP neighbour the attest step would claim",
    load: () => import("./lldpCommand.js"),
  },
  "clear-tpm": {
    summary: "clear the TPM's owner hierarchy (TPM2_Clear, lockout) at retirement, where the site allows it (FLEETD_CLEAR_TPM=yes)",
    load: () => import("./clearTpm.js"),
  },
  renew: {
    summary: "the node agent on Talos: copy the LDevID seed once, attest the running OS at every start, renew the LDevID at two thirds of its lifetime and restart spire-agent",
    load: () => import("./renewCommand.js"),
  },
  "write-meta": {
    summary: "write the install code into META key 0x0b of a Talos disk (or image), keeping the other keys",
    load: () => import("./writeMeta.js"),
  },
};

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((k) => k.length));
  const lines = Object.entries(COMMANDS).map(([k, v]) => `  ${k.padEnd(width)}  ${v.summary}`);
  return `usage: fleetd-tink-action <command> [options]\n\ncommands:\n${lines.join("\n")}\n\n${EXIT_CODES_HELP}`;
}

async function main(argv: string[]): Promise<ExitCode> {
  const [name, ...args] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    process.stdout.write(usage() + "\n");
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  const entry = COMMANDS[name];
  if (!entry) {
    process.stderr.write(`fleetd-tink-action: unknown command "${name}"\n\n${usage()}\n`);
    return EXIT.usage;
  }
  const { command } = await entry.load();
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(`usage: fleetd-tink-action ${name} ${command.usage}\n\n${entry.summary}\n\n${EXIT_CODES_HELP}\n`);
    return EXIT.ok;
  }
  try {
    return await command.run(args);
  } catch (e) {
    if (e instanceof CliUsageError) {
      process.stderr.write(`fleetd-tink-action ${name}: ${e.message}\nusage: fleetd-tink-action ${name} ${command.usage}\n`);
      return EXIT.usage;
    }
    const code = exitCodeOf(e, (await import("./errorExits.js")).ACTION_ERROR_EXITS);
    printError(e, code === EXIT.internal);
    return code;
  }
}

process.exitCode = await main(process.argv.slice(2));
