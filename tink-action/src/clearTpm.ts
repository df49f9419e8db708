/**
 * `fleetd-tink-action clear-tpm` — the wipe workflow's TPM step at retirement: clears the owner hierarchy
 * (shared/platform/src/tpmclient/clear.ts) so the old LDevID/LAK blobs die with the disk. Only where the site allows it:
 * FLEETD_CLEAR_TPM=yes; otherwise it changes nothing and says so (exit 0). FLEETD_TPM as for attest.
 * Exit codes (fleetd's one table, `EXIT`): 0 cleared or not allowed by the site; 1 refused (disableClear, lockout
 * auth set, lockout) or the TPM refused; 2 usage or configuration error; 5 the TPM did not answer (cli.ts).
 */
import { z } from "zod";
import { type CliCommand, EXIT, parseOptions, printJson } from "@fleetd/platform/cmd";
import { ClearRefused, clearOwnerHierarchy, TpmError } from "@fleetd/platform/tpmclient";
import { ActionConfigError, DEFAULT_TPM, parseTpmSpec } from "./config.js";
import { describeTpm, openTpm } from "./tpm.js";

const Env = z.object({
  FLEETD_CLEAR_TPM: z.enum(["yes", "no"]).default("no"),
  FLEETD_TPM: z.string().min(1).default(DEFAULT_TPM),
});

export const command: CliCommand = {
  usage: "(FLEETD_CLEAR_TPM=yes to clear; FLEETD_TPM=/dev/tpmrm0|swtpm:HOST:PORT|unix:PATH)",
  async run(args) {
    parseOptions(args, {});
    const env = Env.safeParse(process.env);
    if (!env.success) {
      process.stderr.write(`fleetd-tink-action clear-tpm: ${env.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}\n`);
      return EXIT.usage;
    }
    let spec;
    try {
      spec = parseTpmSpec(env.data.FLEETD_TPM);
    } catch (e) {
      if (e instanceof ActionConfigError) {
        process.stderr.write(`fleetd-tink-action clear-tpm: ${e.message}\n`);
        return EXIT.usage;
      }
      throw e;
    }
    if (env.data.FLEETD_CLEAR_TPM !== "yes") {
      printJson({ ok: true, cleared: false, reason: "the site does not allow clearing the TPM (FLEETD_CLEAR_TPM is not yes); TPM left unchanged" });
      return EXIT.ok;
    }
    const tpm = openTpm(spec);
    try {
      const report = await clearOwnerHierarchy(tpm);
      printJson({ ok: true, cleared: true, tpm: describeTpm(spec), ...report });
      return EXIT.ok;
    } catch (e) {
      if (e instanceof ClearRefused || e instanceof TpmError) {
        const code = e instanceof ClearRefused ? e.code : e.name;
        process.stderr.write(`fleetd-tink-action clear-tpm: refused (${code}): ${e.message}\n`);
        printJson({ ok: false, cleared: false, code, message: e.message });
        return EXIT.refused;
      }
      throw e;
    } finally {
      await tpm.close();
    }
  },
};
