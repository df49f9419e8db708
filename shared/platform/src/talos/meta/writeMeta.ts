/**
 * The `write-meta` step of the provision workflow: put the install code into META key 0x0b
 * (DownloadURLCode, the `${code}` of `talos.config=`) on a disk Talos was just written to, keeping every
 * other key (e.g. 0x11 DiskImageBootloader that the imager sets).
 */
import { z } from "zod";
import { openDisk } from "./disk.js";
import { MetaError } from "./errors.js";
import { readGpt } from "./gpt.js";
import { META_KEYS, setMetaKey, type SetMetaKeyResult } from "./meta.js";
import { findMetaPartition, type MetaPartition } from "./partition.js";

/** fleetd install codes: lowercase hex of 32 random bytes (attestation protocol, confirm step). */
export const INSTALL_CODE_PATTERN = /^[0-9a-f]{64}$/;

export const InstallCode = z.string().regex(INSTALL_CODE_PATTERN);

/** An install code from a file or an argument (one trailing newline allowed). The code is never echoed. */
export function parseInstallCode(text: string, from: string): string {
  const code = text.replace(/\r?\n$/, "");
  const parsed = InstallCode.safeParse(code);
  if (!parsed.success) {
    throw new MetaError("code-invalid", `${from}: an install code is 64 lowercase hex characters (got ${code.length} characters${/^[0-9a-f]*$/.test(code) ? "" : ", not all lowercase hex"})`);
  }
  return parsed.data;
}

export interface WriteMetaReport extends SetMetaKeyResult {
  disk: string;
  gpt: { sectorSize: number; header: "primary" | "backup"; primaryRefused?: string };
  meta: MetaPartition;
}

export function writeInstallCode(diskPath: string, code: string, opts: { init?: boolean; sectorSize?: number } = {}): WriteMetaReport {
  const valid = parseInstallCode(code, "install code");
  const disk = openDisk(diskPath, { writable: true });
  try {
    const table = readGpt(disk, opts.sectorSize ? { sectorSize: opts.sectorSize } : {});
    const meta = findMetaPartition(table, disk.name);
    const res = setMetaKey(disk, meta, META_KEYS.downloadURLCode, new TextEncoder().encode(valid), { init: opts.init ?? false });
    return {
      disk: disk.name,
      gpt: {
        sectorSize: table.sectorSize,
        header: table.source,
        ...(table.primaryRefused ? { primaryRefused: `${table.primaryRefused.code}: ${table.primaryRefused.detail}` } : {}),
      },
      meta,
      ...res,
    };
  } finally {
    disk.close();
  }
}
