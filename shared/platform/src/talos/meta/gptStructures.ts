/**
 * GPT on-disk structures (UEFI Specification 2.10, §5.2.3 Protective MBR and §5.3 GUID Partition Table
 * Disk Layout), declared once with the codec. All GPT integers are little-endian: decode and encode these
 * with endian "le".
 */
import { type Codec, fixed, struct, u16, u32, u64, u8, type Infer } from "@fleetd/verify/codec";

/** A fixed count of items (no count prefix on the wire). */
export function array<T>(typeName: string, item: Codec<T>, n: number): Codec<T[]> {
  return {
    typeName,
    decode: (r) => {
      const out: T[] = [];
      for (let i = 0; i < n; i++) out.push(r.field(String(i), () => item.decode(r)));
      return out;
    },
    encode: (w, v) => {
      if (v.length !== n) w.fail(`${typeName}: need exactly ${n} items, got ${v.length}`);
      v.forEach((it, i) => w.field(String(i), () => item.encode(w, it)));
    },
  };
}

/** UEFI Table 5-2: Legacy MBR Partition Record (16 bytes). */
export const MBR_PARTITION_RECORD = struct("MBR_PARTITION_RECORD", {
  bootIndicator: u8,
  startingCHS: fixed(3),
  osType: u8,
  endingCHS: fixed(3),
  startingLBA: u32,
  sizeInLBA: u32,
});

/** UEFI Table 5-1 / 5-3: (Protective) Master Boot Record, the first 512 bytes of LBA 0. */
export const LEGACY_MBR = struct("LEGACY_MBR", {
  bootCode: fixed(440),
  uniqueMbrDiskSignature: u32,
  unknown: u16,
  partitionRecord: array("MBR_PARTITION_RECORD[4]", MBR_PARTITION_RECORD, 4),
  signature: u16, // 0xAA55 (bytes 55 AA)
});

export const MBR_SIGNATURE = 0xaa55;
/** OSType of the protective partition record (GPT Protective). */
export const OSTYPE_GPT_PROTECTIVE = 0xee;

/** UEFI Table 5-5: GPT Header (92 bytes; the rest of its block is reserved and zero). */
export const GPT_HEADER = struct("GPT_HEADER", {
  signature: fixed(8), // "EFI PART"
  revision: u32,
  headerSize: u32,
  headerCRC32: u32,
  reserved: u32,
  myLBA: u64,
  alternateLBA: u64,
  firstUsableLBA: u64,
  lastUsableLBA: u64,
  diskGUID: fixed(16),
  partitionEntryLBA: u64,
  numberOfPartitionEntries: u32,
  sizeOfPartitionEntry: u32,
  partitionEntryArrayCRC32: u32,
});
export type GptHeader = Infer<typeof GPT_HEADER>;

export const GPT_HEADER_MIN_SIZE = 92;
export const GPT_SIGNATURE = new TextEncoder().encode("EFI PART");
/** Byte offset of HeaderCRC32 inside the header. */
export const GPT_HEADER_CRC_OFFSET = 16;

/** UEFI Table 5-6: GPT Partition Entry (the first 128 bytes; SizeOfPartitionEntry may be larger). */
export const GPT_PARTITION_ENTRY = struct("GPT_PARTITION_ENTRY", {
  partitionTypeGUID: fixed(16),
  uniquePartitionGUID: fixed(16),
  startingLBA: u64,
  endingLBA: u64,
  attributes: u64,
  partitionName: fixed(72), // UTF-16LE, NUL-padded
});
export type GptPartitionEntry = Infer<typeof GPT_PARTITION_ENTRY>;

export const GPT_PARTITION_ENTRY_MIN_SIZE = 128;

/** A GUID as stored by UEFI (first three fields little-endian) in its text form, lowercase. */
export function guidToString(g: Uint8Array): string {
  const h = (i: number) => g[i]!.toString(16).padStart(2, "0");
  const seq = (idx: number[]) => idx.map(h).join("");
  return `${seq([3, 2, 1, 0])}-${seq([5, 4])}-${seq([7, 6])}-${seq([8, 9])}-${seq([10, 11, 12, 13, 14, 15])}`;
}

/** The text form of a GUID to its UEFI byte order. */
export function guidFromString(s: string): Uint8Array {
  const t = s.replace(/-/g, "");
  if (!/^[0-9a-fA-F]{32}$/.test(t)) throw new Error(`not a GUID: ${s}`);
  const b = Buffer.from(t, "hex");
  const order = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15];
  return new Uint8Array(order.map((i) => b[i]!));
}

/** A GPT partition name: UTF-16LE up to the first NUL code unit. */
export function partitionName(raw: Uint8Array): string {
  let end = 0;
  while (end + 1 < raw.length && (raw[end] !== 0 || raw[end + 1] !== 0)) end += 2;
  return new TextDecoder("utf-16le").decode(raw.subarray(0, end));
}
