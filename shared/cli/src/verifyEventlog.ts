/**
 * `fleetd verify eventlog FILE [--json]`: parse a TCG event log, replay every bank, and show what it says —
 * Secure Boot state, authorities, boot applications — interpreting the log as if every PCR had replayed
 * (there is no quote here: this is for inspection, not for trusting a machine).
 * Exit codes: 0 parsed, 1 malformed log (typed error with offset), 2 usage error.
 */
import { ParseError } from "@fleetd/verify/codec";
import { interpretLog, parseEventLog, eventLogReport, replayLog } from "@fleetd/verify/eventlog";
import { type CliCommand, CliUsageError, EXIT, parseOptions, printJson, readInput } from "@fleetd/platform/cmd";

function table(report: ReturnType<typeof eventLogReport>): string {
  const lines: string[] = [];
  lines.push(`format: ${report.format}   banks: ${report.banks.map((b) => b.name + (b.computable ? "" : " (skipped)")).join(", ")}   events: ${report.eventCount}`);
  if (report.pcr0Start.reason !== "zero") lines.push(`PCR0 starts at ${report.pcr0Start.value} (${report.pcr0Start.reason}, event ${report.pcr0Start.event})`);
  lines.push("", "  #    PCR  TYPE                                   SIZE  DIGEST (first bank)");
  for (const e of report.events) {
    const [bank, d] = Object.entries(e.digests)[0] ?? ["", ""];
    lines.push(`  ${String(e.index).padEnd(4)} ${String(e.pcr).padEnd(4)} ${e.type.padEnd(38)} ${String(e.dataSize).padStart(5)}  ${bank} ${d.slice(0, 24)}…`);
  }
  lines.push("", "PCRs (replayed from the log):");
  for (const [bank, m] of Object.entries(report.pcrs)) for (const [pcr, v] of Object.entries(m)) lines.push(`  ${bank.padEnd(7)} ${pcr.padStart(2)}  ${v}`);
  const sb = report.secureBoot;
  lines.push("");
  if (!sb) lines.push("Secure Boot: no PCR 7 events");
  else {
    lines.push(`Secure Boot: ${sb.enabled ? "enabled" : "NOT enabled"} (SecureBoot = ${sb.secureBootVariable ?? "not measured"})`);
    for (const [name, db] of [["PK", sb.pk], ["KEK", sb.kek], ["db", sb.db], ["dbx", sb.dbx]] as const) {
      lines.push(`  ${name.padEnd(4)} ${db ? `${db.entries} entries: ${[...db.certs.map((c) => c.commonName), db.sha256.length ? `${db.sha256.length} SHA-256` : ""].filter(Boolean).join("; ")}` : "not measured"}`);
    }
    const auth = (l: typeof sb.authorities.afterSeparator) =>
      l.length === 0 ? "none" : l.map((a) => `${a.cert?.commonName ?? "sha256 " + a.sha256} (event ${a.event}${a.quirks.length ? ", " + a.quirks.join(", ") : ""})`).join("; ");
    lines.push(`  authorities before separator: ${auth(sb.authorities.beforeSeparator)}`);
    lines.push(`  authorities after separator:  ${auth(sb.authorities.afterSeparator)}`);
    if (sb.sbatLevel) lines.push(`  SbatLevel: ${JSON.stringify(sb.sbatLevel)}`);
    if (sb.dmaProtectionDisabled) lines.push("  DMA protection disabled");
  }
  if (report.bootApplications.length) {
    lines.push("", "Boot applications (PCR 4):");
    for (const a of report.bootApplications) lines.push(`  event ${a.event}: ${a.devicePath ?? "?"}`);
  }
  if (report.warnings.length) {
    lines.push("", "Warnings:");
    for (const w of report.warnings) lines.push(`  [${w.severity}] ${w.check}: ${w.detail}`);
  }
  return lines.join("\n");
}

export const command: CliCommand = {
  usage: "FILE [--json]",
  async run(args) {
    const { values, positionals } = parseOptions(args, { json: { type: "boolean" } }, [], 1);
    const file = positionals[0];
    if (!file) throw new CliUsageError("FILE is required");
    const bytes = readInput(file, "event log");
    let log;
    try {
      log = parseEventLog(bytes);
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      if (values["json"]) printJson({ error: { type: "ParseError", code: e.code, offset: e.offset, path: e.path, message: e.message } });
      process.stderr.write(`error: malformed event log (${e.code}) at offset ${e.offset}: ${e.message}\n`);
      return EXIT.refused;
    }
    const replay = replayLog(log);
    const mb = interpretLog(log, new Set(replay.extended.keys()));
    const report = eventLogReport(log, replay, mb);
    if (values["json"]) printJson(report);
    else process.stdout.write(table(report) + "\n");
    return EXIT.ok;
  },
};
