/**
 * The lab's disks: loop block devices over image files, and the lab OS disk image the provision Workflow's
 * `install-talos` action writes (tests/scripts/lab-os/build.sh, run by .ci/setup).
 *
 * The real tink-agent creates every action container privileged, so an action sees every host device: the only disk
 * a lab Workflow may name is a loop device made here. Everything that detaches or hands out a device checks it is
 * one (`/dev/loopN`, a block device of major 7 with a backing file), and refuses anything else.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync, readFileSync, realpathSync, statSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { basename, join } from "node:path";
import { z } from "zod";
import { registerCleanup } from "./process.js";
import { runSetupScript } from "./setupScript.js";

/** The Linux loop driver's block major number (Documentation/admin-guide/devices.txt). */
const LOOP_MAJOR = 7;
const LOOP_PATH = /^\/dev\/loop(\d+)$/;

export class NotALoopDevice extends Error {
  constructor(readonly path: string, reason: string) {
    super(`${path} is not a loop device (${reason}); refusing to use it as a lab disk`);
    this.name = "NotALoopDevice";
  }
}

/** The file a loop device reads and writes, or undefined when it is not attached. */
export function loopBackingFile(device: string): string | undefined {
  const m = LOOP_PATH.exec(device);
  if (!m) throw new NotALoopDevice(device, "its path is not /dev/loopN");
  const f = `/sys/block/loop${m[1]}/loop/backing_file`;
  if (!existsSync(f)) return undefined;
  return readFileSync(f, "utf8").trim().replace(/ \(deleted\)$/, "");
}

/**
 * Refuse anything but an attached loop device: the path is /dev/loopN, it is a block device whose major is the loop
 * driver's, and the kernel names a backing file for it. Returns the backing file.
 */
export function assertLoopDevice(device: string): string {
  if (!LOOP_PATH.test(device)) throw new NotALoopDevice(device, "its path is not /dev/loopN");
  let st;
  try {
    st = statSync(device);
  } catch (e) {
    throw new NotALoopDevice(device, (e as Error).message);
  }
  if (!st.isBlockDevice()) throw new NotALoopDevice(device, "not a block device");
  const major = Math.floor(st.rdev / 256) & 0xfff; // Linux dev_t: major in bits 8-19
  if (major !== LOOP_MAJOR) throw new NotALoopDevice(device, `block major ${major}, the loop driver's is ${LOOP_MAJOR}`);
  const backing = loopBackingFile(device);
  if (!backing) throw new NotALoopDevice(device, "no backing file (not attached)");
  return backing;
}

export interface LoopDisk {
  /** /dev/loopN */
  readonly device: string;
  /** The image file behind it (real path). */
  readonly file: string;
  /** Logical sector size the device was attached with. */
  readonly sectorSize: 512 | 4096;
  /** `losetup --detach` (checked to still be a loop device over `file` first). Idempotent. */
  detach(): void;
}

function losetup(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync("losetup", args, { encoding: "utf8" });
  if (r.error) throw new Error(`cannot run losetup: ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Why loop devices cannot be used here (no /dev/loop-control, not root, ...), or undefined when they can. */
export function loopUnavailable(): string | undefined {
  if (!existsSync("/dev/loop-control")) return "no /dev/loop-control";
  const r = losetup(["--find"]);
  return r.status === 0 ? undefined : `losetup --find: ${r.stderr.trim()}`;
}

/**
 * Attach `file` to the first free loop device (`losetup --find --show`). The device is detached at teardown
 * (`detach()`) and, as a last resort, when this process exits.
 */
export function attachLoop(file: string, opts: { sectorSize?: 512 | 4096 } = {}): LoopDisk {
  const real = realpathSync(file);
  if (!statSync(real).isFile()) throw new Error(`attachLoop: ${file} is not a regular file`);
  const sectorSize = opts.sectorSize ?? 512;
  const r = losetup(["--find", "--show", "--sector-size", String(sectorSize), real]);
  if (r.status !== 0) throw new Error(`losetup --find --show ${real} failed (exit ${r.status}): ${r.stderr.trim()}`);
  const device = r.stdout.trim();
  let backing: string;
  try {
    backing = assertLoopDevice(device);
  } catch (e) {
    throw new Error(`losetup printed ${JSON.stringify(device)}: ${(e as Error).message}`);
  }
  if (backing !== real) throw new Error(`${device} is backed by ${backing}, not ${real}`);
  let attached = true;
  const detach = () => {
    if (!attached) return;
    attached = false;
    unregister();
    // Detach only what this helper attached, and only while it is still that loop device over that file.
    if (loopBackingFile(device) !== real) return;
    assertLoopDevice(device);
    const d = losetup(["--detach", device]);
    if (d.status !== 0) throw new Error(`losetup --detach ${device} failed: ${d.stderr.trim()}`);
  };
  const unregister = registerCleanup(() => {
    if (attached && loopBackingFile(device) === real) losetup(["--detach", device]);
  });
  return { device, file: real, sectorSize, detach };
}

export async function sha256File(path: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest("hex");
}

const Layout = z.strictObject({
  sectorSize: z.number().int(),
  size: z.number().int(),
  partitions: z.array(z.strictObject({ number: z.number().int(), name: z.string(), firstSector: z.number().int(), lastSector: z.number().int(), type: z.string() })),
});

export interface LabOsImage {
  dir: string;
  /** The raw image (a Talos-like GPT with META; the lab OS UKI on its ESP). Copy it before writing to it. */
  raw: string;
  /** gzip -9n of it, as image2disk fetches it (COMPRESSED=true). */
  gz: string;
  sha256: { raw: string; gz: string };
  /** The GPT as sgdisk read it at build time. */
  layout: z.infer<typeof Layout>;
}

let labOs: Promise<LabOsImage> | undefined;

/** The lab OS disk image .ci/setup built (tests/scripts/lab-os/build.sh; a cache hit then). */
export function labOsImage(): Promise<LabOsImage> {
  labOs ??= runSetupScript("tests/scripts/lab-os/build.sh", { progress: "[lab-os] ", needs: "bash .ci/setup" }).then((dir) => {
    const sums = new Map(readFileSync(join(dir, "SHA256SUMS"), "utf8").trim().split("\n").map((l) => {
      const [h, f] = l.split(/\s+/);
      return [f ?? "", h ?? ""] as const;
    }));
    const raw = sums.get("lab-os.raw");
    const gz = sums.get("lab-os.raw.gz");
    if (!raw || !gz) throw new Error(`${dir}/SHA256SUMS lacks lab-os.raw or lab-os.raw.gz (rebuild: bash tests/scripts/lab-os/build.sh)`);
    return {
      dir,
      raw: join(dir, "lab-os.raw"),
      gz: join(dir, "lab-os.raw.gz"),
      sha256: { raw, gz },
      layout: Layout.parse(JSON.parse(readFileSync(join(dir, "layout.json"), "utf8"))),
    };
  });
  return labOs;
}

export interface ServedFile {
  /** http://127.0.0.1:<port>/<file name> */
  readonly url: string;
  /** GET requests answered so far (image2disk makes one). */
  gets(): number;
  close(): Promise<void>;
}

/**
 * Serve one file over plain HTTP on loopback at /<its name> (GET and HEAD, with Content-Length), as the lab's OS
 * image server for image2disk (IMG_URL; the Template then runs install-talos on the host network). Anything else
 * is 404/405.
 */
export async function serveFile(path: string): Promise<ServedFile> {
  const name = basename(path);
  const size = statSync(path).size;
  let gets = 0;
  const server = createServer((req, res) => {
    if (req.url !== `/${name}`) {
      res.writeHead(404).end();
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return;
    }
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": String(size) });
    if (req.method === "HEAD") {
      res.end();
      return;
    }
    gets++;
    createReadStream(path).pipe(res);
  });
  await new Promise<void>((res, rej) => {
    server.once("error", rej);
    server.listen(0, "127.0.0.1", () => res());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/${name}`,
    gets: () => gets,
    close: () => new Promise<void>((res) => {
      server.closeAllConnections();
      server.close(() => res());
    }),
  };
}
