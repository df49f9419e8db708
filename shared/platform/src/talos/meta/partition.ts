/**
 * Locates Talos's META partition in a GPT: the partition named `META` (constants.MetaPartitionLabel),
 * exactly 1 MiB (quirks.METASize; Talos's volume locator requires `volume.size == 1048576u`).
 */
import type { GptTable } from "./gpt.js";
import { MetaError } from "./errors.js";

export const META_PARTITION_LABEL = "META";
export const META_PARTITION_SIZE = 1 << 20;

export interface MetaPartition {
  /** 1-based partition number. */
  number: number;
  typeGUID: string;
  uniqueGUID: string;
  sectorSize: number;
  startingLBA: number;
  endingLBA: number;
  /** Byte offset of the partition on the disk. */
  offset: number;
  /** Byte size (always META_PARTITION_SIZE). */
  size: number;
}

export function findMetaPartition(table: GptTable, diskName = "disk"): MetaPartition {
  const matches = table.partitions.filter((p) => p.name === META_PARTITION_LABEL);
  if (matches.length === 0) {
    const names = table.partitions.map((p) => JSON.stringify(p.name)).join(", ") || "none";
    throw new MetaError("meta-not-found", `${diskName}: no GPT partition named ${META_PARTITION_LABEL} (partitions: ${names})`);
  }
  if (matches.length > 1) {
    throw new MetaError("meta-ambiguous", `${diskName}: ${matches.length} partitions are named ${META_PARTITION_LABEL} (numbers ${matches.map((p) => p.number).join(", ")})`);
  }
  const p = matches[0]!;
  const first = Number(table.header.firstUsableLBA);
  const last = Number(table.header.lastUsableLBA);
  if (p.startingLBA > p.endingLBA || p.startingLBA < first || p.endingLBA > last) {
    throw new MetaError(
      "meta-out-of-range",
      `${diskName}: partition ${p.number} (${META_PARTITION_LABEL}) spans LBAs [${p.startingLBA}, ${p.endingLBA}], outside the usable LBAs [${first}, ${last}]`,
    );
  }
  const ss = table.sectorSize;
  const size = (p.endingLBA - p.startingLBA + 1) * ss;
  if (size !== META_PARTITION_SIZE) {
    throw new MetaError("meta-size", `${diskName}: partition ${p.number} (${META_PARTITION_LABEL}) is ${size} bytes; Talos uses only a META of exactly ${META_PARTITION_SIZE}`);
  }
  return {
    number: p.number,
    typeGUID: p.typeGUID,
    uniqueGUID: p.uniqueGUID,
    sectorSize: ss,
    startingLBA: p.startingLBA,
    endingLBA: p.endingLBA,
    offset: p.startingLBA * ss,
    size,
  };
}
