/**
 * Where the token PIN comes from: an environment variable or a file (e.g. a mounted secret). It is read at
 * each login, kept no longer than the call, and never printed — errors name the source, not the value.
 */
import { readFileSync } from "node:fs";
import { z } from "zod";
import { PkiError } from "./errors.js";

export const PinSource = z.union([
  z.object({ env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "an environment variable name") }).strict(),
  z.object({ file: z.string().min(1) }).strict(),
]);
export type PinSource = z.infer<typeof PinSource>;

export function describePinSource(source: PinSource): string {
  return "env" in source ? `environment variable ${source.env}` : `file ${source.file}`;
}

/** PKCS#11 PINs are UTF-8 strings; a YubiKey PIV PIN is 6–8 characters. One trailing newline is dropped. */
const MAX_PIN_LENGTH = 256;

export function readPin(source: PinSource, env: NodeJS.ProcessEnv = process.env): string {
  let value: string | undefined;
  if ("env" in source) {
    value = env[source.env];
  } else {
    try {
      value = readFileSync(source.file, "utf8");
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? "unreadable";
      throw new PkiError("pin-unavailable", `cannot read the PIN from ${describePinSource(source)}: ${code}`);
    }
  }
  if (value === undefined) throw new PkiError("pin-unavailable", `the PIN ${describePinSource(source)} is not set`);
  const pin = value.replace(/\r?\n$/, "");
  if (pin.length === 0) throw new PkiError("pin-unavailable", `the PIN from ${describePinSource(source)} is empty`);
  if (pin.length > MAX_PIN_LENGTH || /[\r\n\0]/.test(pin)) {
    throw new PkiError("pin-unavailable", `the PIN from ${describePinSource(source)} is not a single line of at most ${MAX_PIN_LENGTH} characters`);
  }
  return pin;
}
