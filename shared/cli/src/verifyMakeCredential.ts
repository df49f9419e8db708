/** `fleetd verify make-credential` — the server half of credential activation, as a file for tpm2-tools. */
import { writeFileSync } from "node:fs";
import { makeCredential, tpm2ToolsCredentialFile } from "@fleetd/verify/credential";
import { ekPublicFromFile } from "./ekInput.js";
import { type CliCommand, EXIT, parseOptions, str } from "@fleetd/platform/cmd";
import { hexOption } from "./inputs.js";

export const command: CliCommand = {
  usage: "--ek-public FILE --name HEX --secret HEX --out FILE",
  async run(args) {
    const { values } = parseOptions(
      args,
      { "ek-public": { type: "string" }, name: { type: "string" }, secret: { type: "string" }, out: { type: "string" } },
      ["ek-public", "name", "secret", "out"],
    );
    const ek = ekPublicFromFile(str(values, "ek-public"));
    const name = hexOption(str(values, "name"), "--name");
    const secret = hexOption(str(values, "secret"), "--secret");
    const cred = makeCredential(ek, name, secret);
    writeFileSync(str(values, "out"), tpm2ToolsCredentialFile(cred));
    return EXIT.ok;
  },
};
