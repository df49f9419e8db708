#!/usr/bin/env node
/**
 * `fleetd` — the operator CLI. Each command lives in its own module, loaded on demand:
 *   pnpm -s fleetd <group> <command> [options]
 * Exit codes: fleetd's one table (`EXIT`, @fleetd/platform/cmd): 0 ok, 1 a check failed or the request was refused
 * (the output says which), 2 usage or input error, 4 an unexpected failure (with the stack), 5 a dependency (NetBox,
 * Kubernetes) did not answer.
 */
import { own } from "@fleetd/verify/text";
import { type CliCommand, CliUsageError, EXIT, EXIT_CODES_HELP, type ExitCode, exitCodeOf, printError } from "@fleetd/platform/cmd";

const COMMANDS: Record<string, { summary: string; load: () => Promise<{ command: CliCommand }> }> = {
  // commands are registered here, one entry each
  "verify make-credential": {
    summary: "wrap a secret to an EK for an AK Name (tpm2_activatecredential input)",
    load: () => import("./verifyMakeCredential.js"),
  },
  "verify quote": {
    summary: "verify a tpm2_quote message/signature/PCR file against an AK and a nonce",
    load: () => import("./verifyQuote.js"),
  },
  "verify certify": {
    summary: "verify a tpm2_certify attestation against an AK, the certified public area and qualifying data",
    load: () => import("./verifyCertify.js"),
  },
  "verify ek": { summary: "EK certificate chain, EK binding and template checks", load: () => import("./verifyEk.js") },
  "verify eventlog": { summary: "parse and replay a TCG event log; show Secure Boot state and events", load: () => import("./verifyEventlog.js") },
  "verify policy": { summary: "evaluate a class profile (hookos, talos, ubuntu) against an event log and PCR values", load: () => import("./verifyPolicy.js") },
  "inventory apply": { summary: "put a nodes file into NetBox (idempotent; --dry-run prints the plan)", load: () => import("./inventory-apply.js") },
  "inventory check": { summary: "compare the nodes file, NetBox and what machines reported; exit 1 on drift", load: () => import("./inventory-check.js") },
  "netbox setup": { summary: "create fleetd's custom fields, webhook, event rules and custom links in NetBox (idempotent)", load: () => import("./netbox-setup.js") },
  "kube setup": { summary: "apply the CSR gate's RBAC and approval policy to the workload cluster (idempotent; --print for YAML)", load: () => import("./kubeSetup.js") },
  "retire status": { summary: "show each node retirement's steps (progress records in the management cluster)", load: () => import("./retire-status.js") },
  pending: { summary: "list unknown EKs waiting for an operator (from talos-config-server's state database)", load: () => import("./pending.js") },
  lab: { summary: "the lab (a checkout only): up, down, provision|attest|wipe|retire NODE, console NODE", load: () => import("./lab.js") },
};

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((k) => k.length));
  const lines = Object.entries(COMMANDS).map(([k, v]) => `  ${k.padEnd(width)}  ${v.summary}`);
  return `usage: fleetd <command> [options]\n\ncommands:\n${lines.join("\n")}\n\nfleetd <command> --help shows a command's options.\n\n${EXIT_CODES_HELP}`;
}

async function main(argv: string[]): Promise<ExitCode> {
  if (argv.length === 0 || argv[0] === "--help" || argv[0] === "-h" || argv[0] === "help") {
    process.stdout.write(usage() + "\n");
    return argv.length === 0 ? EXIT.usage : EXIT.ok;
  }
  for (const words of [2, 1]) {
    const key = argv.slice(0, words).join(" ");
    const entry = own(COMMANDS, key);
    if (!entry) continue;
    const { command } = await entry.load();
    const args = argv.slice(words);
    if (args.includes("--help") || args.includes("-h")) {
      process.stdout.write(`usage: fleetd ${key} ${command.usage}\n\n${entry.summary}\n\n${EXIT_CODES_HELP}\n`);
      return EXIT.ok;
    }
    try {
      return await command.run(args);
    } catch (e) {
      if (e instanceof CliUsageError) {
        process.stderr.write(`fleetd ${key}: ${e.message}\nusage: fleetd ${key} ${command.usage}\n`);
        return EXIT.usage;
      }
      const code = exitCodeOf(e, { usage: (await import("./usageErrors.js")).USAGE_ERRORS });
      printError(e, code === EXIT.internal);
      return code;
    }
  }
  process.stderr.write(`fleetd: unknown command "${argv.slice(0, 2).join(" ")}"\n\n${usage()}\n`);
  return EXIT.usage;
}

process.exitCode = await main(process.argv.slice(2));
