/** `fleetd verify certify` — check a tpm2_certify result: the AK vouches for an object's public area. */
import { formatReasons, verifyCertify } from "@fleetd/verify/attest";
import { stripSizePrefix } from "@fleetd/verify/tpm";
import { type CliCommand, EXIT, parseOptions, printJson, readInput, str } from "@fleetd/platform/cmd";
import { hexOption, readPublicOption } from "./inputs.js";

export const command: CliCommand = {
  usage: "--ak-public FILE --object-public FILE --message FILE --signature FILE --qualifying-data HEX [--json]",
  async run(args) {
    const { values } = parseOptions(
      args,
      {
        "ak-public": { type: "string" },
        "object-public": { type: "string" },
        message: { type: "string" },
        signature: { type: "string" },
        "qualifying-data": { type: "string" },
        json: { type: "boolean", default: false },
      },
      ["ak-public", "object-public", "message", "signature", "qualifying-data"],
    );
    const ak = readPublicOption(str(values, "ak-public"), "--ak-public").pub;
    const obj = readPublicOption(str(values, "object-public"), "--object-public");
    const result = verifyCertify({
      akPublic: ak,
      objectPublic: obj.tpmtBytes,
      attest: stripSizePrefix(readInput(str(values, "message"), "--message")),
      signature: readInput(str(values, "signature"), "--signature"),
      expectedExtraData: hexOption(str(values, "qualifying-data"), "--qualifying-data"),
    });
    if (values["json"] === true) printJson({ verdict: result.verdict, reasons: result.reasons });
    else if (result.verdict === "pass") process.stdout.write("certify: PASS (signature, magic, type, certified Name, extraData)\n");
    else process.stdout.write(`certify: FAIL\n${formatReasons(result.reasons)}\n`);
    return result.verdict === "pass" ? EXIT.ok : EXIT.refused;
  },
};
