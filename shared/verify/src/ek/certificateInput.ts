/**
 * EK certificates as TPMs and tools actually hand them over:
 *  - raw DER;
 *  - PEM (possibly a bundle: the first CERTIFICATE is the EK certificate, the others are offered as
 *    untrusted intermediates);
 *  - DER followed by NV-read padding — an NV index is read in full, so the bytes after the certificate's
 *    outer DER length are whatever the index held (0xFF on STMicro parts). Only runs of 0xFF or 0x00 are
 *    accepted as padding; other trailing bytes are refused, since nothing legitimate puts data there;
 *  - the TCG PC Client wrapper `10 01 00 ‖ u16 length ‖ DER` (PC Client Platform TPM Profile §7.3.2,
 *    as handled by google/go-attestation ParseEKCertificate).
 */
import { Reader } from "../codec/codec.js";
import { type Certificate, parseCertificate } from "../x509/certificate.js";
import { DerReader, TAG } from "../x509/der.js";
import { CertificateError } from "../x509/errors.js";
import { CERTIFICATE_LABELS, looksLikePem, pemBlocks } from "../x509/pem.js";

export type CertificateForm = "der" | "pem" | "der+padding" | "tcg-nv-wrapper";

export interface CertificateInput {
  cert: Certificate;
  form: CertificateForm;
  /** Number of padding bytes dropped after the DER. */
  padding: number;
  /** Further certificates found in a PEM bundle (untrusted; usable as intermediates). */
  extra: Certificate[];
}

/** The TCG NV certificate wrapper tag. */
const TCG_WRAPPER = [0x10, 0x01, 0x00] as const;

/** Decode an EK certificate from file or NV bytes, whichever of the supported forms it is in. */
export function readCertificate(bytes: Uint8Array): CertificateInput {
  if (bytes.length === 0) throw new CertificateError("not-a-certificate", "input is empty");
  if (looksLikePem(bytes)) {
    const blocks = pemBlocks(Buffer.from(bytes).toString("latin1")).filter((b) => CERTIFICATE_LABELS.has(b.label));
    const [first, ...rest] = blocks;
    if (!first) throw new CertificateError("not-a-certificate", "PEM input holds no CERTIFICATE block");
    return { cert: parseCertificate(first.der), form: "pem", padding: 0, extra: rest.map((b) => parseCertificate(b.der)) };
  }
  if (bytes[0] === TCG_WRAPPER[0] && bytes[1] === TCG_WRAPPER[1] && bytes[2] === TCG_WRAPPER[2]) {
    const r = new Reader(bytes, "be", { path: ["TCG NV certificate wrapper"] });
    r.skip(3);
    const len = r.field("length", () => r.u16());
    const der = r.field("certificate", () => r.bytes(len));
    const { der: exact } = trimToDer(der);
    checkPadding(r.rest(), 5 + len);
    return { cert: parseCertificate(exact), form: "tcg-nv-wrapper", padding: bytes.length - 5 - exact.length, extra: [] };
  }
  const { der, padding } = trimToDer(bytes);
  return { cert: parseCertificate(der), form: padding > 0 ? "der+padding" : "der", padding, extra: [] };
}

/** Split DER from what follows it, accepting only 0xFF/0x00 padding after it. */
function trimToDer(bytes: Uint8Array): { der: Uint8Array; padding: number } {
  const d = DerReader.of(bytes, "Certificate");
  if (d.peekTag() !== TAG.SEQUENCE) {
    throw new CertificateError("not-a-certificate", `input starts with byte 0x${(bytes[0] ?? 0).toString(16).padStart(2, "0")}, not a DER SEQUENCE, PEM or the TCG NV wrapper`);
  }
  const outer = d.any();
  const der = bytes.subarray(0, outer.end);
  checkPadding(bytes.subarray(outer.end), outer.end);
  return { der, padding: bytes.length - outer.end };
}

function checkPadding(rest: Uint8Array, at: number): void {
  if (rest.length === 0) return;
  const fill = rest[0];
  if ((fill !== 0xff && fill !== 0x00) || !rest.every((b) => b === fill)) {
    throw new CertificateError("trailing-bytes", `${rest.length} bytes after the certificate at offset ${at} are not NV padding (0xFF or 0x00 runs)`);
  }
}
