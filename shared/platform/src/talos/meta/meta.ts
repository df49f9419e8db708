/**
 * Reading and updating the Talos ADV in a META partition (both 256 KiB copies at partition offsets 0 and
 * 262144). Talos reads copy 1 and falls back to copy 2 (talos.NewADV); it writes both copies at once
 * (Bytes() = marshal + marshal). The legacy syslinux ADV in the partition's last 1 KiB is left alone.
 *
 * Which ADV the writer starts from (`chooseAdv`), decided once here:
 *   - copy 1 valid                         → copy 1 (what Talos reads), whatever copy 2 holds;
 *   - copy 1 invalid or zero, copy 2 valid → copy 2 (what Talos reads); copy 1 is rewritten;
 *   - both copies all zero                 → empty: META as Talos formats it (FilesystemTypeZeroes),
 *                                            which Talos itself reads as "no keys";
 *   - a checksummed copy with malformed records, where Talos would read it (copy 1, or copy 2 after an
 *     unusable copy 1) → refused (`adv-malformed`): Talos never writes such a copy, and its reader would
 *     merge a half-parsed copy 1 into copy 2;
 *   - anything else (no valid copy, not all zero: torn, foreign or damaged) → refused (`adv-corrupt`);
 *   - with `init`, and only when no copy is valid, the two refused cases start from an empty ADV instead:
 *     the operator has decided the old keys are lost.
 * Existing keys are kept in their on-disk order; the key being set is replaced in place or appended.
 */
import type { Disk } from "./disk.js";
import { MetaError } from "./errors.js";
import {
  ADV_LENGTH,
  ADV_SIZE,
  type AdvCopy,
  AdvOverflowError,
  type AdvRecord,
  marshalAdvCopy,
  parseAdvCopy,
  recordsLength,
  ADV_DATA_LENGTH,
} from "./adv.js";
import type { MetaPartition } from "./partition.js";

/** META keys (talos:pkg/machinery/meta/constants.go, iota + 6). */
export const META_KEYS = {
  upgrade: 0x06,
  stagedUpgradeImageRef: 0x07,
  stagedUpgradeInstallOptions: 0x08,
  stateEncryptionConfig: 0x09,
  metalNetworkPlatformConfig: 0x0a,
  downloadURLCode: 0x0b,
  userReserved1: 0x0c,
  userReserved2: 0x0d,
  userReserved3: 0x0e,
  uuidOverride: 0x0f,
  uniqueMachineToken: 0x10,
  diskImageBootloader: 0x11,
} as const;

/** Talos's id for a key, as `talosctl get metakeys` shows it: 0x0b. */
export function metaKeyId(tag: number): string {
  return "0x" + tag.toString(16).padStart(2, "0");
}

export type AdvSource = "copy1" | "copy2" | "empty" | "init";

export interface ChosenAdv {
  source: AdvSource;
  records: AdvRecord[];
  copies: [AdvCopy, AdvCopy];
}

function describe(c: AdvCopy): string {
  return c.state === "valid" ? `valid, ${c.records.length} keys` : c.state === "zero" ? "all zero" : `${c.state}: ${c.detail}`;
}

export function chooseAdv(copy1: AdvCopy, copy2: AdvCopy, opts: { init?: boolean } = {}): ChosenAdv {
  const copies: [AdvCopy, AdvCopy] = [copy1, copy2];
  if (copy1.state === "valid") return { source: "copy1", records: copy1.records, copies };
  const causes = [
    { where: "copy 1 (partition offset 0)", code: copy1.state === "invalid" || copy1.state === "malformed" ? copy1.reason : copy1.state, detail: describe(copy1) },
    { where: `copy 2 (partition offset ${ADV_LENGTH})`, code: copy2.state === "invalid" || copy2.state === "malformed" ? copy2.reason : copy2.state, detail: describe(copy2) },
  ];
  if (copy1.state === "malformed") {
    if (opts.init && copy2.state !== "valid") return { source: "init", records: [], copies };
    throw new MetaError("adv-malformed", "copy 1 of the Talos ADV has a valid checksum but records Talos would not write; refusing to touch it", causes);
  }
  if (copy2.state === "valid") return { source: "copy2", records: copy2.records, copies };
  if (copy1.state === "zero" && copy2.state === "zero") return { source: "empty", records: [], copies };
  if (opts.init) return { source: "init", records: [], copies };
  if (copy2.state === "malformed") {
    throw new MetaError("adv-malformed", "copy 2 of the Talos ADV has a valid checksum but records Talos would not write; refusing to touch it", causes);
  }
  throw new MetaError("adv-corrupt", "neither copy of the Talos ADV is valid and META is not empty; refusing to overwrite it (--init starts a new ADV)", causes);
}

/** `records` with `tag` set to `value`: replaced in place if present, appended otherwise. */
export function setRecord(records: readonly AdvRecord[], tag: number, value: Uint8Array): AdvRecord[] {
  if (!Number.isInteger(tag) || tag < 1 || tag > 0xff) throw new RangeError(`META key ${tag} is not in 1..255`);
  let replaced = false;
  const out = records.map((r) => {
    if (r.tag !== tag) return r;
    replaced = true;
    return { tag, value };
  });
  if (!replaced) out.push({ tag, value });
  return out;
}

export function readAdvCopies(disk: Disk, meta: MetaPartition): [AdvCopy, AdvCopy] {
  const region = disk.read(meta.offset, ADV_SIZE);
  return [parseAdvCopy(region.subarray(0, ADV_LENGTH)), parseAdvCopy(region.subarray(ADV_LENGTH, ADV_SIZE))];
}

export interface SetMetaKeyResult {
  source: AdvSource;
  /** Keys after the write, in on-disk order, with value lengths (values are not reported: 0x0b is a secret). */
  keys: { key: string; tag: number; length: number }[];
  /** Whether `tag` was already set (and so replaced). */
  replaced: boolean;
  /** The copies as they were before the write. */
  before: [AdvCopy["state"], AdvCopy["state"]];
}

/**
 * Read-modify-write one META key. Copy 1 is written and synced before copy 2, so at every moment one
 * copy is whole; both are read back and checked before returning. Nothing is written unless every check
 * passed.
 */
export function setMetaKey(disk: Disk, meta: MetaPartition, tag: number, value: Uint8Array, opts: { init?: boolean } = {}): SetMetaKeyResult {
  const copies = readAdvCopies(disk, meta);
  const chosen = chooseAdv(copies[0], copies[1], opts);
  const replaced = chosen.records.some((r) => r.tag === tag);
  const records = setRecord(chosen.records, tag, value);
  let block: Uint8Array;
  try {
    block = marshalAdvCopy(records);
  } catch (e) {
    if (e instanceof AdvOverflowError) {
      throw new MetaError("adv-overflow", `${e.message} (existing keys use ${recordsLength(chosen.records)} of ${ADV_DATA_LENGTH} bytes)`);
    }
    throw e;
  }
  disk.write(meta.offset, block);
  disk.sync();
  disk.write(meta.offset + ADV_LENGTH, block);
  disk.sync();
  const after = readAdvCopies(disk, meta);
  for (const [i, c] of after.entries()) {
    const same = c.state === "valid" && c.records.length === records.length && c.records.every((r, j) => r.tag === records[j]!.tag && Buffer.compare(r.value, records[j]!.value) === 0);
    if (!same) throw new MetaError("adv-verify", `copy ${i + 1} read back after writing is not what was written (${describe(c)})`);
  }
  return {
    source: chosen.source,
    keys: records.map((r) => ({ key: metaKeyId(r.tag), tag: r.tag, length: r.value.length })),
    replaced,
    before: [copies[0].state, copies[1].state],
  };
}
