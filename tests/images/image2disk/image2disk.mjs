// fleetd-lab-image2disk: a lab equivalent of tinkerbell/actions image2disk (README.md beside this file).
// Contract (the upstream action's environment): IMG_URL  http(s) URL of a raw disk image
//                                              DEST_DISK the block device to write it to
//                                              COMPRESSED "true": decompress by IMG_URL's extension (.gz, .zst/.zs)
// Streams the image onto the device, fsyncs it and asks the kernel to read the partition table again
// (`blockdev --rereadpt`, best effort: a loop device without partition scanning refuses, which is harmless).
// Exit 0 on success; 1 on any failure (the message names the step). No dependencies: node:zlib only.
import { spawnSync } from "node:child_process";
import { closeSync, fstatSync, fsyncSync, openSync, statSync, writeSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, createZstdDecompress } from "node:zlib";

const die = (msg) => {
  process.stderr.write(`image2disk: ${msg}\n`);
  process.exit(1);
};

const url = process.env.IMG_URL ?? "";
const disk = process.env.DEST_DISK ?? "";
const compressed = /^(true|1|yes)$/i.test(process.env.COMPRESSED ?? "");
if (!/^https?:\/\//.test(url)) die(`IMG_URL must be an http(s) URL (got ${JSON.stringify(url)})`);
if (!disk.startsWith("/dev/")) die(`DEST_DISK must be a /dev path (got ${JSON.stringify(disk)})`);
let st;
try {
  st = statSync(disk);
} catch (e) {
  die(`DEST_DISK ${disk}: ${e.code ?? e.message}`);
}
if (!st.isBlockDevice()) die(`DEST_DISK ${disk} is not a block device`);

let decompress;
if (compressed) {
  const path = new URL(url).pathname;
  if (/\.gz$/.test(path)) decompress = createGunzip();
  else if (/\.zs(t)?$/.test(path)) decompress = createZstdDecompress();
  else die(`COMPRESSED=true: cannot tell the compression of ${path} (this lab equivalent reads .gz and .zst; upstream also .xz and .bz2)`);
}

const t0 = Date.now();
process.stdout.write(`image2disk: ${url} -> ${disk}${decompress ? " (decompressing)" : ""}\n`);
const res = await fetch(url).catch((e) => die(`GET ${url}: ${e.cause?.code ?? e.message}`));
if (!res.ok || !res.body) die(`GET ${url}: HTTP ${res.status}`);

const fd = openSync(disk, "w"); // O_WRONLY|O_CREAT|O_TRUNC: on a block device only O_WRONLY matters
if (!fstatSync(fd).isBlockDevice()) die(`${disk} is not a block device once opened`);
let written = 0;
const sink = new Writable({
  write(chunk, _enc, cb) {
    try {
      let off = 0;
      while (off < chunk.length) off += writeSync(fd, chunk, off, chunk.length - off, written + off);
      written += chunk.length;
      cb();
    } catch (e) {
      cb(e);
    }
  },
});
try {
  const src = Readable.fromWeb(res.body);
  await (decompress ? pipeline(src, decompress, sink) : pipeline(src, sink));
  fsyncSync(fd);
} catch (e) {
  die(`writing ${disk}: ${e.code ?? e.message} after ${written} bytes`);
} finally {
  closeSync(fd);
}
const reread = spawnSync("blockdev", ["--rereadpt", disk], { encoding: "utf8" });
if (reread.status !== 0) process.stdout.write(`image2disk: blockdev --rereadpt ${disk}: ${(reread.stderr || "").trim()} (ignored)\n`);
process.stdout.write(`image2disk: wrote ${written} bytes to ${disk} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
