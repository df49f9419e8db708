/**
 * X.501 distinguished names (RFC 5280 §4.1.2.4): decoded for display and for issuer/subject matching.
 * The raw DER is kept; matching uses a normalised key (attribute values trimmed, inner spaces collapsed,
 * case-folded; the attributes of a multi-valued RDN sorted), so an issuer encoded as PrintableString
 * matches a subject encoded as UTF8String, and Nuvoton's unsorted SETs match however they are ordered.
 */
import { DerReader, TAG, tlvBytes, tlvContent, type Tlv } from "./der.js";
import { NAME_ATTRIBUTES } from "./oids.js";

export interface NameAttribute {
  /** Attribute type OID. */
  type: string;
  /** Decoded string value; values of non-string types are "#" + hex of their DER (RFC 4514 §2.4). */
  value: string;
}

export interface Name {
  /** The Name exactly as encoded in the certificate. */
  der: Uint8Array;
  /** RDNSequence: each RDN is one or more attributes. */
  rdns: NameAttribute[][];
}

/** Read a Name (an RDNSequence SEQUENCE). */
export function readName(d: DerReader): Name {
  const { inner, tlv } = d.enterTlv(TAG.SEQUENCE, "Name (RDNSequence)");
  const der = tlvBytes(tlv);
  const rdns: NameAttribute[][] = [];
  while (!inner.atEnd) {
    const attrs = inner.field(`rdn${rdns.length}`, () => {
      const set = inner.enter(TAG.SET, "RelativeDistinguishedName");
      const out: NameAttribute[] = [];
      while (!set.atEnd) {
        const atv = set.enter(TAG.SEQUENCE, "AttributeTypeAndValue");
        const type = atv.oid();
        const value = decodeValue(atv.any());
        atv.expectEnd("AttributeTypeAndValue");
        out.push({ type, value });
      }
      if (out.length === 0) set.fail("a RelativeDistinguishedName is empty");
      return out;
    });
    rdns.push(attrs);
  }
  return { der, rdns };
}

/** Decode a directory string value (PrintableString, UTF8String, IA5String, TeletexString, BMPString, UniversalString). */
export function decodeValue(t: Tlv): string {
  const c = tlvContent(t);
  switch (t.tag) {
    case TAG.UTF8String:
      return new TextDecoder("utf-8", { fatal: false }).decode(c);
    case TAG.PrintableString:
    case TAG.IA5String:
    case TAG.TeletexString:
      return Buffer.from(c).toString("latin1");
    case TAG.BMPString: {
      let s = "";
      for (let i = 0; i + 1 < c.length; i += 2) s += String.fromCharCode(((c[i] ?? 0) << 8) | (c[i + 1] ?? 0));
      return s;
    }
    case TAG.UniversalString: {
      let s = "";
      for (let i = 0; i + 3 < c.length; i += 4) {
        const cp = (((c[i] ?? 0) << 24) | ((c[i + 1] ?? 0) << 16) | ((c[i + 2] ?? 0) << 8) | (c[i + 3] ?? 0)) >>> 0;
        s += cp <= 0x10ffff ? String.fromCodePoint(cp) : "\ufffd";
      }
      return s;
    }
    default:
      return "#" + Buffer.from(tlvBytes(t)).toString("hex");
  }
}

/** Human-readable form, most significant RDN first as certificates store it: "C=CH, O=STMicroelectronics NV, CN=...". */
export function formatName(n: Name): string {
  if (n.rdns.length === 0) return "(empty)";
  return n.rdns.map((rdn) => rdn.map((a) => `${NAME_ATTRIBUTES[a.type] ?? a.type}=${a.value}`).join(" + ")).join(", ");
}

/** Normalised key for issuer/subject matching. */
export function nameKey(n: Name): string {
  return n.rdns
    .map((rdn) =>
      rdn
        .map((a) => `${a.type}=${a.value.trim().replace(/\s+/g, " ").toLowerCase()}`)
        .sort()
        .join("+"),
    )
    .join("/");
}

/** Values of one attribute type anywhere in the name. */
export function nameValues(n: Name, type: string): string[] {
  return n.rdns.flatMap((rdn) => rdn.filter((a) => a.type === type).map((a) => a.value));
}

/**
 * OpenSSL's short names (OBJ_nid2sn) of attribute types, by arc, as read from node 24's OpenSSL (a
 * type OpenSSL has no name for prints as its dotted OID, as here). Covers X.520 (2.5.4), PKCS#9, the pilot
 * (0.9.2342.19200300.100.1), TCG (2.23.133.2) and EV jurisdiction (1.3.6.1.4.1.311.60.2.1) attributes.
 */
const OPENSSL_SHORT_NAMES: ReadonlyMap<string, string> = new Map(
  ([
    ["2.5.4", { 3: "CN", 4: "SN", 5: "serialNumber", 6: "C", 7: "L", 8: "ST", 9: "street", 10: "O", 11: "OU", 12: "title", 13: "description", 14: "searchGuide", 15: "businessCategory", 16: "postalAddress", 17: "postalCode", 18: "postOfficeBox", 19: "physicalDeliveryOfficeName", 20: "telephoneNumber", 21: "telexNumber", 22: "teletexTerminalIdentifier", 23: "facsimileTelephoneNumber", 24: "x121Address", 25: "internationaliSDNNumber", 26: "registeredAddress", 27: "destinationIndicator", 28: "preferredDeliveryMethod", 29: "presentationAddress", 30: "supportedApplicationContext", 31: "member", 32: "owner", 33: "roleOccupant", 34: "seeAlso", 35: "userPassword", 36: "userCertificate", 37: "cACertificate", 38: "authorityRevocationList", 39: "certificateRevocationList", 40: "crossCertificatePair", 41: "name", 42: "GN", 43: "initials", 44: "generationQualifier", 45: "x500UniqueIdentifier", 46: "dnQualifier", 47: "enhancedSearchGuide", 48: "protocolInformation", 49: "distinguishedName", 50: "uniqueMember", 51: "houseIdentifier", 52: "supportedAlgorithms", 53: "deltaRevocationList", 54: "dmdName", 65: "pseudonym", 72: "role", 97: "organizationIdentifier", 98: "c3", 99: "n3", 100: "dnsName" }],
    ["1.2.840.113549.1.9", { 1: "emailAddress", 2: "unstructuredName", 3: "contentType", 4: "messageDigest", 5: "signingTime", 6: "countersignature", 7: "challengePassword", 8: "unstructuredAddress", 9: "extendedCertificateAttributes", 14: "extReq", 15: "SMIME-CAPS", 16: "SMIME", 20: "friendlyName", 21: "localKeyID" }],
    ["0.9.2342.19200300.100.1", { 1: "UID", 2: "textEncodedORAddress", 3: "mail", 4: "info", 5: "favouriteDrink", 6: "roomNumber", 7: "photo", 8: "userClass", 9: "host", 10: "manager", 11: "documentIdentifier", 12: "documentTitle", 13: "documentVersion", 14: "documentAuthor", 15: "documentLocation", 20: "homeTelephoneNumber", 21: "secretary", 22: "otherMailbox", 23: "lastModifiedTime", 24: "lastModifiedBy", 25: "DC", 26: "aRecord", 27: "pilotAttributeType27", 28: "mXRecord", 29: "nSRecord", 30: "sOARecord", 31: "cNAMERecord", 37: "associatedDomain", 38: "associatedName", 39: "homePostalAddress", 40: "personalTitle", 41: "mobileTelephoneNumber", 42: "pagerTelephoneNumber", 43: "friendlyCountryName", 44: "uid", 45: "organizationalStatus", 46: "janetMailbox", 47: "mailPreferenceOption", 48: "buildingName", 49: "dSAQuality", 50: "singleLevelQuality", 51: "subtreeMinimumQuality", 52: "subtreeMaximumQuality", 53: "personalSignature", 54: "dITRedirect", 55: "audio", 56: "documentPublisher" }],
    ["2.23.133.2", { 1: "tcg-at-tpmManufacturer", 2: "tcg-at-tpmModel", 3: "tcg-at-tpmVersion", 10: "tcg-at-securityQualities", 11: "tcg-at-tpmProtectionProfile", 12: "tcg-at-tpmSecurityTarget", 13: "tcg-at-tbbProtectionProfile", 14: "tcg-at-tbbSecurityTarget", 15: "tcg-at-tpmIdLabel", 16: "tcg-at-tpmSpecification", 17: "tcg-at-tcgPlatformSpecification", 18: "tcg-at-tpmSecurityAssertions", 19: "tcg-at-tbbSecurityAssertions", 23: "tcg-at-tcgCredentialSpecification", 25: "tcg-at-tcgCredentialType", 26: "tcg-at-previousPlatformCertificates", 27: "tcg-at-tbbSecurityAssertions-v3", 28: "tcg-at-cryptographicAnchors" }],
    ["1.3.6.1.4.1.311.60.2.1", { 1: "jurisdictionL", 2: "jurisdictionST", 3: "jurisdictionC" }],
  ] as [string, Record<number, string>][]).flatMap(([arc, names]) => Object.entries(names).map(([n, sn]): [string, string] => [`${arc}.${n}`, sn])),
);

/** RFC 2253 specials OpenSSL escapes with a backslash anywhere in a value. */
const ESC_2253 = new Set([0x22, 0x2b, 0x2c, 0x3b, 0x3c, 0x3e, 0x5c]);

/** Code points of a value as OpenSSL's do_buf reads them for its tag (UTF8String: one per byte, passed through raw). */
function opensslChars(tag: number, c: Uint8Array): { cps: number[]; raw: boolean } {
  const cps: number[] = [];
  if (tag === TAG.BMPString) for (let i = 0; i + 1 < c.length; i += 2) cps.push(((c[i] ?? 0) << 8) | (c[i + 1] ?? 0));
  else if (tag === TAG.UniversalString) {
    for (let i = 0; i + 3 < c.length; i += 4) cps.push((((c[i] ?? 0) << 24) | ((c[i + 1] ?? 0) << 16) | ((c[i + 2] ?? 0) << 8) | (c[i + 3] ?? 0)) >>> 0);
  } else cps.push(...c);
  return { cps, raw: tag === TAG.UTF8String };
}

/** One value as X509_NAME_print_ex prints it with ASN1_STRFLGS_ESC_2253 | ESC_CTRL | UTF8_CONVERT. */
function opensslValue(t: Tlv): string {
  const { cps, raw } = opensslChars(t.tag, tlvContent(t));
  const out: number[] = [];
  const ascii = (s: string) => out.push(...Buffer.from(s, "latin1"));
  cps.forEach((cp, i) => {
    if (cp >= 0x80) {
      if (raw) out.push(cp);
      else out.push(...Buffer.from(String.fromCodePoint(Math.min(cp, 0x10ffff)), "utf8"));
      return;
    }
    const first = i === 0;
    const last = i === cps.length - 1;
    if (ESC_2253.has(cp) || (first && cp === 0x23) || ((first || last) && cp === 0x20)) ascii("\\" + String.fromCharCode(cp));
    else if (cp < 0x20 || cp === 0x7f) ascii("\\" + cp.toString(16).toUpperCase().padStart(2, "0"));
    else out.push(cp);
  });
  return new TextDecoder("utf-8", { fatal: false }).decode(Uint8Array.from(out));
}

/**
 * The name as OpenSSL prints it with X509_NAME_print_ex(XN_FLAG_SEP_MULTILINE | XN_FLAG_FN_SN, ESC_2253 |
 * ESC_CTRL | UTF8_CONVERT) — the text node's X509Certificate gives as `subject` and `issuer`: one RDN per line
 * in encoded order, "SN=value", the attributes of a multi-valued RDN joined by " + ". Report strings and policy
 * profiles match on this text, so it stays byte-for-byte what they were written against.
 */
export function opensslNameText(n: Name): string {
  const d = DerReader.of(n.der, "Name");
  const seq = d.enter(TAG.SEQUENCE, "Name (RDNSequence)");
  const lines: string[] = [];
  while (!seq.atEnd) {
    const set = seq.enter(TAG.SET, "RelativeDistinguishedName");
    const parts: string[] = [];
    while (!set.atEnd) {
      const atv = set.enter(TAG.SEQUENCE, "AttributeTypeAndValue");
      const type = atv.oid();
      parts.push(`${OPENSSL_SHORT_NAMES.get(type) ?? type}=${opensslValue(atv.any())}`);
    }
    lines.push(parts.join(" + "));
  }
  return lines.join("\n");
}
