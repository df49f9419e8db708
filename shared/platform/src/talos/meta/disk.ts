/**
 * A disk to read and write by byte offset: an image file, a block device, or bytes in memory (tests).
 * No udev and no ioctl (Node has none): a block device's size and logical sector size come from sysfs
 * (/sys/dev/block/MAJ:MIN/{size,queue/logical_block_size}); a regular file's size from fstat.
 */
import { closeSync, fstatSync, fsyncSync, openSync, readFileSync, readSync, writeSync, existsSync } from "node:fs";
import { MetaError } from "./errors.js";

export interface Disk {
  /** A name for messages (the path). */
  readonly name: string;
  /** Size in bytes. */
  readonly size: number;
  /** Logical sector size reported by the kernel; undefined for image files (probed from the GPT). */
  readonly sectorSize: number | undefined;
  /** Exactly `length` bytes at `offset`; reading past the end is a `disk-io` error. */
  read(offset: number, length: number): Uint8Array;
  write(offset: number, data: Uint8Array): void;
  /** Flush written data to stable storage. */
  sync(): void;
  close(): void;
}

function ioError(name: string, what: string, e: unknown): MetaError {
  const code = (e as NodeJS.ErrnoException).code;
  return new MetaError("disk-io", `${name}: ${what}: ${code ?? (e as Error).message}`);
}

function checkRange(disk: { name: string; size: number }, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 || offset + length > disk.size) {
    throw new MetaError("disk-io", `${disk.name}: range [${offset}, ${offset + length}) is outside the disk (${disk.size} bytes)`);
  }
}

/** An in-memory disk over `bytes` (written in place). */
export function memoryDisk(bytes: Uint8Array, name = "<memory>", sectorSize?: number): Disk {
  return {
    name,
    size: bytes.length,
    sectorSize,
    read(offset, length) {
      checkRange(this, offset, length);
      return bytes.slice(offset, offset + length);
    },
    write(offset, data) {
      checkRange(this, offset, data.length);
      bytes.set(data, offset);
    },
    sync() {},
    close() {},
  };
}

/** Linux dev_t (glibc encoding) to "major:minor". */
function devNumbers(rdev: bigint): string {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn);
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn);
  return `${major}:${minor}`;
}

function readSysfsNumber(path: string): number | undefined {
  if (!existsSync(path)) return undefined;
  const n = Number(readFileSync(path, "utf8").trim());
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/** Open an image file or a whole-disk block device. `writable` opens it read-write. */
export function openDisk(path: string, opts: { writable: boolean }): Disk {
  let fd: number;
  try {
    fd = openSync(path, opts.writable ? "r+" : "r");
  } catch (e) {
    throw ioError(path, "cannot open", e);
  }
  try {
    const st = fstatSync(fd, { bigint: true });
    let size: number;
    let sectorSize: number | undefined;
    if (st.isBlockDevice()) {
      const sys = `/sys/dev/block/${devNumbers(st.rdev)}`;
      if (existsSync(`${sys}/partition`)) {
        throw new MetaError("disk-is-partition", `${path} is a partition; pass the whole disk`);
      }
      const sectors = readSysfsNumber(`${sys}/size`); // always in 512-byte units
      if (sectors === undefined) throw new MetaError("disk-io", `${path}: cannot read its size from ${sys}/size`);
      size = sectors * 512;
      sectorSize = readSysfsNumber(`${sys}/queue/logical_block_size`);
    } else if (st.isFile()) {
      size = Number(st.size);
    } else {
      throw new MetaError("disk-io", `${path} is neither a block device nor a regular file`);
    }
    const name = path;
    return {
      name,
      size,
      sectorSize,
      read(offset, length) {
        checkRange(this, offset, length);
        const buf = new Uint8Array(length);
        let done = 0;
        while (done < length) {
          let n: number;
          try {
            n = readSync(fd, buf, done, length - done, offset + done);
          } catch (e) {
            throw ioError(name, `read at ${offset + done}`, e);
          }
          if (n === 0) throw new MetaError("disk-io", `${name}: unexpected end of data at ${offset + done}`);
          done += n;
        }
        return buf;
      },
      write(offset, data) {
        checkRange(this, offset, data.length);
        let done = 0;
        while (done < data.length) {
          try {
            done += writeSync(fd, data, done, data.length - done, offset + done);
          } catch (e) {
            throw ioError(name, `write at ${offset + done}`, e);
          }
        }
      },
      sync() {
        try {
          fsyncSync(fd);
        } catch (e) {
          throw ioError(name, "fsync", e);
        }
      },
      close() {
        closeSync(fd);
      },
    };
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}
