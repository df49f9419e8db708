/** `fleetd verify quote` — check a tpm2_quote result against an AK and a nonce. Exit 0 only if every check holds. */
import { formatReasons, parseTpm2ToolsPcrFile, verifyQuote, parseInto, Checks, bankName, selectionFromBitmaps } from "@fleetd/verify/attest";
import { hex } from "@fleetd/verify/crypto";
import { stripSizePrefix, TPMS_ATTEST } from "@fleetd/verify/tpm";
import { type CliCommand, CliUsageError, EXIT, parseOptions, printJson, readInput, str } from "@fleetd/platform/cmd";
import { hexOption, readPublicOption } from "./inputs.js";

export const command: CliCommand = {
  usage:
    "--ak-public FILE --message FILE --signature FILE --pcrs FILE --nonce HEX [--pcrs-format auto|values|serialized] [--allow-sha1-signature] [--json]",
  async run(args) {
    const { values } = parseOptions(
      args,
      {
        "ak-public": { type: "string" },
        message: { type: "string" },
        signature: { type: "string" },
        pcrs: { type: "string" },
        nonce: { type: "string" },
        "pcrs-format": { type: "string", default: "auto" },
        "allow-sha1-signature": { type: "boolean", default: false },
        json: { type: "boolean", default: false },
      },
      ["ak-public", "message", "signature", "pcrs", "nonce"],
    );
    const ak = readPublicOption(str(values, "ak-public"), "--ak-public").pub;
    const message = stripSizePrefix(readInput(str(values, "message"), "--message"));
    const signature = readInput(str(values, "signature"), "--signature");
    const nonce = hexOption(str(values, "nonce"), "--nonce");
    const format = str(values, "pcrs-format");
    if (format !== "auto" && format !== "values" && format !== "serialized") throw new CliUsageError("--pcrs-format must be auto, values or serialized");

    // The quote's own selection orders a values-format PCR file; if the message does not parse, the
    // verdict below reports that.
    const pre = new Checks();
    const attest = parseInto(pre, "quote.parse", TPMS_ATTEST, message);
    const quotedSelection =
      attest?.attested.kind === "quote"
        ? selectionFromBitmaps(attest.attested.pcrSelect).filter((s) => s.pcrs.length > 0)
        : undefined;
    let pcrs: ReturnType<typeof parseTpm2ToolsPcrFile>;
    const pcrBytes = readInput(str(values, "pcrs"), "--pcrs");
    try {
      pcrs = parseTpm2ToolsPcrFile(pcrBytes, format, quotedSelection);
    } catch (e) {
      if (!(e instanceof Error)) throw e;
      if (!quotedSelection) {
        // The message itself is not a quote; verifyQuote reports that as the failed check.
        pcrs = { selection: [], values: new Map(), format: "values" };
      } else {
        report(values["json"] === true, { verdict: "fail", reasons: [{ check: "pcrs.parse", detail: e.message }] });
        return EXIT.refused;
      }
    }
    const result = verifyQuote({
      akPublic: ak,
      quote: message,
      signature,
      pcrs: pcrs.values,
      expectedExtraData: nonce,
      signature_options: values["allow-sha1-signature"] === true ? { minHashSize: 20 } : {},
    });
    const out = {
      verdict: result.verdict,
      reasons: result.reasons,
      pcrsFormat: pcrs.format,
      ...(result.attest
        ? {
            quote: {
              extraData: hex(result.attest.extraData),
              clock: result.attest.clockInfo.clock.toString(),
              resetCount: result.attest.clockInfo.resetCount,
              restartCount: result.attest.clockInfo.restartCount,
              selection: (result.selection ?? []).map((s) => ({ bank: bankName(s.hash), pcrs: s.pcrs })),
            },
          }
        : {}),
    };
    report(values["json"] === true, out);
    return result.verdict === "pass" ? EXIT.ok : EXIT.refused;
  },
};

function report(json: boolean, out: { verdict: string; reasons: { check: string; detail: string }[] }): void {
  if (json) {
    printJson(out);
    return;
  }
  if (out.verdict === "pass") process.stdout.write("quote: PASS (signature, magic, type, extraData, PCR selection, pcrDigest)\n");
  else process.stdout.write(`quote: FAIL\n${formatReasons(out.reasons)}\n`);
}
