/** LDevID/LAK renewal is due at two thirds of the certificate's lifetime (and after it has expired). */
import { parseIssuedCertificate } from "./parseCertificate.js";

export function renewalTime(cert: Uint8Array | string): Date {
  const c = parseIssuedCertificate(cert);
  const start = c.notBefore.getTime();
  return new Date(start + Math.floor(((c.notAfter.getTime() - start) * 2) / 3));
}

export function renewalDue(cert: Uint8Array | string, now: Date): boolean {
  return now.getTime() >= renewalTime(cert).getTime();
}
