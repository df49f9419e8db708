/** Parse TPM evidence into typed values; a malformed structure becomes a failed check, never an exception. */
import { type Codec, decodeExact, ParseError } from "../codec/codec.js";
import type { Checks } from "./verdict.js";

export function parseInto<T>(c: Checks, check: string, codec: Codec<T>, bytes: Uint8Array): T | undefined {
  try {
    return decodeExact(codec, bytes);
  } catch (e) {
    if (e instanceof ParseError) {
      c.fail(check, `malformed ${codec.typeName}: ${e.message}`);
      return undefined;
    }
    throw e;
  }
}
