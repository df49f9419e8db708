/**
 * The lab OS disk image (tests/scripts/lab-os/build.sh) and the lab's loop devices (harness/loopDisk.ts): the image
 * has the GPT + META layout the provision Workflow's actions expect (sgdisk and Talos's own reader agree), fleetd's
 * write-meta — the action's command as the Template runs it — writes META key 0x0b on a loop device over a copy of
 * it and Talos's reader reads the code back, and nothing but that loop device's backing file changed (a decoy
 * copy, the cached image and the bytes outside META keep their SHA-256). The loop helper refuses anything that is
 * not an attached loop device.
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test, type TestContext } from "node:test";
import { assertLoopDevice, attachLoop, labOsImage, loopBackingFile, loopUnavailable, NotALoopDevice, serveFile, sha256File, type LabOsImage } from "../harness/loopDisk.js";
import { advread, repoRoot, run, talosGoBinDir } from "./goTools.js";

const cli = join(repoRoot, "tink-action/dist/cli.js");
const MiB = 1 << 20;
let dir: string;
let img: LabOsImage;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-lab-os-"));
  img = await labOsImage();
  talosGoBinDir();
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Loop devices are required in CI; elsewhere a machine without them skips, saying why. */
function needLoop(t: TestContext): boolean {
  const why = loopUnavailable();
  if (!why) return true;
  if (process.env["CI"]) assert.fail(`no loop devices on this CI machine (${why}): the lab's disks are loop devices`);
  t.skip(`no loop devices here: ${why}`);
  return false;
}

/** SHA-256 of a file's bytes outside [from, to). */
function outside(path: string, from: number, to: number): string {
  const b = readFileSync(path);
  return createHash("sha256").update(b.subarray(0, from)).update(b.subarray(to)).digest("hex");
}

test("the lab OS image: a valid GPT (sgdisk) with EFI, BIOS, BOOT, META (1 MiB) and STATE; Talos's reader finds the same META, empty; the .gz holds the same bytes", async () => {
  assert.equal(await sha256File(img.raw), img.sha256.raw);
  assert.equal(await sha256File(img.gz), img.sha256.gz);
  const v = run("sgdisk", ["--verify", img.raw]);
  assert.equal(v.status, 0, v.stdout + v.stderr);
  assert.match(v.stdout, /No problems found/);
  assert.deepEqual(img.layout.partitions.map((p) => p.name), ["EFI", "BIOS", "BOOT", "META", "STATE"]);
  assert.equal(img.layout.sectorSize, 512);
  const meta = img.layout.partitions.find((p) => p.name === "META");
  assert.ok(meta);
  assert.equal((meta.lastSector - meta.firstSector + 1) * img.layout.sectorSize, MiB, "META is 1 MiB, as Talos makes it");
  assert.equal(img.layout.partitions[0]?.type, "C12A7328-F81F-11D2-BA4B-00A0C93EC93B", "partition 1 is an EFI system partition");

  const t = advread(img.raw);
  assert.equal(t.meta.offset, meta.firstSector * img.layout.sectorSize, "Talos's reader finds META where sgdisk does");
  assert.equal(t.meta.size, MiB);
  assert.deepEqual(t.tags, {}, "no META key is set in the image");
  const zero = readFileSync(img.raw).subarray(t.meta.offset, t.meta.offset + MiB);
  assert.ok(zero.every((b) => b === 0), "META is all zero, as Talos formats it");

  const gunzip = run("sh", ["-c", `gzip -dc '${img.gz}' | sha256sum`]);
  assert.equal(gunzip.stdout.split(" ")[0], img.sha256.raw, "the .gz decompresses to the raw image");
});

test("the lab's OS image server: image2disk's GET of lab-os.raw.gz on loopback returns exactly the built file; other paths 404", async () => {
  const srv = await serveFile(img.gz);
  try {
    assert.match(srv.url, /^http:\/\/127\.0\.0\.1:\d+\/lab-os\.raw\.gz$/);
    const r = await fetch(srv.url);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-length"), String(readFileSync(img.gz).length));
    assert.equal(createHash("sha256").update(Buffer.from(await r.arrayBuffer())).digest("hex"), img.sha256.gz);
    assert.equal((await fetch(new URL("/lab-os.raw", srv.url))).status, 404);
    assert.equal((await fetch(srv.url, { method: "POST" })).status, 405);
    assert.equal(srv.gets(), 1);
  } finally {
    await srv.close();
  }
});

test("write-meta (the action's command) on a loop device over a copy: Talos reads META 0x0b = the code from the device and from the image; a decoy copy, the cached image and every byte outside META are unchanged", async (t) => {
  if (!needLoop(t)) return;
  const disk = join(dir, "disk.img");
  const decoy = join(dir, "decoy.img");
  copyFileSync(img.raw, disk);
  copyFileSync(img.raw, decoy);
  const decoyBefore = await sha256File(decoy);
  const metaOffset = advread(disk).meta.offset;
  const outsideBefore = outside(disk, metaOffset, metaOffset + MiB);

  const lo = attachLoop(disk);
  try {
    assert.match(lo.device, /^\/dev\/loop\d+$/);
    assert.equal(assertLoopDevice(lo.device), lo.file);
    assert.notEqual(lo.file, decoy);
    const code = randomBytes(32).toString("hex");
    const codeFile = join(dir, "install-code");
    writeFileSync(codeFile, code + "\n");
    // As the Template's fleetd-write-meta runs it: write-meta --disk <DEST_DISK from Hardware> --code-file /worker/fleetd/install-code
    const r = run(process.execPath, [cli, "write-meta", "--disk", lo.device, "--code-file", codeFile]);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(!r.stdout.includes(code) && !r.stderr.includes(code), "the code is never printed");
    const report = JSON.parse(r.stdout) as { ok: boolean; disk: string; source: string; meta: { offset: number } };
    assert.equal(report.ok, true);
    assert.equal(report.source, "empty", "the image's META was empty");
    assert.equal(report.meta.offset, metaOffset);

    // advread sizes a file with stat (a block device's is 0): read the device's bytes into a file for it.
    const readBack = join(dir, "read-back.img");
    const dd = run("dd", [`if=${lo.device}`, `of=${readBack}`, "bs=1M", "status=none"]);
    assert.equal(dd.status, 0, dd.stderr);
    const onDevice = advread(readBack);
    assert.equal(onDevice.tags["0x0b"]?.text, code, "Talos's reader on the loop device's bytes");
    assert.deepEqual(onDevice.copies.map((c) => c.valid), [true, true]);
    lo.detach();
    assert.equal(loopBackingFile(lo.device), undefined, "detached");

    const onImage = advread(disk);
    assert.equal(onImage.tags["0x0b"]?.text, code, "Talos's reader on the backing image");
    assert.equal(outside(disk, metaOffset, metaOffset + MiB), outsideBefore, "only META changed in the backing image");
  } finally {
    lo.detach();
  }
  assert.equal(await sha256File(decoy), decoyBefore, "the decoy image is untouched");
  assert.equal(await sha256File(img.raw), img.sha256.raw, "the cached lab OS image is untouched");
});

test("the loop helper refuses anything but an attached loop device", async (t) => {
  const refuses = (p: string, why: RegExp) => assert.throws(() => assertLoopDevice(p), (e: unknown) => e instanceof NotALoopDevice && why.test(e.message), p);
  refuses("/dev/sda", /path is not \/dev\/loopN/);
  refuses("/dev/nvme0n1", /path is not \/dev\/loopN/);
  refuses("/dev/loop0p1", /path is not \/dev\/loopN/);
  refuses("/dev/loop0/../sda", /path is not \/dev\/loopN/);
  refuses(img.raw, /path is not \/dev\/loopN/);
  refuses("/dev/loop987654", /ENOENT/);
  assert.throws(() => loopBackingFile("/dev/null"), NotALoopDevice);
  if (!needLoop(t)) return;
  // A free (detached) loop device is a loop device with nothing behind it: refused too.
  const free = run("losetup", ["--find"]).stdout.trim();
  assert.match(free, /^\/dev\/loop\d+$/);
  refuses(free, /no backing file/);
  // And attachLoop takes only regular files.
  assert.throws(() => attachLoop("/dev/null"), /not a regular file/);
});
