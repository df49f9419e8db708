/**
 * The one codec vocabulary for every wire structure fleetd reads or writes (TPM 2.0 structures are
 * big-endian, UEFI event logs little-endian). Each structure is *declared* once from these pieces;
 * decode and encode both come from the declaration, so no structure has a hand-written parser that
 * could forget a bounds check.
 *
 * Errors name the field path and the offset, e.g.
 *   `TPMS_ATTEST.attested.quote.pcrDigest: need 32 bytes at offset 71, have 12`.
 */

export type Endian = "be" | "le";

/** Stable error codes for programs; the message is for people. */
export type ParseErrorCode =
  | "truncated"
  | "oversized"
  | "trailing-bytes"
  | "not-der" // a valid BER encoding that DER forbids (non-minimal length or INTEGER, explicit DEFAULT value)
  | "unknown-enum"
  | "invalid-value"
  | "limit";

export class ParseError extends Error {
  override readonly name = "ParseError";
  constructor(
    readonly code: ParseErrorCode,
    readonly path: string,
    readonly offset: number,
    readonly detail: string,
  ) {
    super(`${path || "<root>"}: ${detail} (offset ${offset})`);
  }
}

export class EncodeError extends Error {
  override readonly name = "EncodeError";
  constructor(
    readonly path: string,
    readonly detail: string,
  ) {
    super(`${path || "<root>"}: ${detail}`);
  }
}

/** A bounds-checked cursor over a byte array that remembers which field it is reading. */
export class Reader {
  private pos: number;
  private readonly end: number;
  private readonly dv: DataView;
  private readonly le: boolean;
  private readonly path: string[];

  constructor(
    readonly buf: Uint8Array,
    readonly endian: Endian = "be",
    opts: { start?: number; end?: number; path?: string[] } = {},
  ) {
    this.pos = opts.start ?? 0;
    this.end = opts.end ?? buf.length;
    this.dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    this.le = endian === "le";
    this.path = opts.path ?? [];
  }

  get offset(): number {
    return this.pos;
  }
  get remaining(): number {
    return this.end - this.pos;
  }
  get fieldPath(): string {
    return this.path.join(".");
  }

  /** Run `fn` with `name` pushed on the field path. */
  field<T>(name: string, fn: () => T): T {
    this.path.push(name);
    try {
      return fn();
    } finally {
      this.path.pop();
    }
  }

  /** Decode `codec` with `name` pushed on the field path (`field` without a closure per call: the hot path). */
  decodeField<T>(name: string, codec: Codec<T>, ctx?: Ctx): T {
    this.path.push(name);
    try {
      return codec.decode(this, ctx);
    } finally {
      this.path.pop();
    }
  }

  fail(code: ParseErrorCode, detail: string, offset = this.pos): never {
    throw new ParseError(code, this.fieldPath, offset, detail);
  }

  private need(n: number): number {
    if (n < 0 || !Number.isSafeInteger(n)) this.fail("invalid-value", `impossible length ${n}`);
    if (this.end - this.pos < n) {
      this.fail("truncated", `need ${n} bytes, have ${this.end - this.pos}`);
    }
    const at = this.pos;
    this.pos += n;
    return at;
  }

  u8(): number {
    return this.dv.getUint8(this.need(1));
  }
  u16(): number {
    return this.dv.getUint16(this.need(2), this.le);
  }
  u32(): number {
    return this.dv.getUint32(this.need(4), this.le);
  }
  u64(): bigint {
    return this.dv.getBigUint64(this.need(8), this.le);
  }
  /** A copy of the next `n` bytes. */
  bytes(n: number): Uint8Array {
    const at = this.need(n);
    return this.buf.slice(at, at + n);
  }
  /**
   * The next `n` bytes as a view of the input (no copy). For large read-only inputs such as event logs, whose
   * callers promise not to modify the input while they use the decoded value.
   */
  view(n: number): Uint8Array {
    const at = this.need(n);
    return this.buf.subarray(at, at + n);
  }
  /** `view(n)` with `name` on the field path of any error. */
  viewField(name: string, n: number): Uint8Array {
    this.path.push(name);
    try {
      return this.view(n);
    } finally {
      this.path.pop();
    }
  }
  /** The rest of the (sub-)range. */
  rest(): Uint8Array {
    return this.bytes(this.remaining);
  }
  /** A reader over the next `n` bytes only; this reader skips past them. */
  sub(n: number): Reader {
    const at = this.need(n);
    return new Reader(this.buf, this.endian, { start: at, end: at + n, path: this.path });
  }
  /** Skip `n` bytes. */
  skip(n: number): void {
    this.need(n);
  }
  expectEnd(): void {
    if (this.pos !== this.end) {
      this.fail("trailing-bytes", `${this.end - this.pos} unexpected trailing bytes`);
    }
  }
}

/** A growable byte buffer. */
export class Writer {
  private buf = new Uint8Array(256);
  private view = new DataView(this.buf.buffer);
  private len = 0;
  private readonly path: string[] = [];

  constructor(readonly endian: Endian = "be") {}

  get length(): number {
    return this.len;
  }
  field<T>(name: string, fn: () => T): T {
    this.path.push(name);
    try {
      return fn();
    } finally {
      this.path.pop();
    }
  }
  fail(detail: string): never {
    throw new EncodeError(this.path.join("."), detail);
  }
  private grow(n: number): number {
    if (this.len + n > this.buf.length) {
      let cap = this.buf.length * 2;
      while (cap < this.len + n) cap *= 2;
      const next = new Uint8Array(cap);
      next.set(this.buf.subarray(0, this.len));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.len;
    this.len += n;
    return at;
  }
  private checkInt(v: number, max: number): void {
    if (!Number.isInteger(v) || v < 0 || v > max) this.fail(`value ${v} out of range 0..${max}`);
  }
  u8(v: number): this {
    this.checkInt(v, 0xff);
    const at = this.grow(1);
    this.view.setUint8(at, v);
    return this;
  }
  u16(v: number): this {
    this.checkInt(v, 0xffff);
    const at = this.grow(2);
    this.view.setUint16(at, v, this.endian === "le");
    return this;
  }
  u32(v: number): this {
    this.checkInt(v, 0xffffffff);
    const at = this.grow(4);
    this.view.setUint32(at, v, this.endian === "le");
    return this;
  }
  u64(v: bigint): this {
    if (v < 0n || v > 0xffffffffffffffffn) this.fail(`value ${v} out of range for u64`);
    const at = this.grow(8);
    this.view.setBigUint64(at, v, this.endian === "le");
    return this;
  }
  bytes(b: Uint8Array): this {
    const at = this.grow(b.length); // grow first: it may replace this.buf
    this.buf.set(b, at);
    return this;
  }
  /** Reserve `n` bytes, returning a function that fills them later (for size prefixes). */
  placeholderU16(): (v: number) => void {
    const at = this.grow(2);
    return (v: number) => {
      this.checkInt(v, 0xffff);
      this.view.setUint16(at, v, this.endian === "le");
    };
  }
  placeholderU32(): (v: number) => void {
    const at = this.grow(4);
    return (v: number) => {
      this.checkInt(v, 0xffffffff);
      this.view.setUint32(at, v, this.endian === "le");
    };
  }
  finish(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

/** Decoding context: the fields of the enclosing struct read so far (for union selectors). */
export type Ctx = Readonly<Record<string, unknown>>;

export interface Codec<T> {
  /** Spec name of the type, used in error messages and docs. */
  readonly typeName: string;
  decode(r: Reader, ctx?: Ctx): T;
  encode(w: Writer, v: T, ctx?: Ctx): void;
}

export type Infer<C> = C extends Codec<infer T> ? T : never;

function prim<T>(typeName: string, decode: (r: Reader) => T, encode: (w: Writer, v: T) => void): Codec<T> {
  return { typeName, decode: (r) => decode(r), encode: (w, v) => encode(w, v) };
}

export const u8 = prim<number>("UINT8", (r) => r.u8(), (w, v) => w.u8(v));
export const u16 = prim<number>("UINT16", (r) => r.u16(), (w, v) => w.u16(v));
export const u32 = prim<number>("UINT32", (r) => r.u32(), (w, v) => w.u32(v));
export const u64 = prim<bigint>("UINT64", (r) => r.u64(), (w, v) => w.u64(v));

/** Exactly `n` raw bytes (a copy; `{ view: true }`: a view of the input, see `Reader.view`). */
export function fixed(n: number, typeName = `BYTE[${n}]`, opts: { view?: boolean } = {}): Codec<Uint8Array> {
  return {
    typeName,
    decode: opts.view ? (r) => r.view(n) : (r) => r.bytes(n),
    encode: (w, v) => {
      if (v.length !== n) w.fail(`need exactly ${n} bytes, got ${v.length}`);
      w.bytes(v);
    },
  };
}

/** A value restricted to a known set, e.g. TPM_ALG_ID values allowed in a TPMI_ALG_HASH. */
export function oneOf(base: Codec<number>, typeName: string, allowed: readonly number[]): Codec<number> {
  const set = new Set<number>(allowed);
  return {
    typeName,
    decode: (r) => {
      const at = r.offset;
      const v = base.decode(r);
      if (!set.has(v)) r.fail("unknown-enum", `${typeName} value 0x${v.toString(16)} is not allowed`, at);
      return v;
    },
    encode: (w, v) => {
      if (!set.has(v)) w.fail(`${typeName} value 0x${v.toString(16)} is not allowed`);
      base.encode(w, v);
    },
  };
}

/**
 * TPM2B_x: u16 size then that many bytes, with the spec's maximum enforced
 * (an oversized size is an error before any bytes are read).
 */
export function sizedBytes(typeName: string, max: number, min = 0): Codec<Uint8Array> {
  return {
    typeName,
    decode: (r) => {
      const at = r.offset;
      const n = r.field("size", () => r.u16());
      if (n > max) r.fail("oversized", `${typeName} size ${n} exceeds maximum ${max}`, at);
      if (n < min) r.fail("invalid-value", `${typeName} size ${n} is below minimum ${min}`, at);
      return r.field("buffer", () => r.bytes(n));
    },
    encode: (w, v) => {
      if (v.length > max) w.fail(`${typeName} size ${v.length} exceeds maximum ${max}`);
      w.u16(v.length).bytes(v);
    },
  };
}

/**
 * TPM 1.2 style variable bytes: a u32 size then that many bytes, with a maximum enforced before any bytes are
 * read (TPM_STORE_PUBKEY.key, TPM_KEY.encData, a response's sigSize ‖ sig, …).
 */
export function sizedBytes32(typeName: string, max: number, min = 0): Codec<Uint8Array> {
  return {
    typeName,
    decode: (r) => {
      const at = r.offset;
      const n = r.field("size", () => r.u32());
      if (n > max) r.fail("oversized", `${typeName} size ${n} exceeds maximum ${max}`, at);
      if (n < min) r.fail("invalid-value", `${typeName} size ${n} is below minimum ${min}`, at);
      return r.field("buffer", () => r.bytes(n));
    },
    encode: (w, v) => {
      if (v.length > max) w.fail(`${typeName} size ${v.length} exceeds maximum ${max}`);
      w.u32(v.length).bytes(v);
    },
  };
}

/** A TPM2B wrapping a structure: u16 size, then exactly that structure filling the size. */
export function sized<T>(typeName: string, inner: Codec<T>, max = 0xffff): Codec<T> {
  return {
    typeName,
    decode: (r) => {
      const at = r.offset;
      const n = r.field("size", () => r.u16());
      if (n > max) r.fail("oversized", `${typeName} size ${n} exceeds maximum ${max}`, at);
      if (n === 0) r.fail("invalid-value", `${typeName} is empty`, at);
      const sub = r.sub(n);
      const v = inner.decode(sub);
      sub.expectEnd();
      return v;
    },
    encode: (w, v) => {
      const set = w.placeholderU16();
      const start = w.length;
      inner.encode(w, v);
      const n = w.length - start;
      if (n > max) w.fail(`${typeName} size ${n} exceeds maximum ${max}`);
      set(n);
    },
  };
}

type Fields = Record<string, Codec<unknown>>;
export type StructOf<F extends Fields> = { [K in keyof F]: Infer<F[K]> };

/** A sequence of named fields, in declaration order. */
export function struct<F extends Fields>(typeName: string, fields: F): Codec<StructOf<F>> {
  const entries = Object.entries(fields);
  return {
    typeName,
    decode: (r) => {
      const out: Record<string, unknown> = {};
      for (const [name, codec] of entries) out[name] = r.decodeField(name, codec, out);
      return out as StructOf<F>;
    },
    encode: (w, v) => {
      const rec = v as Record<string, unknown>;
      for (const [name, codec] of entries) {
        w.field(name, () => codec.encode(w, rec[name], rec));
      }
    },
  };
}

/** Add a discriminating `kind` to every arm of a union so TypeScript can narrow on it. */
export type Arm<K extends string, T> = { kind: K } & T;
type Arms = Record<number, readonly [string, Codec<object>]>;
type ArmValue<A extends Arms> = {
  [S in keyof A]: A[S] extends readonly [infer K extends string, Codec<infer T>] ? Arm<K, T> : never;
}[keyof A];

/**
 * A union selected by a previously decoded field of the enclosing struct (TPMU_x with its selector).
 * An unknown selector value is an `unknown-enum` error.
 */
export function union<A extends Arms>(typeName: string, selector: string, arms: A): Codec<ArmValue<A>> {
  const byKind = new Map<string, Codec<object>>();
  for (const [, [kind, codec]] of Object.entries(arms)) byKind.set(kind, codec);
  return {
    typeName,
    decode: (r: Reader, ctx?: Ctx) => {
      const sel = ctx?.[selector];
      if (typeof sel !== "number") r.fail("invalid-value", `${typeName}: selector ${selector} missing`);
      const arm = arms[sel];
      if (!arm) r.fail("unknown-enum", `${typeName}: no member for ${selector} 0x${sel.toString(16)}`);
      const [kind, codec] = arm;
      return { kind, ...r.field(kind, () => codec.decode(r)) } as ArmValue<A>;
    },
    encode: (w: Writer, v, ctx?: Ctx) => {
      const sel = ctx?.[selector];
      if (typeof sel !== "number") w.fail(`${typeName}: selector ${selector} missing`);
      const arm = arms[sel];
      if (!arm) w.fail(`${typeName}: no member for ${selector} 0x${sel.toString(16)}`);
      const [kind, codec] = arm;
      const val = v as { kind: string };
      if (val.kind !== kind) w.fail(`${typeName}: value is ${val.kind} but ${selector} selects ${kind}`);
      const { kind: _k, ...rest } = val;
      codec.encode(w, rest);
    },
  };
}

/** An empty structure (a union member with no bytes). */
export const empty: Codec<Record<never, never>> = {
  typeName: "EMPTY",
  decode: () => ({}),
  encode: () => {},
};

/** TPML_x: a count of type `count`, at most `max` items. */
export function list<T>(typeName: string, count: Codec<number>, item: Codec<T>, max: number): Codec<T[]> {
  return {
    typeName,
    decode: (r) => {
      const at = r.offset;
      const n = r.decodeField("count", count);
      if (n > max) r.fail("oversized", `${typeName} count ${n} exceeds maximum ${max}`, at);
      const out: T[] = [];
      for (let i = 0; i < n; i++) out.push(r.decodeField(String(i), item));
      return out;
    },
    encode: (w, v) => {
      if (v.length > max) w.fail(`${typeName} count ${v.length} exceeds maximum ${max}`);
      count.encode(w, v.length);
      v.forEach((it, i) => w.field(String(i), () => item.encode(w, it)));
    },
  };
}

/** Decode a whole buffer as one structure; trailing bytes are an error. */
export function decodeExact<T>(codec: Codec<T>, buf: Uint8Array, endian: Endian = "be"): T {
  const r = new Reader(buf, endian, { path: [codec.typeName] });
  const v = codec.decode(r);
  r.expectEnd();
  return v;
}

/** Decode a structure from the start of a buffer, returning the value and the bytes consumed. */
export function decodePrefix<T>(codec: Codec<T>, buf: Uint8Array, endian: Endian = "be"): { value: T; length: number } {
  const r = new Reader(buf, endian, { path: [codec.typeName] });
  const value = codec.decode(r);
  return { value, length: r.offset };
}

export function encode<T>(codec: Codec<T>, v: T, endian: Endian = "be"): Uint8Array {
  const w = new Writer(endian);
  w.field(codec.typeName, () => codec.encode(w, v));
  return w.finish();
}

/**
 * A structure together with its exact wire bytes (e.g. a TPMT_PUBLIC whose Name must be computed over what the
 * TPM sent, or a TPMS_ATTEST whose signature covers it). Decoding keeps the bytes consumed; encoding writes the
 * kept bytes verbatim, so a value read from one TPM is sent on unchanged.
 */
export interface Captured<T> {
  value: T;
  bytes: Uint8Array;
}
export function captured<T>(inner: Codec<T>): Codec<Captured<T>> {
  return {
    typeName: inner.typeName,
    decode: (r, ctx) => {
      const start = r.offset;
      const value = inner.decode(r, ctx);
      return { value, bytes: r.buf.slice(start, r.offset) };
    },
    encode: (w, v) => {
      w.bytes(v.bytes);
    },
  };
}
