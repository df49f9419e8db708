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
