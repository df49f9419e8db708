/**
 * Typed errors for EK identity inputs. Structural DER problems are codec `ParseError`s (code, field path,
 * offset); everything that parses but cannot be used is a `CertificateError` with a stable code.
 */

export type CertificateErrorCode =
  | "bad-pem" // PEM text that is not well formed
  | "not-a-certificate" // no certificate in the input
  | "trailing-bytes" // bytes after the DER that are not NV padding
  | "unsupported-algorithm" // a signature or key algorithm fleetd does not implement
  | "unsupported-key" // a key type or curve that has no EK binding
  | "invalid-key" // a key that does not decode or that the crypto library rejects
  | "invalid-extension" // an extension whose value does not decode
  | "duplicate-extension" // the same extension twice (RFC 5280 §4.2)
  | "not-an-ek-public" // an --ek-public input that is none of TPM2B_PUBLIC, TPMT_PUBLIC, PEM/DER SPKI
  | "bad-store"; // a CA store directory that cannot be read

export class CertificateError extends Error {
  override readonly name = "CertificateError";
  constructor(
    readonly code: CertificateErrorCode,
    message: string,
  ) {
    super(message);
  }
}
