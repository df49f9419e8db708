/**
 * `fleetd lab SUBCOMMAND …`: the lab's commands (up, down, provision, attest, wipe, retire, console). The lab —
 * real platforms and QEMU machines on this host — is part of a fleetd checkout, not of the product: the commands
 * live in tests/src/lab/cli.ts and are loaded from the checkout's build (tests/dist). Anywhere else this says so.
 */
import { existsSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { CliUsageError, EXIT, type CliCommand, type ExitCode } from "@fleetd/platform/cmd";

const LAB_CLI = fileURLToPath(new URL("../../../tests/dist/lab/cli.js", import.meta.url));

interface LabModule {
  labCommands: Record<string, { summary: string; command: CliCommand }>;
}

const isLabModule = (m: unknown): m is LabModule =>
  typeof m === "object" && m !== null && "labCommands" in m && typeof (m as { labCommands: unknown }).labCommands === "object";

export const command: CliCommand = {
  usage: "up [--nodes N] [--json] | down | provision|attest|wipe|retire NODE | console NODE",
  async run(args): Promise<ExitCode> {
    if (!existsSync(LAB_CLI)) throw new CliUsageError(`the lab runs from a fleetd checkout after \`pnpm -s build\` (${LAB_CLI} is missing)`);
    const m: unknown = await import(pathToFileURL(LAB_CLI).href);
    if (!isLabModule(m)) throw new Error(`${LAB_CLI} is not the lab's command module`);
    const [sub, ...rest] = args;
    const entry = sub !== undefined && Object.hasOwn(m.labCommands, sub) ? m.labCommands[sub] : undefined;
    if (!entry) {
      const list = Object.entries(m.labCommands).map(([k, v]) => `  ${k.padEnd(10)} ${v.summary}`).join("\n");
      if (sub === undefined) {
        process.stdout.write(`usage: fleetd lab ${command.usage}\n\n${list}\n`);
        return EXIT.usage;
      }
      throw new CliUsageError(`no lab command "${sub}"\n${list}`);
    }
    return entry.command.run(rest);
  },
};
