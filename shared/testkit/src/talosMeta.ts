/**
 * Test support: builds small disk images with a GPT from the same declarations the reader uses (so the
 * encoder is the codec's, not a second hand-written layout). Real-tool images (go-blockdevice, sgdisk)
 * are made by the cross-package tests; this one lets unit and property tests run without them.
 */
import { encode } from "@fleetd/verify/codec";
import { crc32 } from "@fleetd/verify/crypto";
import {
  GPT_HEADER,
  GPT_HEADER_CRC_OFFSET,
  GPT_PARTITION_ENTRY,
  guidFromString,
  LEGACY_MBR,
  MBR_SIGNATURE,
  OSTYPE_GPT_PROTECTIVE,
} from "@fleetd/platform/talos/meta";

export const LINUX_FILESYSTEM_DATA = "0fc63daf-8483-4772-8e79-3d69d8477de4";
export const EFI_SYSTEM = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b";

export interface TestPartition {
  name: string;
  firstLBA: number;
  sizeBytes: number;
  typeGUID?: string;
}

export interface TestImage {
  bytes: Uint8Array;
  sectorSize: number;
  lastLBA: number;
  /** Byte offsets of the primary and backup headers and entry arrays. */
  primaryHeader: number;
  backupHeader: number;
  primaryEntries: number;
  backupEntries: number;
}

function utf16Name(name: string): Uint8Array {
  const b = new Uint8Array(72);
  const enc = Buffer.from(name, "utf16le");
  if (enc.length > 72) throw new Error(`name ${name} is too long`);
  b.set(enc);
  return b;
}

function guidFor(seed: string): Uint8Array {
  const b = new Uint8Array(16);
  for (let i = 0; i < seed.length; i++) b[i % 16] = (b[i % 16]! * 31 + seed.charCodeAt(i)) & 0xff;
  return b;
}

/** A Talos-like layout: EFI 2 MiB, BIOS 1 MiB, BOOT 2 MiB, META 1 MiB, STATE 1 MiB, from LBA at 1 MiB. */
export function talosLayout(sectorSize: number): TestPartition[] {
  const mib = (1 << 20) / sectorSize;
  return [
    { name: "EFI", firstLBA: mib, sizeBytes: 2 << 20, typeGUID: EFI_SYSTEM },
    { name: "BIOS", firstLBA: 3 * mib, sizeBytes: 1 << 20 },
    { name: "BOOT", firstLBA: 4 * mib, sizeBytes: 2 << 20 },
    { name: "META", firstLBA: 6 * mib, sizeBytes: 1 << 20 },
    { name: "STATE", firstLBA: 7 * mib, sizeBytes: 1 << 20 },
  ];
}

export function buildGptImage(opts: {
  sectorSize?: number;
  sizeBytes?: number;
  partitions?: TestPartition[];
  entries?: number;
  protectiveMbr?: boolean;
}): TestImage {
  const ss = opts.sectorSize ?? 512;
  const size = opts.sizeBytes ?? 10 << 20;
  const parts = opts.partitions ?? talosLayout(ss);
  const entries = opts.entries ?? 128;
  const bytes = new Uint8Array(size);
  const lastLBA = size / ss - 1;
  const entryLBAs = Math.ceil((entries * 128) / ss);

  if (opts.protectiveMbr ?? true) {
    const mbr = encode(
      LEGACY_MBR,
      {
        bootCode: new Uint8Array(440),
        uniqueMbrDiskSignature: 0,
        unknown: 0,
        partitionRecord: [
          { bootIndicator: 0, startingCHS: Uint8Array.of(0, 2, 0), osType: OSTYPE_GPT_PROTECTIVE, endingCHS: Uint8Array.of(0xff, 0xff, 0xff), startingLBA: 1, sizeInLBA: Math.min(lastLBA, 0xffffffff) },
          ...[1, 2, 3].map(() => ({ bootIndicator: 0, startingCHS: new Uint8Array(3), osType: 0, endingCHS: new Uint8Array(3), startingLBA: 0, sizeInLBA: 0 })),
        ],
        signature: MBR_SIGNATURE,
      },
      "le",
    );
    bytes.set(mbr, 0);
  }

  const array = new Uint8Array(entries * 128);
  parts.forEach((p, i) => {
    const e = encode(
      GPT_PARTITION_ENTRY,
      {
        partitionTypeGUID: guidFromString(p.typeGUID ?? LINUX_FILESYSTEM_DATA),
        uniquePartitionGUID: guidFor(`part-${i}-${p.name}`),
        startingLBA: BigInt(p.firstLBA),
        endingLBA: BigInt(p.firstLBA + p.sizeBytes / ss - 1),
        attributes: 0n,
        partitionName: utf16Name(p.name),
      },
      "le",
    );
    array.set(e, i * 128);
  });
  const arrayCrc = crc32(array);

  const header = (myLBA: number, alternateLBA: number, entryLBA: number) => {
    const h = encode(
      GPT_HEADER,
      {
        signature: new TextEncoder().encode("EFI PART"),
        revision: 0x00010000,
        headerSize: 92,
        headerCRC32: 0,
        reserved: 0,
        myLBA: BigInt(myLBA),
        alternateLBA: BigInt(alternateLBA),
        firstUsableLBA: BigInt(2 + entryLBAs),
        lastUsableLBA: BigInt(lastLBA - 1 - entryLBAs),
        diskGUID: guidFor("disk"),
        partitionEntryLBA: BigInt(entryLBA),
        numberOfPartitionEntries: entries,
        sizeOfPartitionEntry: 128,
        partitionEntryArrayCRC32: arrayCrc,
      },
      "le",
    );
    new DataView(h.buffer).setUint32(GPT_HEADER_CRC_OFFSET, crc32(h), true);
    return h;
  };
  const backupEntryLBA = lastLBA - entryLBAs;
  bytes.set(header(1, lastLBA, 2), ss);
  bytes.set(array, 2 * ss);
  bytes.set(header(lastLBA, 1, backupEntryLBA), lastLBA * ss);
  bytes.set(array, backupEntryLBA * ss);
  return {
    bytes,
    sectorSize: ss,
    lastLBA,
    primaryHeader: ss,
    backupHeader: lastLBA * ss,
    primaryEntries: 2 * ss,
    backupEntries: backupEntryLBA * ss,
  };
}
