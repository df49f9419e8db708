/**
 * A small DER reader (X.690) over the codec `Reader`, enough for X.509 certificates and public keys.
 *
 * Every element keeps its exact byte range, so callers can hash or verify the bytes as received (a
 * certificate's signature covers the original tbsCertificate, never a re-encoding — Nuvoton roots carry
 * SETs that are not DER-sorted). Errors are `ParseError`s naming the field path and offset.
 *
 * Accepted leniencies (they never change what a signature covers): long-form lengths that could have been
 * short, and SET ordering. Refused: indefinite lengths (BER), high tag numbers, lengths over 4 bytes.
 *
 * A `strict` reader (certificates fleetd issues, certification requests) also refuses what DER forbids and BER
 * allows — non-minimal lengths, non-minimal INTEGERs, BOOLEANs other than 00/FF — as ParseError "not-der";
 * callers check DEFAULT values written out (see certificate.ts). Trailing data is refused in both modes.
 */
import { Reader } from "../codec/codec.js";

/** Universal tags used here. */
export const TAG = {
  BOOLEAN: 0x01,
  INTEGER: 0x02,
  BIT_STRING: 0x03,
  OCTET_STRING: 0x04,
  NULL: 0x05,
  OID: 0x06,
  UTF8String: 0x0c,
  SEQUENCE: 0x30,
  SET: 0x31,
  PrintableString: 0x13,
  TeletexString: 0x14,
  IA5String: 0x16,
  UTCTime: 0x17,
  GeneralizedTime: 0x18,
  UniversalString: 0x1c,
  BMPString: 0x1e,
} as const;

/** Tag byte of a context-specific element: [n] (constructed for EXPLICIT tagging and SEQUENCE-like contents). */
export function contextTag(n: number, constructed: boolean): number {
  return 0x80 | (constructed ? 0x20 : 0) | n;
}

/** One TLV: its tag byte and the offsets of the whole element and of its contents within `buf`. */
export interface Tlv {
  readonly tag: number;
  readonly start: number;
  readonly contentStart: number;
  readonly end: number;
  readonly buf: Uint8Array;
}

/** The whole element (tag, length and contents) as a view of the original bytes. */
export function tlvBytes(t: Tlv): Uint8Array {
  return t.buf.subarray(t.start, t.end);
}
/** The contents as a view of the original bytes. */
export function tlvContent(t: Tlv): Uint8Array {
  return t.buf.subarray(t.contentStart, t.end);
}

function tagName(tag: number): string {
  const u = Object.entries(TAG).find(([, v]) => v === tag);
  if (u) return u[0];
  if ((tag & 0xc0) === 0x80) return `[${tag & 0x1f}]`;
  return `tag 0x${tag.toString(16).padStart(2, "0")}`;
}

/**
 * A cursor over a run of DER elements (the contents of a constructed element, or a whole buffer).
 * It wraps a codec `Reader`, so the field path in errors is shared with the codec.
 */
export class DerReader {
  constructor(
    readonly r: Reader,
    /** Refuse BER leniencies (see the file comment). Readers made by `enter` inherit it. */
    readonly strict = false,
  ) {}

  static of(buf: Uint8Array, path: string, options: { strict?: boolean } = {}): DerReader {
    return new DerReader(new Reader(buf, "be", { path: [path] }), options.strict ?? false);
  }

  /** In strict mode, fail with "not-der"; otherwise accept. */
  notDer(detail: string, offset?: number): void {
    if (this.strict) this.r.fail("not-der", `not DER: ${detail}`, offset);
  }

  get atEnd(): boolean {
    return this.r.remaining === 0;
  }

  /** Tag of the next element without consuming it (undefined at the end). */
  peekTag(): number | undefined {
    return this.r.remaining > 0 ? this.r.buf[this.r.offset] : undefined;
  }

  field<T>(name: string, fn: () => T): T {
    return this.r.field(name, fn);
  }

  fail(detail: string, offset?: number): never {
    return this.r.fail("invalid-value", detail, offset);
  }

  /** Read the next element's tag and length, leaving the cursor at its contents. */
  private header(): { tag: number; start: number; len: number } {
    const r = this.r;
    const start = r.offset;
    const tag = r.u8();
    if ((tag & 0x1f) === 0x1f) r.fail("invalid-value", "high tag numbers are not used in certificates", start);
    const first = r.u8();
    let len = 0;
    if (first < 0x80) {
      len = first;
    } else if (first === 0x80) {
      r.fail("invalid-value", "indefinite length (BER) is not DER", start + 1);
    } else {
      const n = first & 0x7f;
      if (n > 4) r.fail("oversized", `length of length ${n} bytes is too large`, start + 1);
      len = 0;
      for (let i = 0; i < n; i++) len = len * 256 + r.u8();
      if (len < 0x80 || len < 256 ** (n - 1)) this.notDer(`length ${len} is not minimally encoded`, start + 1);
    }
    if (len > r.remaining) r.fail("truncated", `${tagName(tag)} needs ${len} bytes, have ${r.remaining}`, start);
    return { tag, start, len };
  }

  /** Read the next element, whatever it is. */
  any(): Tlv {
    const { tag, start, len } = this.header();
    const contentStart = this.r.offset;
    this.r.skip(len);
    return { tag, start, contentStart, end: contentStart + len, buf: this.r.buf };
  }

  /** Read the next element and require its tag. */
  next(tag: number, what?: string): Tlv {
    this.expectTag(tag, what);
    return this.any();
  }

  /** A reader over the contents of the next element, which must have `tag` (it shares this reader's field path). */
  enter(tag: number, what?: string): DerReader {
    return this.enterTlv(tag, what).inner;
  }

  /** Like `enter`, also returning the element's byte range (to keep its exact encoding). */
  enterTlv(tag: number, what?: string): { inner: DerReader; tlv: Tlv } {
    this.expectTag(tag, what);
    const { start, len } = this.header();
    const contentStart = this.r.offset;
    const inner = new DerReader(this.r.sub(len), this.strict);
    return { inner, tlv: { tag, start, contentStart, end: contentStart + len, buf: this.r.buf } };
  }

  private expectTag(tag: number, what?: string): void {
    const at = this.r.offset;
    const got = this.peekTag();
    if (got === undefined) this.r.fail("truncated", `expected ${what ?? tagName(tag)}, found the end`, at);
    if (got !== tag) this.fail(`expected ${what ?? tagName(tag)}, found ${tagName(got)}`, at);
  }

  /** If the next element has `tag`, read it; otherwise leave the cursor alone. */
  optional(tag: number): Tlv | undefined {
    return this.peekTag() === tag ? this.any() : undefined;
  }

  expectEnd(what = "element"): void {
    if (!this.atEnd) this.r.fail("trailing-bytes", `${this.r.remaining} unexpected bytes at the end of the ${what}`);
  }

  // ---- primitives ----

  /** INTEGER as its big-endian two's-complement content bytes (checked non-empty). */
  integerBytes(): Uint8Array {
    const t = this.next(TAG.INTEGER);
    const c = tlvContent(t);
    if (c.length === 0) this.fail("INTEGER has no content", t.start);
    if (c.length > 1 && ((c[0] === 0 && (c[1] ?? 0) < 0x80) || (c[0] === 0xff && (c[1] ?? 0) >= 0x80))) {
      this.notDer("INTEGER has a redundant leading byte", t.start);
    }
    return c;
  }

  /** Non-negative INTEGER as unsigned magnitude bytes (leading sign zero removed). */
  unsignedInteger(): Uint8Array {
    const at = this.r.offset;
    const c = this.integerBytes();
    if ((c[0] ?? 0) & 0x80) this.fail("INTEGER is negative where a non-negative value is required", at);
    let i = 0;
    while (i < c.length - 1 && c[i] === 0) i++;
    return c.subarray(i);
  }

  /** Small non-negative INTEGER as a number (at most 2^31). */
  smallInteger(): number {
    const at = this.r.offset;
    const c = this.unsignedInteger();
    if (c.length > 4) this.fail("INTEGER is too large", at);
    let v = 0;
    for (const b of c) v = v * 256 + b;
    if (v > 0x7fffffff) this.fail("INTEGER is too large", at);
    return v;
  }

  boolean(): boolean {
    const t = this.next(TAG.BOOLEAN);
    const c = tlvContent(t);
    if (c.length !== 1) this.fail("BOOLEAN must be one byte", t.start);
    if (c[0] !== 0 && c[0] !== 0xff) this.notDer(`BOOLEAN 0x${(c[0] ?? 0).toString(16)} is neither 00 nor FF`, t.start);
    return c[0] !== 0;
  }

  null(): void {
    const t = this.next(TAG.NULL);
    if (t.end !== t.contentStart) this.fail("NULL must be empty", t.start);
  }

  oid(): string {
    const t = this.next(TAG.OID, "OBJECT IDENTIFIER");
    return decodeOid(tlvContent(t), this, t.start);
  }

  octetString(): Uint8Array {
    return tlvContent(this.next(TAG.OCTET_STRING));
  }

  /** BIT STRING with zero unused bits (keys and signatures). */
  bitStringBytes(): Uint8Array {
    const t = this.next(TAG.BIT_STRING);
    const c = tlvContent(t);
    if (c.length === 0) this.fail("BIT STRING has no content", t.start);
    if (c[0] !== 0) this.fail(`BIT STRING has ${c[0]} unused bits where whole bytes are required`, t.start);
    return c.subarray(1);
  }

  /** BIT STRING as a list of set bit numbers (bit 0 = most significant bit of the first byte). */
  bitStringBits(): Set<number> {
    const t = this.next(TAG.BIT_STRING);
    const c = tlvContent(t);
    if (c.length === 0) this.fail("BIT STRING has no content", t.start);
    const unused = c[0] ?? 0;
    if (unused > 7 || (c.length === 1 && unused !== 0)) this.fail(`BIT STRING has an invalid unused-bit count ${unused}`, t.start);
    const bits = new Set<number>();
    const total = (c.length - 1) * 8 - unused;
    for (let i = 0; i < total; i++) {
      if (((c[1 + (i >> 3)] ?? 0) >> (7 - (i & 7))) & 1) bits.add(i);
    }
    return bits;
  }

  /** UTCTime or GeneralizedTime (X.509 Validity). */
  time(): Date {
    const at = this.r.offset;
    const tag = this.peekTag();
    if (tag !== TAG.UTCTime && tag !== TAG.GeneralizedTime) this.fail("expected UTCTime or GeneralizedTime", at);
    const t = this.any();
    const s = ascii(tlvContent(t));
    const m =
      tag === TAG.UTCTime
        ? /^(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(s)
        : /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(s);
    if (!m) this.fail(`time "${printable(s)}" is not in the DER form YY(YY)MMDDHHMMSSZ`, at);
    const n = m.slice(1).map(Number) as [number, number, number, number, number, number];
    const year = tag === TAG.UTCTime ? (n[0] < 50 ? 2000 + n[0] : 1900 + n[0]) : n[0];
    const [, mon, day, h, min, sec] = n;
    if (mon < 1 || mon > 12 || day < 1 || day > 31 || h > 23 || min > 59 || sec > 60) {
      this.fail(`time "${s}" has a field out of range`, at);
    }
    const d = new Date(Date.UTC(year, mon - 1, day, h, min, sec));
    if (d.getUTCDate() !== day) this.fail(`time "${s}" is not a calendar date`, at);
    return d;
  }
}

export function decodeOid(c: Uint8Array, d: DerReader, at: number): string {
  if (c.length === 0) d.fail("OBJECT IDENTIFIER is empty", at);
  if (c.length > 64) d.fail("OBJECT IDENTIFIER is too long", at);
  const parts: string[] = [];
  let v = 0n;
  let started = false;
  for (let i = 0; i < c.length; i++) {
    const b = c[i] ?? 0;
    if (!started && b === 0x80) d.fail("OBJECT IDENTIFIER component is not minimally encoded", at);
    started = true;
    v = (v << 7n) | BigInt(b & 0x7f);
    if ((b & 0x80) === 0) {
      if (parts.length === 0) {
        const first = v < 40n ? 0n : v < 80n ? 1n : 2n;
        parts.push(first.toString(), (v - first * 40n).toString());
      } else {
        parts.push(v.toString());
      }
      v = 0n;
      started = false;
    }
  }
  if (started) d.fail("OBJECT IDENTIFIER ends inside a component", at);
  return parts.join(".");
}

export function ascii(b: Uint8Array): string {
  return Buffer.from(b).toString("latin1");
}

function printable(s: string): string {
  return s.replace(/[^\x20-\x7e]/g, "?").slice(0, 40);
}
