/**
 * The X.509 v3 extensions an EK chain needs (RFC 5280 §4.2): basicConstraints, keyUsage, extKeyUsage,
 * subjectAltName (the TPM's directoryName), key identifiers. Each is decoded from its extnValue; a value
 * that does not decode is a ParseError whose path names the extension.
 */
import { DerReader, TAG, contextTag, tlvContent } from "./der.js";
import { CertificateError } from "./errors.js";
import { type Name, readName } from "./names.js";
import { OID } from "./oids.js";

export interface Extension {
  oid: string;
  critical: boolean;
  /** extnValue contents (the DER of the extension's own structure). */
  value: Uint8Array;
}

export interface BasicConstraints {
  cA: boolean;
  pathLenConstraint?: number;
}

/** keyUsage bit names (RFC 5280 §4.2.1.3), bit 0 first. */
export const KEY_USAGE_BITS = [
  "digitalSignature",
  "nonRepudiation",
  "keyEncipherment",
  "dataEncipherment",
  "keyAgreement",
  "keyCertSign",
  "cRLSign",
  "encipherOnly",
  "decipherOnly",
] as const;
export type KeyUsage = (typeof KEY_USAGE_BITS)[number];

export type GeneralName =
  | { kind: "directoryName"; name: Name }
  | { kind: "rfc822Name" | "dNSName" | "uniformResourceIdentifier"; value: string }
  /** [7] iPAddress: dotted IPv4, or IPv6 as eight colon-separated hex groups (no :: shortening); other lengths as hex. */
  | { kind: "iPAddress"; value: string; bytes: Uint8Array }
  | { kind: "other"; tag: number };

export interface ParsedExtensions {
  basicConstraints?: BasicConstraints;
  keyUsage?: KeyUsage[];
  extKeyUsage?: string[];
  subjectAltName?: GeneralName[];
  authorityKeyIdentifier?: Uint8Array;
  subjectKeyIdentifier?: Uint8Array;
}

/** Extension OIDs whose semantics fleetd implements; a critical extension outside this set fails a chain. */
export const UNDERSTOOD_EXTENSIONS: ReadonlySet<string> = new Set([
  OID.basicConstraints,
  OID.keyUsage,
  OID.extKeyUsage,
  OID.subjectAltName,
  OID.authorityKeyIdentifier,
  OID.subjectKeyIdentifier,
  // Policy processing is not part of EK chain validation (no policy is required), so any policy set is acceptable.
  OID.certificatePolicies,
]);

const NAMES: Record<string, string> = {
  [OID.basicConstraints]: "basicConstraints",
  [OID.keyUsage]: "keyUsage",
  [OID.extKeyUsage]: "extKeyUsage",
  [OID.subjectAltName]: "subjectAltName",
  [OID.authorityKeyIdentifier]: "authorityKeyIdentifier",
  [OID.subjectKeyIdentifier]: "subjectKeyIdentifier",
  [OID.certificatePolicies]: "certificatePolicies",
  [OID.subjectDirectoryAttributes]: "subjectDirectoryAttributes",
  [OID.issuerAltName]: "issuerAltName",
};
export function extensionName(oid: string): string {
  return NAMES[oid] ?? oid;
}

export function parseExtensions(exts: readonly Extension[], options: { strict?: boolean } = {}): ParsedExtensions {
  const out: ParsedExtensions = {};
  for (const e of exts) {
    const d = DerReader.of(e.value, `extension ${extensionName(e.oid)}`, options);
    switch (e.oid) {
      case OID.basicConstraints:
        out.basicConstraints = basicConstraints(d);
        break;
      case OID.keyUsage:
        out.keyUsage = keyUsage(d);
        break;
      case OID.extKeyUsage:
        out.extKeyUsage = extKeyUsage(d);
        break;
      case OID.subjectAltName:
        out.subjectAltName = generalNames(d);
        break;
      case OID.authorityKeyIdentifier:
        out.authorityKeyIdentifier = authorityKeyIdentifier(d);
        break;
      case OID.subjectKeyIdentifier:
        out.subjectKeyIdentifier = d.octetString();
        break;
      default:
        continue;
    }
    d.expectEnd("extension value");
  }
  return out;
}

function basicConstraints(d: DerReader): BasicConstraints {
  const s = d.enter(TAG.SEQUENCE, "BasicConstraints");
  let cA = false;
  if (s.peekTag() === TAG.BOOLEAN) {
    cA = s.field("cA", () => s.boolean());
    if (!cA) s.notDer("cA FALSE is the DEFAULT and must be omitted");
  }
  const bc: BasicConstraints = { cA };
  if (s.peekTag() === TAG.INTEGER) bc.pathLenConstraint = s.field("pathLenConstraint", () => s.smallInteger());
  s.expectEnd("BasicConstraints");
  return bc;
}

function keyUsage(d: DerReader): KeyUsage[] {
  const bits = d.bitStringBits();
  return KEY_USAGE_BITS.filter((_, i) => bits.has(i));
}

function extKeyUsage(d: DerReader): string[] {
  const s = d.enter(TAG.SEQUENCE, "ExtKeyUsageSyntax");
  const out: string[] = [];
  while (!s.atEnd) out.push(s.oid());
  if (out.length === 0) d.fail("ExtKeyUsageSyntax is empty");
  return out;
}

/** GeneralNames (RFC 5280 §4.2.1.6). directoryName [4] is EXPLICIT (Name is a CHOICE). */
export function generalNames(d: DerReader): GeneralName[] {
  const s = d.enter(TAG.SEQUENCE, "GeneralNames");
  const out: GeneralName[] = [];
  while (!s.atEnd) {
    const tag = s.peekTag() ?? 0;
    const i = out.length;
    if (tag === contextTag(4, true)) {
      const name = s.field(`${i}.directoryName`, () => {
        const inner = s.enter(tag, "directoryName");
        const n = readName(inner);
        inner.expectEnd("directoryName");
        return n;
      });
      out.push({ kind: "directoryName", name });
    } else if (tag === contextTag(1, false) || tag === contextTag(2, false) || tag === contextTag(6, false)) {
      const t = s.any();
      const kind = tag === contextTag(1, false) ? "rfc822Name" : tag === contextTag(2, false) ? "dNSName" : "uniformResourceIdentifier";
      out.push({ kind, value: Buffer.from(tlvContent(t)).toString("latin1") });
    } else if (tag === contextTag(7, false)) {
      const bytes = tlvContent(s.any());
      out.push({ kind: "iPAddress", value: ipAddress(bytes), bytes });
    } else {
      s.any();
      out.push({ kind: "other", tag });
    }
  }
  if (out.length === 0) d.fail("GeneralNames is empty");
  return out;
}

function ipAddress(b: Uint8Array): string {
  if (b.length === 4) return [...b].join(".");
  if (b.length === 16) {
    const groups: string[] = [];
    for (let i = 0; i < 16; i += 2) groups.push((((b[i] ?? 0) << 8) | (b[i + 1] ?? 0)).toString(16));
    return groups.join(":");
  }
  return Buffer.from(b).toString("hex");
}

function authorityKeyIdentifier(d: DerReader): Uint8Array | undefined {
  const s = d.enter(TAG.SEQUENCE, "AuthorityKeyIdentifier");
  let keyId: Uint8Array | undefined;
  if (s.peekTag() === contextTag(0, false)) keyId = tlvContent(s.any());
  while (!s.atEnd) s.any(); // authorityCertIssuer / authorityCertSerialNumber: not used for path building
  return keyId;
}

/**
 * Extensions ::= SEQUENCE OF Extension (RFC 5280 §4.1), as in certificates and in a request's extensionRequest:
 * each as encoded (critical FALSE written out is not DER), and no extension twice (§4.2).
 */
export function readExtensions(d: DerReader): Extension[] {
  const list = d.enter(TAG.SEQUENCE, "Extensions");
  const out: Extension[] = [];
  while (!list.atEnd) {
    const ext = list.field(String(out.length), () => {
      const e = list.enter(TAG.SEQUENCE, "Extension");
      const oid = e.field("extnID", () => e.oid());
      let critical = false;
      if (e.peekTag() === TAG.BOOLEAN) {
        critical = e.field("critical", () => e.boolean());
        if (!critical) e.notDer("critical FALSE is the DEFAULT and must be omitted");
      }
      const value = e.field("extnValue", () => e.octetString());
      e.expectEnd("Extension");
      return { oid, critical, value };
    });
    if (out.some((x) => x.oid === ext.oid)) throw new CertificateError("duplicate-extension", `extension ${extensionName(ext.oid)} appears twice`);
    out.push(ext);
  }
  return out;
}
