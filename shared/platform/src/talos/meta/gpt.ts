/**
 * Reads a GPT from raw disk bytes (no udev, no kernel partition table): protective MBR, the primary header
 * at LBA 1 with CRC32 checks of the header and of the partition entry array, falling back to the backup
 * header at the last LBA (UEFI 2.10 §5.3.2 "GPT Header validity"). Logical sector sizes 512 and 4096 are
 * probed when the disk does not report one.
 */
import { decodePrefix, ParseError, Reader } from "@fleetd/verify/codec";
import { crc32 } from "@fleetd/verify/crypto";
import type { Disk } from "./disk.js";
import { MetaError } from "./errors.js";
import {
  GPT_HEADER,
  GPT_HEADER_CRC_OFFSET,
  GPT_HEADER_MIN_SIZE,
  GPT_PARTITION_ENTRY,
  GPT_PARTITION_ENTRY_MIN_SIZE,
  GPT_SIGNATURE,
  type GptHeader,
  guidToString,
  LEGACY_MBR,
  MBR_SIGNATURE,
  OSTYPE_GPT_PROTECTIVE,
  partitionName,
} from "./gptStructures.js";

/** Sector sizes tried, in order, when the disk does not report its logical sector size. */
export const PROBED_SECTOR_SIZES = [512, 4096] as const;
/** The partition entry array is at most this many bytes (the usual one is 16 KiB). */
export const MAX_ENTRY_ARRAY_BYTES = 1 << 20;

export interface GptPartition {
  /** 1-based partition number (index in the entry array + 1). */
  number: number;
  name: string;
  typeGUID: string;
  uniqueGUID: string;
  startingLBA: number;
  endingLBA: number;
  attributes: bigint;
}

export interface GptTable {
  sectorSize: number;
  /** Which header was used. */
  source: "primary" | "backup";
  /** Why the primary header was not used (only when source is "backup"). */
  primaryRefused?: { code: string; detail: string };
  lastLBA: number;
  header: GptHeader;
  diskGUID: string;
  /** Non-empty entries (PartitionTypeGUID not all zero). */
  partitions: GptPartition[];
}

/** Why one header was refused; becomes a cause of a `gpt-invalid` error. */
class HeaderRefused extends Error {
  constructor(
    readonly code: string,
    readonly detail: string,
  ) {
    super(detail);
  }
}

function hex32(n: number): string {
  return "0x" + n.toString(16).padStart(8, "0");
}

function safe(v: bigint, what: string): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new HeaderRefused("header-field-range", `${what} ${v} is out of range`);
  return Number(v);
}

function hasSignatureAt(disk: Disk, offset: number): boolean {
  if (offset < 0 || offset + 8 > disk.size) return false;
  const b = disk.read(offset, 8);
  return b.every((x, i) => x === GPT_SIGNATURE[i]);
}

function checkProtectiveMbr(disk: Disk): void {
  const mbr = decodePrefix(LEGACY_MBR, disk.read(0, 512), "le").value;
  if (mbr.signature !== MBR_SIGNATURE) {
    throw new MetaError("gpt-no-protective-mbr", `${disk.name}: LBA 0 has no MBR signature 55 aa (found ${hex32(mbr.signature).slice(6)})`);
  }
  if (!mbr.partitionRecord.some((p) => p.osType === OSTYPE_GPT_PROTECTIVE)) {
    const types = mbr.partitionRecord.map((p) => "0x" + p.osType.toString(16).padStart(2, "0")).join(", ");
    throw new MetaError("gpt-no-protective-mbr", `${disk.name}: the MBR has no GPT protective partition (OSType 0xee; found ${types})`);
  }
}

function readHeader(disk: Disk, ss: number, lba: number, lastLBA: number): { header: GptHeader; partitions: GptPartition[] } {
  const block = disk.read(lba * ss, ss);
  const header = decodePrefix(GPT_HEADER, block, "le").value;
  if (!header.signature.every((x, i) => x === GPT_SIGNATURE[i])) {
    throw new HeaderRefused("header-signature", `no "EFI PART" signature`);
  }
  if (header.headerSize < GPT_HEADER_MIN_SIZE || header.headerSize > ss) {
    throw new HeaderRefused("header-size", `HeaderSize ${header.headerSize} is outside [${GPT_HEADER_MIN_SIZE}, ${ss}]`);
  }
  const covered = block.slice(0, header.headerSize);
  covered.fill(0, GPT_HEADER_CRC_OFFSET, GPT_HEADER_CRC_OFFSET + 4);
  const crc = crc32(covered);
  if (crc !== header.headerCRC32) {
    throw new HeaderRefused("header-crc", `HeaderCRC32 ${hex32(header.headerCRC32)} does not match the computed ${hex32(crc)}`);
  }
  const myLBA = safe(header.myLBA, "MyLBA");
  if (myLBA !== lba) throw new HeaderRefused("header-my-lba", `MyLBA ${myLBA} is not the LBA it was read from (${lba})`);
  const first = safe(header.firstUsableLBA, "FirstUsableLBA");
  const last = safe(header.lastUsableLBA, "LastUsableLBA");
  if (first > last || last >= lastLBA || first <= 1) {
    throw new HeaderRefused("header-usable-range", `usable LBAs [${first}, ${last}] do not fit between LBA 1 and the last LBA ${lastLBA}`);
  }
  const entrySize = header.sizeOfPartitionEntry;
  if (entrySize < GPT_PARTITION_ENTRY_MIN_SIZE || (entrySize & (entrySize - 1)) !== 0) {
    throw new HeaderRefused("entry-size", `SizeOfPartitionEntry ${entrySize} is not 128 × 2^n`);
  }
  const arrayBytes = header.numberOfPartitionEntries * entrySize;
  if (arrayBytes > MAX_ENTRY_ARRAY_BYTES) {
    throw new HeaderRefused("entry-array-limit", `partition entry array of ${header.numberOfPartitionEntries} × ${entrySize} bytes exceeds ${MAX_ENTRY_ARRAY_BYTES}`);
  }
  const arrayLBA = safe(header.partitionEntryLBA, "PartitionEntryLBA");
  const arrayEnd = arrayLBA + Math.ceil(arrayBytes / ss); // exclusive
  const overlapsHeader = arrayLBA <= lba && lba < arrayEnd;
  const overlapsUsable = arrayLBA <= last && first < arrayEnd;
  if (arrayLBA < 2 || arrayEnd > lastLBA + 1 || overlapsHeader || (arrayBytes > 0 && overlapsUsable)) {
    throw new HeaderRefused("entry-array-range", `partition entry array at LBA ${arrayLBA} (${arrayBytes} bytes) overlaps the header, the usable range or the disk's end`);
  }
  const array = disk.read(arrayLBA * ss, arrayBytes);
  const arrayCrc = crc32(array);
  if (arrayCrc !== header.partitionEntryArrayCRC32) {
    throw new HeaderRefused("entry-array-crc", `PartitionEntryArrayCRC32 ${hex32(header.partitionEntryArrayCRC32)} does not match the computed ${hex32(arrayCrc)}`);
  }
  const partitions: GptPartition[] = [];
  for (let i = 0; i < header.numberOfPartitionEntries; i++) {
    const r = new Reader(array, "le", { start: i * entrySize, end: (i + 1) * entrySize, path: [`GPT_PARTITION_ENTRY[${i}]`] });
    const e = GPT_PARTITION_ENTRY.decode(r);
    if (e.partitionTypeGUID.every((x) => x === 0)) continue;
    partitions.push({
      number: i + 1,
      name: partitionName(e.partitionName),
      typeGUID: guidToString(e.partitionTypeGUID),
      uniqueGUID: guidToString(e.uniquePartitionGUID),
      startingLBA: safe(e.startingLBA, `entry ${i + 1} StartingLBA`),
      endingLBA: safe(e.endingLBA, `entry ${i + 1} EndingLBA`),
      attributes: e.attributes,
    });
  }
  return { header, partitions };
}

/** Find the sector size at which a GPT signature sits at LBA 1 or at the last LBA. */
function probeSectorSize(disk: Disk, candidates: readonly number[]): number {
  for (const ss of candidates) {
    if (disk.size < ss * 4) continue;
    const lastLBA = Math.floor(disk.size / ss) - 1;
    if (hasSignatureAt(disk, ss) || hasSignatureAt(disk, lastLBA * ss)) return ss;
  }
  throw new MetaError(
    "gpt-not-found",
    `${disk.name}: no GPT header ("EFI PART") at LBA 1 or at the last LBA for sector size ${candidates.join(" or ")}`,
  );
}

export function readGpt(disk: Disk, opts: { sectorSize?: number } = {}): GptTable {
  const candidates = opts.sectorSize ? [opts.sectorSize] : disk.sectorSize ? [disk.sectorSize] : [...PROBED_SECTOR_SIZES];
  for (const ss of candidates) {
    if (!Number.isInteger(ss) || ss < 512 || ss > 65536 || (ss & (ss - 1)) !== 0) {
      throw new MetaError("gpt-invalid", `sector size ${ss} is not a power of two between 512 and 65536`);
    }
  }
  if (disk.size < 512 * 4) throw new MetaError("disk-too-small", `${disk.name}: ${disk.size} bytes is too small for a GPT`);
  const ss = probeSectorSize(disk, candidates);
  checkProtectiveMbr(disk);
  const lastLBA = Math.floor(disk.size / ss) - 1;
  type Attempt = { ok: { header: GptHeader; partitions: GptPartition[] } } | { refused: { code: string; detail: string } };
  const attempt = (lba: number): Attempt => {
    try {
      return { ok: readHeader(disk, ss, lba, lastLBA) };
    } catch (e) {
      if (e instanceof HeaderRefused) return { refused: { code: e.code, detail: e.detail } };
      if (e instanceof ParseError) return { refused: { code: "header-parse", detail: e.message } };
      throw e;
    }
  };
  const primary = attempt(1);
  const done = (r: { header: GptHeader; partitions: GptPartition[] }, source: "primary" | "backup"): GptTable => ({
    sectorSize: ss,
    source,
    lastLBA,
    header: r.header,
    diskGUID: guidToString(r.header.diskGUID),
    partitions: r.partitions,
  });
  if ("ok" in primary) return done(primary.ok, "primary");
  const backup = attempt(lastLBA);
  if ("ok" in backup) return { ...done(backup.ok, "backup"), primaryRefused: primary.refused };
  throw new MetaError("gpt-invalid", `${disk.name}: no valid GPT header (sector size ${ss})`, [
    { where: `primary header at LBA 1`, ...primary.refused },
    { where: `backup header at LBA ${lastLBA}`, ...backup.refused },
  ]);
}
