/** Reading TPM evidence files for CLI commands, with errors that name the option. */
import { ParseError } from "../codec/codec.js";
import { fromHex } from "../crypto/hash.js";
import { readPublicArea } from "../tpm/files.js";
import { CliUsageError, readInput } from "./common.js";

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
