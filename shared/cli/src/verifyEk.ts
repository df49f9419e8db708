/**
 * `fleetd verify ek` — EK identity from the command line.
 *
 *   fleetd verify ek --cert FILE --roots DIR [--json] [--at TIME] [--allow-expired] [--reject-sha1] [--ek-public FILE]
 *       EK binding, TPM manufacturer/model/version, the chain to a root in DIR and the verdict.
 *       FILE may be DER, DER with NV padding, the TCG NV wrapper, or PEM (extra PEM certificates are
 *       offered as intermediates). With --ek-public, also checks that public area against the
 *       certificate's key and the EK templates.
 *   fleetd verify ek --ek-public FILE [--json]
 *       EK binding of a TPM2B_PUBLIC (tpm2_createek -u), TPMT_PUBLIC, or PEM/DER public key.
 *
 * Exit: 0 pass, 1 a failed check (printed), 2 usage error or malformed input.
 */
import { describeKey, objectName } from "@fleetd/verify/tpm";
import { hex } from "@fleetd/verify/crypto";
import {
  readCertificate, type ChainLink, type ChainReason, ekPublicMatchesCertificate, type EkPublicInput, readEkPublic,
  identifyEkTemplate, type TpmInfo, verifyEkCertificate,
} from "@fleetd/verify/ek";
import { describeCanonicalKey } from "@fleetd/verify/x509";
import { loadCaStore } from "@fleetd/platform/trust";
import { type CliCommand, CliUsageError, EXIT, parseOptions, printJson, readInput, str } from "@fleetd/platform/cmd";

const OPTIONS = {
  cert: { type: "string" },
  roots: { type: "string" },
  "ek-public": { type: "string" },
  json: { type: "boolean" },
  at: { type: "string" },
  "allow-expired": { type: "boolean" },
  "reject-sha1": { type: "boolean" },
} as const;

interface EkPublicReport {
  binding: string;
  form: EkPublicInput["form"];
  key: string;
  name?: string;
  template?: { id: string; matches: boolean; detail?: string };
}

function ekPublicReport(input: EkPublicInput): EkPublicReport {
  if ("key" in input) {
    return { binding: input.binding, form: input.form, key: describeCanonicalKey(input.key) };
  }
  const d = describeKey(input.public);
  const t = identifyEkTemplate(input.public);
  return {
    binding: input.binding,
    form: input.form,
    key: d.alg === "rsa" ? `RSA-${d.bits}` : `ECC ${d.curve ?? ""}`,
    name: hex(objectName(input.publicBytes)),
    template: t.ok ? { id: t.template.id, matches: true } : { id: t.template.id, matches: false, detail: t.detail },
  };
}

function printEkPublic(r: EkPublicReport, indent = ""): void {
  const lines = [`EK binding: ${r.binding}`, `form:       ${r.form}`, `key:        ${r.key}`];
  if (r.name) lines.push(`name:       ${r.name}`);
  if (r.template) {
    lines.push(r.template.matches ? `template:   ${r.template.id}` : `template:   none (closest ${r.template.id}: ${r.template.detail ?? ""})`);
  }
  process.stdout.write(lines.map((l) => indent + l).join("\n") + "\n");
}

function formatTpm(t: TpmInfo): string {
  if (!t.manufacturer && !t.model && !t.version) return "(no TPM manufacturer/model/version attributes)";
  const m = t.manufacturer ? `${t.manufacturer}${t.manufacturerId ? ` (${t.manufacturerId})` : ""}` : "?";
  return `manufacturer ${m}, model ${t.model ?? "?"}, version ${t.version ?? "?"}`;
}

function formatChain(chain: ChainLink[]): string[] {
  return chain.flatMap((l, i) => [
    `  [${i}] ${l.subject}`,
    `      issuer ${l.issuer}`,
    `      serial ${l.serial}, sha256 ${l.fingerprint}`,
    `      valid ${l.notBefore} .. ${l.notAfter}, from ${l.source}`,
  ]);
}

const formatReasons = (rs: ChainReason[]) => rs.map((r) => `  - [${r.check}] ${r.detail}`);

export const command: CliCommand = {
  usage:
    "--cert FILE --roots DIR [--json] [--at TIME] [--allow-expired] [--reject-sha1] [--ek-public FILE]\n" +
    "       fleetd verify ek --ek-public FILE [--json]",
  async run(args) {
    const { values } = parseOptions(args, OPTIONS);
    const json = values["json"] === true;
    if (values["cert"] === undefined) {
      if (values["ek-public"] === undefined) throw new CliUsageError("give --cert FILE --roots DIR, or --ek-public FILE");
      for (const o of ["roots", "at", "allow-expired", "reject-sha1"]) {
        if (values[o] !== undefined) throw new CliUsageError(`--${o} needs --cert`);
      }
      const report = ekPublicReport(readEkPublic(readInput(str(values, "ek-public"), "EK public key")));
      if (json) printJson(report);
      else printEkPublic(report);
      return EXIT.ok;
    }
    if (values["roots"] === undefined) throw new CliUsageError("--roots DIR is required with --cert");
    let at: Date | undefined;
    if (values["at"] !== undefined) {
      at = new Date(str(values, "at"));
      if (Number.isNaN(at.getTime())) throw new CliUsageError(`--at ${str(values, "at")} is not a date/time`);
    }
    const input = readCertificate(readInput(str(values, "cert"), "EK certificate"));
    const ekPublic = values["ek-public"] !== undefined ? readEkPublic(readInput(str(values, "ek-public"), "EK public key")) : undefined;
    const store = loadCaStore(str(values, "roots"));
    const opts: Parameters<typeof verifyEkCertificate>[2] = { intermediates: input.extra };
    if (at) opts.at = at;
    if (values["allow-expired"] === true) opts.allowExpired = true;
    if (values["reject-sha1"] === true) opts.rejectSha1 = true;
    const v = verifyEkCertificate(input.cert, store, opts);

    let publicReport: EkPublicReport | undefined;
    if (ekPublic) {
      publicReport = ekPublicReport(ekPublic);
      if ("public" in ekPublic) {
        const m = ekPublicMatchesCertificate(ekPublic.public, input.cert);
        if (!m.ok) v.reasons.push({ check: "ek-public-key", detail: m.detail });
        if (publicReport.template && !publicReport.template.matches) {
          v.reasons.push({ check: "ek-template", detail: publicReport.template.detail ?? "EK public area matches no EK template" });
        }
      } else if (v.binding !== undefined && ekPublic.binding !== v.binding) {
        v.reasons.push({ check: "ek-public-key", detail: `EK public key (binding ${ekPublic.binding}) is not the certificate's key (binding ${v.binding})` });
      }
      if (v.reasons.length > 0) v.verdict = "fail";
    }

    if (json) {
      printJson({
        binding: v.binding ?? null,
        key: v.key ?? null,
        tpm: v.tpm,
        input: { form: input.form, padding: input.padding, extraCertificates: input.extra.length },
        ...(publicReport ? { ekPublic: publicReport } : {}),
        store: { certificates: store.certs.length, skipped: store.skipped },
        verdict: v.verdict,
        chain: v.chain,
        reasons: v.reasons,
        warnings: v.warnings,
      });
    } else {
      const lines = [
        `EK binding: ${v.binding ?? "(none)"}`,
        `key:        ${v.key ?? "(unsupported)"}`,
        `TPM:        ${formatTpm(v.tpm)}`,
        `input:      ${input.form}${input.padding ? ` (${input.padding} padding bytes after the DER ignored)` : ""}${input.extra.length ? `, ${input.extra.length} more certificate(s) offered as intermediates` : ""}`,
        `store:      ${store.certs.length} certificate(s)${store.skipped.length ? `, ${store.skipped.length} file(s)/block(s) skipped` : ""}`,
        "chain:",
        ...formatChain(v.chain),
      ];
      process.stdout.write(lines.join("\n") + "\n");
      if (publicReport) {
        process.stdout.write("EK public:\n");
        printEkPublic(publicReport, "  ");
      }
      if (v.warnings.length > 0) process.stdout.write(["warnings:", ...formatReasons(v.warnings)].join("\n") + "\n");
      process.stdout.write([`verdict: ${v.verdict}`, ...formatReasons(v.reasons)].join("\n") + "\n");
    }
    return v.verdict === "pass" ? EXIT.ok : EXIT.refused;
  },
};
