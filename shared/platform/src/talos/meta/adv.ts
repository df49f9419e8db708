/**
 * The Talos ADV ("Talos extended ADV", github.com/siderolabs/go-adv adv/talos; before that
 * talos:internal/pkg/meta/internal/adv/talos). One copy is a 256 KiB block, all integers big-endian:
 *
 *   0x00000   4   Magic1 0x5a4b3c2d
 *   0x00004   …   records: u32 tag, u32 size, size bytes of value; back to back; tag 0 (or < 8 bytes left) ends
 *   0x3FFDC  32   SHA-256 of the whole block taken with these 32 bytes zero
 *   0x3FFFC   4   Magic2 0xa5b4c3d2
 *
 * This module parses one copy into a judgement (valid / zero / invalid / malformed) and marshals records
 * into a copy. Deciding what to do with two copies is meta.ts's job.
 */
import { createHash } from "node:crypto";
import { type Codec, ParseError, Reader, struct, u32, Writer, type Infer } from "@fleetd/verify/codec";

export const ADV_LENGTH = 256 * 1024;
/** Both copies. */
export const ADV_SIZE = 2 * ADV_LENGTH;
export const ADV_MAGIC1 = 0x5a4b3c2d;
export const ADV_MAGIC2 = 0xa5b4c3d2;
export const ADV_CHECKSUM_OFFSET = ADV_LENGTH - 36;
export const ADV_MAGIC2_OFFSET = ADV_LENGTH - 4;
/** Records live in [4, ADV_LENGTH - 36): 262104 bytes, go-adv's DataLength. */
export const ADV_DATA_START = 4;
export const ADV_DATA_LENGTH = ADV_CHECKSUM_OFFSET - ADV_DATA_START;
/** adv.End: tag 0 ends the record list. */
export const ADV_TAG_END = 0;

/** u32 length then that many bytes (the ADV's value encoding), bounded by `max`. */
function bytesU32(typeName: string, max: number): Codec<Uint8Array> {
  return {
    typeName,
    decode: (r) => {
      const at = r.offset;
      const n = r.field("size", () => r.u32());
      if (n > max) r.fail("oversized", `${typeName} size ${n} exceeds maximum ${max}`, at);
      return r.field("value", () => r.bytes(n));
    },
    encode: (w, v) => {
      if (v.length > max) w.fail(`${typeName} size ${v.length} exceeds maximum ${max}`);
      w.u32(v.length).bytes(v);
    },
  };
}

/** One record. Talos's Tag type is uint8 ("format has space for uint32"); the wire field is u32. */
export const TALOS_ADV_RECORD = struct("TALOS_ADV_RECORD", {
  tag: u32,
  value: bytesU32("TALOS_ADV_VALUE", ADV_DATA_LENGTH - 8),
});
export type AdvRecord = Infer<typeof TALOS_ADV_RECORD>;

export type AdvCopy =
  /** Magics and checksum right, records well-formed. Records keep their on-disk order. */
  | { state: "valid"; records: AdvRecord[] }
  /** All 256 KiB zero: never written (META is formatted as zeroes). */
  | { state: "zero" }
  /** A magic or the checksum is wrong: Talos would not use this copy. */
  | { state: "invalid"; reason: "magic1" | "magic2" | "checksum" | "length"; detail: string }
  /** The checksum is right but the records are not what Talos writes (overrun, tag > 255, duplicate tag). */
  | { state: "malformed"; reason: "record-overrun" | "tag-range" | "tag-duplicate"; detail: string };

export function sha256(...parts: Uint8Array[]): Uint8Array {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** Judge one 256 KiB copy. Never throws for any input bytes. */
export function parseAdvCopy(block: Uint8Array): AdvCopy {
  if (block.length !== ADV_LENGTH) {
    return { state: "invalid", reason: "length", detail: `copy is ${block.length} bytes, expected ${ADV_LENGTH}` };
  }
  if (block.every((b) => b === 0)) return { state: "zero" };
  const r = new Reader(block, "be", { path: ["TALOS_ADV"] });
  const magic1 = r.field("magic1", () => r.u32());
  if (magic1 !== ADV_MAGIC1) {
    return { state: "invalid", reason: "magic1", detail: `magic1 is 0x${magic1.toString(16).padStart(8, "0")}, expected 0x5a4b3c2d` };
  }
  const magic2 = new Reader(block, "be", { start: ADV_MAGIC2_OFFSET }).u32();
  if (magic2 !== ADV_MAGIC2) {
    return { state: "invalid", reason: "magic2", detail: `magic2 is 0x${magic2.toString(16).padStart(8, "0")}, expected 0xa5b4c3d2` };
  }
  const stored = block.slice(ADV_CHECKSUM_OFFSET, ADV_MAGIC2_OFFSET);
  const zeroed = block.slice();
  zeroed.fill(0, ADV_CHECKSUM_OFFSET, ADV_MAGIC2_OFFSET);
  const computed = sha256(zeroed);
  if (!computed.every((b, i) => b === stored[i])) {
    return { state: "invalid", reason: "checksum", detail: `checksum ${hex(stored)} does not match the computed ${hex(computed)}` };
  }
  // Records: as Talos's Unmarshal, over [4, L-36) while at least 8 bytes remain; tag 0 ends the list.
  const data = new Reader(block, "be", { start: ADV_DATA_START, end: ADV_CHECKSUM_OFFSET, path: ["TALOS_ADV", "records"] });
  const records: AdvRecord[] = [];
  const seen = new Set<number>();
  while (data.remaining >= 8) {
    const at = data.offset;
    let rec: AdvRecord;
    try {
      rec = data.field(String(records.length), () => TALOS_ADV_RECORD.decode(data));
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      const tag = new Reader(block, "be", { start: at }).u32();
      if (tag === ADV_TAG_END) break;
      return { state: "malformed", reason: "record-overrun", detail: `record at offset ${at} (tag ${tag}): ${e.message}` };
    }
    if (rec.tag === ADV_TAG_END) break;
    if (rec.tag > 0xff) {
      return { state: "malformed", reason: "tag-range", detail: `record at offset ${at} has tag ${rec.tag}; Talos tags are 1..255` };
    }
    if (seen.has(rec.tag)) {
      return { state: "malformed", reason: "tag-duplicate", detail: `tag 0x${rec.tag.toString(16).padStart(2, "0")} appears twice (again at offset ${at})` };
    }
    seen.add(rec.tag);
    records.push(rec);
  }
  return { state: "valid", records };
}

/** Bytes the records take in the data area. */
export function recordsLength(records: readonly AdvRecord[]): number {
  return records.reduce((n, r) => n + 8 + r.value.length, 0);
}

export class AdvOverflowError extends Error {
  override readonly name = "AdvOverflowError";
}

/**
 * One 256 KiB copy holding `records` in the given order — talos.md §1.2's writer recipe: zeros, magics,
 * records from offset 4, SHA-256 over the block with the checksum field zero, then the checksum.
 */
export function marshalAdvCopy(records: readonly AdvRecord[]): Uint8Array {
  const seen = new Set<number>();
  for (const r of records) {
    if (!Number.isInteger(r.tag) || r.tag < 1 || r.tag > 0xff) throw new AdvOverflowError(`tag ${r.tag} is not in 1..255`);
    if (seen.has(r.tag)) throw new AdvOverflowError(`tag 0x${r.tag.toString(16)} appears twice`);
    seen.add(r.tag);
  }
  const used = recordsLength(records);
  if (used > ADV_DATA_LENGTH) {
    throw new AdvOverflowError(`records need ${used} bytes; the ADV holds ${ADV_DATA_LENGTH}`);
  }
  const w = new Writer("be");
  w.u32(ADV_MAGIC1);
  for (const r of records) TALOS_ADV_RECORD.encode(w, r);
  const block = new Uint8Array(ADV_LENGTH);
  block.set(w.finish(), 0);
  new DataView(block.buffer).setUint32(ADV_MAGIC2_OFFSET, ADV_MAGIC2, false);
  block.set(sha256(block), ADV_CHECKSUM_OFFSET);
  return block;
}

/** Both copies, as Talos's Bytes(): marshal + marshal. */
export function marshalAdv(records: readonly AdvRecord[]): Uint8Array {
  const one = marshalAdvCopy(records);
  const both = new Uint8Array(ADV_SIZE);
  both.set(one, 0);
  both.set(one, ADV_LENGTH);
  return both;
}
