/**
 * Certificate serial numbers: 16 random bytes, positive, with the top byte in 0x40..0x7f so the DER INTEGER
 * is exactly 16 bytes (126 random bits; RFC 5280 §4.1.2.2 allows up to 20 octets, Go rejects negatives).
 */
import { randomBytes } from "node:crypto";
import { PkiError } from "./errors.js";

export function randomSerial(): Uint8Array {
  const b = new Uint8Array(randomBytes(16));
  b[0] = 0x40 | ((b[0] ?? 0) & 0x3f);
  return b;
}

/** A caller-supplied serial must be a minimal, positive, non-zero DER INTEGER body of at most 20 octets. */
export function checkSerial(serial: Uint8Array): void {
  const hex = Buffer.from(serial).toString("hex");
  if (serial.length === 0 || serial.length > 20) throw new PkiError("invalid-serial", `serial ${hex} is ${serial.length} bytes (1..20 allowed)`);
  const first = serial[0] ?? 0;
  if (first & 0x80) throw new PkiError("invalid-serial", `serial ${hex} is negative`);
  if (first === 0 && serial.length > 1 && ((serial[1] ?? 0) & 0x80) === 0) throw new PkiError("invalid-serial", `serial ${hex} has a redundant leading zero`);
  if (serial.every((x) => x === 0)) throw new PkiError("invalid-serial", "serial is zero");
}
