/** Reading TPM evidence files for CLI commands, with errors that name the option. */
import { ParseError } from "@fleetd/verify/codec";
import { fromHex } from "@fleetd/verify/crypto";
import { readPublicArea } from "@fleetd/verify/tpm";
import { CliUsageError, readInput } from "@fleetd/platform/cmd";

export function readPublicOption(path: string, option: string): ReturnType<typeof readPublicArea> {
  const bytes = readInput(path, option);
  try {
    return readPublicArea(bytes);
  } catch (e) {
    if (e instanceof ParseError) throw new CliUsageError(`${option} ${path} is not a TPM2B_PUBLIC/TPMT_PUBLIC: ${e.message}`);
    throw e;
  }
}

export function hexOption(value: string, option: string): Uint8Array {
  try {
    return fromHex(value, option);
  } catch {
    throw new CliUsageError(`${option} must be hex`);
  }
}
