/**
 * `fleetd verify policy --profile NAME|FILE --log FILE [--pcrs FILE] [--site-authorities DIR] [--json]`:
 * evaluate a class profile against an event log and (normally) quote-verified PCR values.
 * Exit codes: 0 pass, 1 fail (reasons printed) or malformed log, 2 usage/configuration error.
 */
import { parseTpm2ToolsPcrFile } from "@fleetd/verify/attest";
import { ParseError } from "@fleetd/verify/codec";
import { parseEventLog, parsePcrFile, PcrFileError, secureBootJson } from "@fleetd/verify/eventlog";
import { AuthorityConfigError, evaluateProfile, ProfileError, profileAuthorityRefs, type Reason } from "@fleetd/verify/policy";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { type CliCommand, CliUsageError, EXIT, parseOptions, printJson, readInput, str } from "@fleetd/platform/cmd";

function reasonLine(r: Reason): string {
  const at = [r.pcr !== undefined ? `PCR ${r.pcr}` : "", r.event !== undefined ? `event ${r.event}` : ""].filter(Boolean).join(", ");
  return `${r.check}${at ? ` (${at})` : ""}: ${r.detail}`;
}

export const command: CliCommand = {
  usage: "--profile NAME|FILE --log FILE [--pcrs FILE] [--site-authorities DIR] [--json]",
  async run(args) {
    const { values } = parseOptions(
      args,
      {
        profile: { type: "string" },
        log: { type: "string" },
        pcrs: { type: "string" },
        "site-authorities": { type: "string" },
        json: { type: "boolean" },
      },
      ["profile", "log"],
    );
    const json = values["json"] === true;
    let profile;
    let authorities;
    let pcrs;
    try {
      profile = loadProfile(str(values, "profile"));
      const site = values["site-authorities"];
      authorities = resolveAuthorities(profileAuthorityRefs(profile), typeof site === "string" ? site : undefined);
      if (typeof values["pcrs"] === "string") pcrs = readPcrs(readInput(values["pcrs"], "PCR file"), values["pcrs"]);
    } catch (e) {
      if (e instanceof ProfileError || e instanceof AuthorityConfigError || e instanceof PcrFileError) throw new CliUsageError(e.message);
      throw e;
    }
    let log;
    try {
      log = parseEventLog(readInput(str(values, "log"), "event log"));
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      if (json) printJson({ verdict: "fail", profile: profile.name, reasons: [{ check: "eventlog-format", detail: e.message }], error: { code: e.code, offset: e.offset } });
      process.stderr.write(`error: malformed event log (${e.code}) at offset ${e.offset}: ${e.message}\n`);
      return EXIT.refused;
    }
    const ev = evaluateProfile(profile, { log, ...(pcrs ? { pcrs } : {}) }, authorities);
    if (json) {
      printJson({
        verdict: ev.verdict,
        profile: ev.profile,
        reasons: ev.reasons,
        warnings: ev.warnings,
        pcrSource: ev.pcrSource,
        banksUsed: ev.banksUsed,
        pcrs: ev.pcrs,
        secureBoot: secureBootJson(ev.measuredBoot.secureBoot),
      });
    } else {
      const lines = [`${ev.verdict.toUpperCase()}: profile ${ev.profile} (PCR values from ${ev.pcrSource === "quote" ? "--pcrs" : "the log itself"}; banks ${ev.banksUsed.join(", ")})`];
      for (const r of ev.reasons) lines.push(`  ✗ ${reasonLine(r)}`);
      for (const w of ev.warnings) lines.push(`  ! ${reasonLine(w)}`);
      process.stdout.write(lines.join("\n") + "\n");
    }
    return ev.verdict === "pass" ? EXIT.ok : EXIT.refused;
  },
};

/**
 * PCR values from `--pcrs`: tpm2-tools' binary "serialized" output (`tpm2_quote -o`, `tpm2_pcrread -o -F
 * serialized`, which carries its own selection), or text — tpm2_pcrread's YAML or a JSON/YAML bank map.
 */
function readPcrs(bytes: Uint8Array, path: string): ReturnType<typeof parsePcrFile> {
  const asText = Buffer.from(bytes).toString("utf8");
  const isText = /^[\x09\x0a\x0d\x20-\x7e]*$/.test(asText);
  if (!isText) {
    try {
      return parseTpm2ToolsPcrFile(bytes, "serialized").values;
    } catch (e) {
      throw new PcrFileError(`${path}: not a tpm2-tools serialized PCR file (${(e as Error).message}); a "values" file has no selection — use tpm2_pcrread's YAML output instead`);
    }
  }
  return parsePcrFile(asText, path);
}
