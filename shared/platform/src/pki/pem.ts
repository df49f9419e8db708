/** PEM (RFC 7468) for certificates: 64-column base64 between CERTIFICATE boundaries. */
import { PkiError } from "./errors.js";

export function certificateToPem(der: Uint8Array): string {
  const b64 = Buffer.from(der).toString("base64");
  const lines = b64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`;
}

const BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\r\n\t ]*?)-----END \1-----/g;

/** Every CERTIFICATE block of a PEM text, as DER. Anything else between blocks is ignored (comments). */
export function certificatesFromPem(text: string, what = "PEM"): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const m of text.matchAll(BLOCK)) {
    if (m[1] !== "CERTIFICATE") throw new PkiError("certificate-invalid", `${what}: unexpected PEM block ${m[1]}`);
    const b64 = (m[2] ?? "").replace(/\s+/g, "");
    const der = Buffer.from(b64, "base64");
    if (der.length === 0 || der.toString("base64") !== b64) throw new PkiError("certificate-invalid", `${what}: certificate ${out.length + 1} is not valid base64`);
    out.push(new Uint8Array(der));
  }
  if (out.length === 0) throw new PkiError("certificate-invalid", `${what}: no CERTIFICATE block`);
  return out;
}

/** A certificate given as DER bytes or as a PEM text holding exactly one certificate. */
export function certificateDer(input: Uint8Array | string, what = "certificate"): Uint8Array {
  if (typeof input !== "string") return input;
  const all = certificatesFromPem(input, what);
  if (all.length !== 1) throw new PkiError("certificate-invalid", `${what}: expected one certificate, found ${all.length}`);
  return all[0] as Uint8Array;
}
