/**
 * `fleetd-tink-action write-meta` — the provision workflow's last step: the install code (written to the
 * shared volume by the attest step) goes into META key 0x0b of the disk Talos was just written to.
 * Thin: the logic is shared/platform/src/talos/meta. The code itself is never printed.
 */
import { type CliCommand, CliUsageError, EXIT, parseOptions, printJson, readInput, str } from "@fleetd/platform/cmd";
import { MetaError, parseInstallCode, writeInstallCode } from "@fleetd/platform/talos/meta";

export const command: CliCommand = {
  usage: "--disk DEV (--code-file FILE | --code HEX) [--init] [--sector-size 512|4096]",
  async run(args) {
    const { values } = parseOptions(
      args,
      {
        disk: { type: "string" },
        "code-file": { type: "string" },
        code: { type: "string" },
        init: { type: "boolean", default: false },
        "sector-size": { type: "string" },
      },
      ["disk"],
    );
    const fromFile = values["code-file"] !== undefined;
    if (fromFile === (values["code"] !== undefined)) throw new CliUsageError("give exactly one of --code-file and --code");
    let code: string;
    try {
      code = fromFile
        ? parseInstallCode(new TextDecoder("utf-8", { fatal: true }).decode(readInput(str(values, "code-file"), "--code-file")), "--code-file")
        : parseInstallCode(str(values, "code"), "--code");
    } catch (e) {
      if (e instanceof MetaError || e instanceof TypeError) throw new CliUsageError(e instanceof MetaError ? e.detail : "--code-file is not UTF-8 text");
      throw e;
    }
    let sectorSize: number | undefined;
    if (values["sector-size"] !== undefined) {
      sectorSize = Number(str(values, "sector-size"));
      if (sectorSize !== 512 && sectorSize !== 4096) throw new CliUsageError("--sector-size must be 512 or 4096");
    }
    try {
      const report = writeInstallCode(str(values, "disk"), code, { init: values["init"] === true, ...(sectorSize ? { sectorSize } : {}) });
      printJson({ ok: true, ...report });
      return EXIT.ok;
    } catch (e) {
      if (e instanceof MetaError) {
        process.stderr.write(`fleetd-tink-action write-meta: refused (${e.code}): ${e.message}\n`);
        printJson({ ok: false, code: e.code, message: e.message, causes: e.causes });
        return EXIT.refused;
      }
      throw e;
    }
  },
};
