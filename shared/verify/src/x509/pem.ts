/**
 * PEM (RFC 7468) blocks: `-----BEGIN LABEL-----` base64 `-----END LABEL-----`. Text around and between
 * blocks is ignored (CA bundles carry comment headers; certtool writes a key dump before the key).
 */

import { CertificateError } from "./errors.js";

export interface PemBlock {
  label: string;
  der: Uint8Array;
  /** 0-based index of the block in the text. */
  index: number;
  /** Where the block (BEGIN line to END line) starts and ends in the text. */
  start: number;
  end: number;
}

const BEGIN = /-----BEGIN ([A-Z0-9 ]{1,64})-----/;

/** True if the bytes look like PEM text (a BEGIN line somewhere near the start). */
export function looksLikePem(bytes: Uint8Array): boolean {
  const head = Buffer.from(bytes.subarray(0, 64 * 1024)).toString("latin1");
  return head.includes("-----BEGIN ");
}

/** Every PEM block in `text`, in order. A BEGIN without its END, or bad base64, is a CertificateError "bad-pem". */
export function pemBlocks(text: string): PemBlock[] {
  const out: PemBlock[] = [];
  const re = new RegExp(BEGIN.source, "g");
  let m: RegExpExecArray | null;
  while ((m = re.exec(text)) !== null) {
    const label = m[1] ?? "";
    const endMarker = `-----END ${label}-----`;
    const bodyStart = m.index + m[0].length;
    const endAt = text.indexOf(endMarker, bodyStart);
    if (endAt < 0) throw new CertificateError("bad-pem", `PEM block ${out.length} (${label}) has no END line`);
    const body = text.slice(bodyStart, endAt);
    out.push({ label, der: decodeBase64Strict(body, label, out.length), index: out.length, start: m.index, end: endAt + endMarker.length });
    re.lastIndex = endAt + endMarker.length;
  }
  return out;
}

function decodeBase64Strict(body: string, label: string, index: number): Uint8Array {
  // RFC 7468 allows headers only in legacy encapsulated formats; we refuse them (a ':' line).
  const lines = body.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0);
  if (lines.some((l) => l.includes(":"))) throw new CertificateError("bad-pem", `PEM block ${index} (${label}) has encapsulated headers`);
  const b64 = lines.join("");
  if (b64.length === 0 || b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) {
    throw new CertificateError("bad-pem", `PEM block ${index} (${label}) is not valid base64`);
  }
  return new Uint8Array(Buffer.from(b64, "base64"));
}

export function toPem(label: string, der: Uint8Array): string {
  const b64 = Buffer.from(der).toString("base64");
  const lines = b64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

/** The blocks of a text that holds PEM blocks and nothing else (whitespace around them); other text is a CertificateError "bad-pem". */
export function pemBlocksOnly(text: string): PemBlock[] {
  const blocks = pemBlocks(text);
  let at = 0;
  for (const b of [...blocks, { start: text.length, end: text.length, index: blocks.length }]) {
    if (text.slice(at, b.start).trim() !== "") {
      throw new CertificateError("bad-pem", b.index < blocks.length ? `text before PEM block ${b.index} is not PEM` : "text after the last PEM block is not PEM");
    }
    at = b.end;
  }
  return blocks;
}

/** PEM labels of certificates (RFC 7468 §5.1; "X509 CERTIFICATE" is the legacy label §5.3 names). */
export const CERTIFICATE_LABELS: ReadonlySet<string> = new Set(["CERTIFICATE", "X509 CERTIFICATE"]);
/** PEM labels of PKCS#10 requests (RFC 7468 §7; "NEW CERTIFICATE REQUEST" is what older tools write). */
export const CERTIFICATE_REQUEST_LABELS: ReadonlySet<string> = new Set(["CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"]);

export function certificateToPem(der: Uint8Array): string {
  return toPem("CERTIFICATE", der);
}

/**
 * The DER of every certificate block in a PEM text, in order (text between blocks is ignored). A block with
 * another label is a CertificateError "bad-pem" unless `otherBlocks: "ignore"` (a file that also holds a key);
 * no certificate at all is "not-a-certificate".
 */
export function certificatesFromPem(text: string, options: { otherBlocks?: "ignore" | "refuse" } = {}): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const b of pemBlocks(text)) {
    if (CERTIFICATE_LABELS.has(b.label)) out.push(b.der);
    else if (options.otherBlocks !== "ignore") throw new CertificateError("bad-pem", `PEM block ${b.index} is a ${b.label}, not a CERTIFICATE`);
  }
  if (out.length === 0) throw new CertificateError("not-a-certificate", "the PEM text holds no CERTIFICATE block");
  return out;
}
