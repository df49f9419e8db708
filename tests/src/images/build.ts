/**
 * `pnpm -s images`: one OCI image per deployable part (tink-action, talos-config-server, netbox-script,
 * spire-plugin), built with podman from a Debian base this script makes (mmdebstrap; no registry is pulled), the
 * pinned Node.js 24 binary and the part's esbuild bundle. Each part's `Containerfile` (in its folder) is what
 * podman builds; this script stages its context, then:
 *
 *   node tests/dist/images/build.js                  build what changed; print tag, digest and size per image;
 *                                                    write $FLEETD_CACHE/images/images.json (tests/src/images/built.ts)
 *   node tests/dist/images/build.js --refresh-bases  make the Debian bases again (Debian's security updates: the
 *                                                    cache keys a base by its package list, not by package versions)
 *   node tests/dist/images/build.js --lab-only       only the lab's stand-ins for the Templates' non-fleetd actions
 *                                                    (tests/images/: wipe, image2disk) → lab-images.json; the parts
 *                                                    and images.json are left alone (every build also makes these)
 *   node tests/dist/images/build.js --context-only DIR   stage the four build contexts under DIR and stop (a site
 *                                                    building with its own engine and base; README "Image")
 *
 * Cached by inputs: a base image is tagged by the hash of its package list and mmdebstrap options, an image by the
 * hash of its Containerfile, base image ID, build arguments and every file of its context (the node binary, the
 * bundle, the native addons, the policy profiles). An image whose tag exists in storage (and whose digest was recorded)
 * is not built again. Storage lives under the fleetd cache (tests/src/harness/podman.ts): a cold cache rebuilds
 * everything. Builds are reproducible (`--timestamp 0`: the same inputs give the same image ID and digest).
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, copyFileSync, cpSync, existsSync, linkSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { podman, type Podman } from "../harness/podman.js";
import { runProcess } from "../harness/process.js";
import { builtImagesFile, builtLabImagesFile, imagesDir, LAB_IMAGE_NAMES, PART_NAMES, type BuiltImage, type BuiltImages, type BuiltLabImage, type BuiltLabImages, type LabImageName, type PartName } from "./built.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");

/** A Debian base made by mmdebstrap: minbase bookworm + these packages (what the parts need at run time). */
interface BaseSpec {
  name: string;
  packages: readonly string[];
}
/** ca-certificates: TLS to NetBox, Kubernetes, the attestation server (Node reads the system store only when told; kept for tools and NODE_EXTRA_CA_CERTS). */
const SERVER_BASE: BaseSpec = { name: "fleetd-base", packages: ["ca-certificates"] };
/**
 * The CA signer's PKCS#11 module for a YubiKey (ykcs11: /usr/lib/x86_64-linux-gnu/libykcs11.so, with libykpiv2 and
 * libpcsclite1; pcscd, which owns the USB device, runs outside the container and its socket is mounted in).
 */
const SIGNER_BASE: BaseSpec = { name: "fleetd-base-signer", packages: ["ca-certificates", "ykcs11"] };
/** The action also runs lldpd/lldpcli (the LLDP claim) and mount (securityfs for the event log). */
const ACTION_BASE: BaseSpec = { name: "fleetd-base-action", packages: ["ca-certificates", "lldpd", "mount"] };

const SUITE = "bookworm";
const MIRRORS = [
  "deb http://deb.debian.org/debian bookworm main",
  "deb http://deb.debian.org/debian bookworm-updates main",
  "deb http://deb.debian.org/debian-security bookworm-security main",
];
/** No documentation, manual pages or translations in the image (copyright files stay); no apt lists or caches, no logs. */
const MMDEBSTRAP_OPTIONS = [
  "--variant=minbase",
  "--dpkgopt=path-exclude=/usr/share/doc/*",
  "--dpkgopt=path-include=/usr/share/doc/*/copyright",
  "--dpkgopt=path-exclude=/usr/share/man/*",
  "--dpkgopt=path-exclude=/usr/share/info/*",
  "--dpkgopt=path-exclude=/usr/share/locale/*",
  '--customize-hook=rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old',
];
/** mmdebstrap's file times (reproducible tarballs for the same packages). */
const SOURCE_DATE_EPOCH = "1700000000";

/** A native addon copied into the image: its package's files that Node needs at run time, nothing to build with. */
interface NativeModule {
  name: string;
  files: readonly string[];
  /** Modules it require()s, found beside it in the pnpm store. */
  deps?: readonly NativeModule[];
}
const FILE_URI_TO_PATH: NativeModule = { name: "file-uri-to-path", files: ["package.json", "index.js", "LICENSE"] };
const BINDINGS: NativeModule = { name: "bindings", files: ["package.json", "bindings.js", "LICENSE.md"], deps: [FILE_URI_TO_PATH] };
const BETTER_SQLITE3: NativeModule = { name: "better-sqlite3", files: ["package.json", "lib", "build/Release/better_sqlite3.node", "LICENSE"], deps: [BINDINGS] };
const PKCS11JS: NativeModule = { name: "pkcs11js", files: ["package.json", "index.js", "build/Release/pkcs11.node", "LICENSE"] };

interface Part {
  name: PartName;
  base: BaseSpec;
  /** The bundle's file name in /opt/fleetd (the Containerfile's ENTRYPOINT). */
  bundle: string;
  natives: readonly NativeModule[];
  /** Ship policy/ (the profiles) at /opt/fleetd/policy. */
  policy: boolean;
}
const PARTS: readonly Part[] = [
  { name: "tink-action", base: ACTION_BASE, bundle: "fleetd-tink-action.mjs", natives: [], policy: false },
  { name: "talos-config-server", base: SIGNER_BASE, bundle: "talos-config-server.mjs", natives: [BETTER_SQLITE3, PKCS11JS], policy: true },
  { name: "netbox-script", base: SERVER_BASE, bundle: "netbox-script.mjs", natives: [BETTER_SQLITE3], policy: false },
  { name: "spire-plugin", base: SERVER_BASE, bundle: "spire-plugin.mjs", natives: [], policy: false },
];

const log = (msg: string) => process.stderr.write(`[images] ${msg}\n`);
const sha256 = (data: string | Buffer) => createHash("sha256").update(data).digest("hex");

function sh(cmd: string, args: readonly string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): string {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, env: opts.env ?? process.env, ...(opts.cwd ? { cwd: opts.cwd } : {}) });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.slice(0, 3).join(" ")} failed (exit ${r.status}): ${(r.stderr || r.stdout).trim().slice(-3000)}`);
  return r.stdout;
}

/** The pinned Node.js 24 (FLEETD_NODE_DIR from .ci/env.sh, else .ci/node24.sh), stripped once into the cache. */
function strippedNode(): { path: string; version: string } {
  const nodeDir = process.env["FLEETD_NODE_DIR"] || sh("bash", [join(repo, ".ci/node24.sh")]).trim();
  const bin = join(nodeDir, "bin/node");
  const version = sh(bin, ["--version"]).trim();
  if (!/^v24\./.test(version)) throw new Error(`${bin} is ${version}, not the pinned Node.js 24`);
  const out = join(imagesDir(), "node", `node-${version}-linux-x64-${sha256(readFileSync(bin)).slice(0, 16)}-stripped`);
  if (!existsSync(out)) {
    mkdirSync(dirname(out), { recursive: true });
    const tmp = `${out}.tmp-${process.pid}`;
    sh("strip", ["--strip-all", "-o", tmp, bin]);
    chmodSync(tmp, 0o755);
    if (sh(tmp, ["--version"]).trim() !== version) throw new Error(`the stripped ${bin} does not run`);
    renameSync(tmp, out);
  }
  return { path: out, version };
}

function baseKey(b: BaseSpec): string {
  const mmdebstrap = sh("mmdebstrap", ["--version"]).trim();
  return sha256(JSON.stringify({ suite: SUITE, mirrors: MIRRORS, options: MMDEBSTRAP_OPTIONS, packages: [...b.packages].sort(), mmdebstrap, SOURCE_DATE_EPOCH, image: "scratch+ADD" })).slice(0, 16);
}

/**
 * The base image `localhost/<name>:<key>`, unless it is in storage: mmdebstrap writes the root filesystem as a tar
 * (file times clamped to SOURCE_DATE_EPOCH: the same packages give the same bytes), and `podman build --timestamp 0`
 * of `FROM scratch` + `ADD rootfs.tar /` makes it an image whose ID depends on those bytes only (`podman import`
 * would stamp the current time into it, and so into the digest of every image built on it).
 */
async function ensureBase(p: Podman, b: BaseSpec, refresh: boolean): Promise<string> {
  const ref = `localhost/${b.name}:${baseKey(b)}`;
  if (!refresh && (await p.run(["image", "exists", ref])).code === 0) return ref;
  const t0 = Date.now();
  log(`base ${ref}: mmdebstrap ${SUITE} minbase + ${b.packages.join(", ")}`);
  const ctx = join(imagesDir(), "tmp", `${b.name}-${process.pid}`);
  rmSync(ctx, { recursive: true, force: true });
  mkdirSync(ctx, { recursive: true });
  try {
    const r = await runProcess("mmdebstrap", [...MMDEBSTRAP_OPTIONS, `--include=${b.packages.join(",")}`, SUITE, join(ctx, "rootfs.tar"), ...MIRRORS], {
      env: { ...process.env, SOURCE_DATE_EPOCH },
      timeoutMs: 15 * 60_000,
    });
    if (r.code !== 0) throw new Error(`mmdebstrap failed (exit ${r.code}): ${r.stderr.toString().trim().slice(-3000)}`);
    writeFileSync(join(ctx, "Containerfile"), `FROM scratch\nADD rootfs.tar /\nLABEL org.opencontainers.image.description="Debian ${SUITE} minbase + ${b.packages.join(", ")} (mmdebstrap)"\n`);
    await p.must(["build", "--quiet", "--no-cache", "--timestamp", "0", "--file", join(ctx, "Containerfile"), "--tag", ref, ctx], { timeoutMs: 10 * 60_000 });
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  log(`base ${ref}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return ref;
}

/** The real directory of `name` as `from` resolves it (pnpm links packages from its store). */
function moduleDir(from: string, name: string): string {
  const d = join(from, "node_modules", name);
  if (!existsSync(join(d, "package.json"))) throw new Error(`${name} is not installed beside ${from}: run pnpm install`);
  return realpathSync(d);
}

function copyNative(m: NativeModule, from: string, into: string): void {
  const src = moduleDir(from, m.name);
  const dest = join(into, m.name);
  for (const f of m.files) {
    if (!existsSync(join(src, f))) throw new Error(`${m.name}: ${f} is missing in ${src} (native addons are built by pnpm install; .ci/setup rebuilds them for Node.js 24)`);
    mkdirSync(dirname(join(dest, f)), { recursive: true });
    cpSync(join(src, f), join(dest, f), { recursive: true });
  }
  // the store lays a package's dependencies beside it: <store>/<pkg>@<v>/node_modules/{<pkg>,<dep>}
  for (const d of m.deps ?? []) copyNative(d, dirname(src).endsWith("node_modules") ? dirname(dirname(src)) : src, into);
}

/** Stages one part's build context: node, app/<bundle>, app/node_modules (native addons), app/policy. */
function stageContext(part: Part, node: string, ctx: string): void {
  rmSync(ctx, { recursive: true, force: true });
  mkdirSync(join(ctx, "app"), { recursive: true });
  try {
    linkSync(node, join(ctx, "node")); // the same file in every context (hashed once, not copied four times)
  } catch {
    copyFileSync(node, join(ctx, "node"));
  }
  chmodSync(join(ctx, "node"), 0o755);
  const pkgDir = join(repo, part.name);
  sh(process.execPath, [join(pkgDir, "scripts/bundle.mjs"), join(ctx, "app", part.bundle)], { cwd: pkgDir });
  if (part.natives.length > 0) {
    const nm = join(ctx, "app/node_modules");
    for (const m of part.natives) copyNative(m, pkgDir, nm);
    // The addons must load in the image's Node.js (ABI): load them with that very binary, from the staged tree.
    const probe = part.natives.map((m) => (m.name === "better-sqlite3" ? `new (require("better-sqlite3"))(":memory:").close();` : `require("${m.name}");`)).join("");
    sh(join(ctx, "node"), ["-e", probe], { cwd: join(ctx, "app") });
  }
  if (part.policy) {
    mkdirSync(join(ctx, "app/policy"));
    for (const f of readdirSync(join(repo, "policy"))) if (/\.(ya?ml|json)$/.test(f) && f !== "package.json") copyFileSync(join(repo, "policy", f), join(ctx, "app/policy", f));
  }
}

/** File hashes by inode, size and mtime (the node binary is one hard-linked file in every context). */
const fileHashes = new Map<string, string>();
function fileHash(p: string, st: { dev: number; ino: number; size: number; mtimeMs: number }): string {
  const k = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
  let h = fileHashes.get(k);
  if (!h) fileHashes.set(k, (h = sha256(readFileSync(p))));
  return h;
}

/** Every file of a context: relative path, mode and content hash, sorted. */
function contextHash(ctx: string): string {
  const lines: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d).sort()) {
      const p = join(d, e);
      const st = statSync(p);
      if (st.isDirectory()) walk(p);
      else lines.push(`${relative(ctx, p)} ${(st.mode & 0o777).toString(8)} ${fileHash(p, st)}`);
    }
  };
  walk(ctx);
  return sha256(lines.join("\n"));
}

function gitRevision(): string {
  const head = sh("git", ["rev-parse", "HEAD"], { cwd: repo }).trim();
  const dirty = sh("git", ["status", "--porcelain", "--untracked-files=no"], { cwd: repo }).trim() !== "";
  return dirty ? `${head}-dirty` : head;
}

/** FLEETD_IMAGE_SOURCE, else the checkout's `origin` (without credentials), else "local-checkout". */
function sourceUrl(): string {
  if (process.env["FLEETD_IMAGE_SOURCE"]) return process.env["FLEETD_IMAGE_SOURCE"];
  const r = spawnSync("git", ["remote", "get-url", "origin"], { cwd: repo, encoding: "utf8" });
  const url = r.status === 0 ? r.stdout.trim() : "";
  return url ? url.replace(/\/\/[^@/]+@/, "//") : "local-checkout";
}

const packageVersion = (part: string): string => (JSON.parse(readFileSync(join(repo, part, "package.json"), "utf8")) as { version: string }).version;

interface DigestRecord {
  id: string;
  digest: string;
}

/** Builds one part unless an image of the same inputs is in storage. */
async function buildPart(p: Podman, part: Part, base: string, node: string, meta: { revision: string; source: string }): Promise<BuiltImage> {
  const ctx = join(imagesDir(), "context", part.name);
  stageContext(part, node, ctx);
  const containerfile = join(repo, part.name, "Containerfile");
  const version = packageVersion(part.name);
  const args = { BASE: base, VERSION: version, REVISION: meta.revision, SOURCE: meta.source };
  // the base's image ID, not only its tag: a refreshed base (--refresh-bases) keeps its tag
  const baseId = (await p.must(["image", "inspect", "--format", "{{.Id}}", base])).trim();
  const key = sha256(JSON.stringify({ containerfile: readFileSync(containerfile, "utf8"), args, baseId, context: contextHash(ctx) })).slice(0, 16);
  const name = `localhost/fleetd-${part.name}`;
  const tag = `${version}-${key}`;
  const ref = `${name}:${tag}`;
  const recordFile = join(imagesDir(), "digests", `${part.name}-${tag}.json`);
  let record: DigestRecord | undefined;
  if ((await p.run(["image", "exists", ref])).code === 0 && existsSync(recordFile)) {
    record = JSON.parse(readFileSync(recordFile, "utf8")) as DigestRecord;
    utimesSync(recordFile, new Date(), new Date()); // in use: pruneOld keeps it a day from now
    log(`${part.name}: ${ref} is built (inputs unchanged)`);
  } else {
    const t0 = Date.now();
    await p.must(
      // --no-cache: buildah 1.28's step cache keys a LABEL by its text before ARG expansion (a new revision would
      // reuse the old label); this script caches by inputs itself.
      ["build", "--quiet", "--pull=never", "--no-cache", "--timestamp", "0", "--no-hosts", "--file", containerfile, ...Object.entries(args).flatMap(([k, v]) => ["--build-arg", `${k}=${v}`]), "--tag", ref, ctx],
      { timeoutMs: 15 * 60_000 },
    );
    // The digest a registry will hold: push to an OCI layout (gzip layers, as `podman push` sends them) and read it.
    record = await recordBuilt(p, ref, `${part.name}-${tag}`, tag, recordFile);
    log(`${part.name}: built ${ref} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
  const [size = "", user = ""] = (await p.must(["image", "inspect", "--format", "{{.Size}}\t{{.Config.User}}", ref])).trim().split("\t");
  return { part: part.name, name, tag, ref, id: record.id, digest: record.digest, sizeBytes: Number(size), version, revision: meta.revision, source: meta.source, base, user: user || "0:0" };
}

/**
 * The lab's stand-ins for the Templates' non-fleetd actions (tests/images/README.md), on the ACTION base: `wipe`
 * (its shell and util-linux) and `image2disk` (fleetd's equivalent of tinkerbell/actions image2disk on the pinned
 * Node.js). No revision label: cached by content only, so a new commit does not rebuild them. The action's base
 * (and image2disk's `COPY node` layer, byte-identical to tink-action's) is shared with fleetd-tink-action, so a
 * machine's HookOS pulls and unpacks it once: the 1 GiB guest's /var is a tmpfs, and each separate base cost
 * ~128 MiB of its RAM and a minute of pulling.
 */
interface LabSpec {
  name: LabImageName;
  /** Files of tests/images/<name>/ copied into the context (beside the Containerfile). */
  files: readonly string[];
  node: boolean;
}
const LAB_IMAGES: readonly LabSpec[] = [
  { name: "wipe", files: [], node: false },
  { name: "image2disk", files: ["image2disk.mjs"], node: true },
];
const LAB_VERSION = "lab-1";

async function buildLab(p: Podman, spec: LabSpec, base: string, node: string): Promise<BuiltLabImage> {
  const src = join(repo, "tests/images", spec.name);
  const ctx = join(imagesDir(), "context", `lab-${spec.name}`);
  rmSync(ctx, { recursive: true, force: true });
  mkdirSync(ctx, { recursive: true });
  if (spec.node) {
    try {
      linkSync(node, join(ctx, "node"));
    } catch {
      copyFileSync(node, join(ctx, "node"));
    }
    chmodSync(join(ctx, "node"), 0o755);
  }
  for (const f of spec.files) copyFileSync(join(src, f), join(ctx, f));
  const containerfile = join(src, "Containerfile");
  const args = { BASE: base, VERSION: LAB_VERSION };
  const baseId = (await p.must(["image", "inspect", "--format", "{{.Id}}", base])).trim();
  const key = sha256(JSON.stringify({ containerfile: readFileSync(containerfile, "utf8"), args, baseId, context: contextHash(ctx) })).slice(0, 16);
  const ref = `localhost/fleetd-lab-${spec.name}:${LAB_VERSION}-${key}`;
  const recordFile = join(imagesDir(), "digests", `lab-${spec.name}-${LAB_VERSION}-${key}.json`);
  let record: DigestRecord;
  if ((await p.run(["image", "exists", ref])).code === 0 && existsSync(recordFile)) {
    record = JSON.parse(readFileSync(recordFile, "utf8")) as DigestRecord;
    log(`lab ${spec.name}: ${ref} is built (inputs unchanged)`);
  } else {
    const t0 = Date.now();
    await p.must(
      ["build", "--quiet", "--pull=never", "--no-cache", "--timestamp", "0", "--no-hosts", "--file", containerfile, ...Object.entries(args).flatMap(([k, v]) => ["--build-arg", `${k}=${v}`]), "--tag", ref, ctx],
      { timeoutMs: 15 * 60_000 },
    );
    record = await recordBuilt(p, ref, `lab-${spec.name}`, "lab", recordFile);
    log(`lab ${spec.name}: built ${ref} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
  const size = (await p.must(["image", "inspect", "--format", "{{.Size}}", ref])).trim();
  return { name: spec.name, ref, id: record.id, digest: record.digest, sizeBytes: Number(size), base };
}

async function buildLabImages(p: Podman, base: string, node: string): Promise<void> {
  const images: BuiltLabImage[] = [];
  for (const name of LAB_IMAGE_NAMES) images.push(await buildLab(p, LAB_IMAGES.find((l) => l.name === name) as LabSpec, base, node));
  const out: BuiltLabImages = { schema: 1, images };
  const file = builtLabImagesFile();
  mkdirSync(imagesDir(), { recursive: true });
  writeFileSync(`${file}.tmp`, `${JSON.stringify(out, null, 2)}\n`);
  renameSync(`${file}.tmp`, file);
  for (const i of images) console.log(`${i.ref}  ${i.digest}  ${(i.sizeBytes / 1e6).toFixed(1)} MB  (lab)`);
}

/** Earlier builds are kept this long after their last build or use (other checkouts may share the cache). */
const KEEP_EARLIER_MS = 24 * 3600_000;

/**
 * Removes earlier builds of the parts (`localhost/fleetd-<part>` tags other than `keep`) not built or used for a
 * day, with their digest records, so the cache does not grow with every commit; another checkout's build from
 * the same day stays. An image a container still uses stays (no --force). Earlier bases are left alone (they
 * change only with their package list).
 */
async function pruneOld(p: Podman, keep: ReadonlySet<string>): Promise<void> {
  const records = join(imagesDir(), "digests");
  const parts = PART_NAMES.map((n) => `localhost/fleetd-${n}:`);
  const all = (await p.must(["images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference=localhost/fleetd-*"])).split("\n").filter(Boolean);
  let removed = 0;
  for (const ref of all) {
    const part = PART_NAMES.find((n, i) => ref.startsWith(parts[i] as string));
    if (!part || keep.has(ref)) continue;
    const record = join(records, `${part}-${ref.slice(ref.lastIndexOf(":") + 1)}.json`);
    if (existsSync(record) && Date.now() - statSync(record).mtimeMs < KEEP_EARLIER_MS) continue;
    if ((await p.run(["rmi", ref])).code === 0) {
      removed++;
      rmSync(record, { force: true });
    }
  }
  if (removed > 0) {
    await p.run(["image", "prune", "--force"]); // their untagged intermediate images
    log(`removed ${removed} earlier image(s) unused for a day`);
  }
}

async function main(argv: string[]): Promise<void> {
  const contextOnly = argv.includes("--context-only") ? argv[argv.indexOf("--context-only") + 1] : undefined;
  const unknown = argv.filter((a, i) => a !== "--refresh-bases" && a !== "--lab-only" && a !== "--context-only" && argv[i - 1] !== "--context-only");
  if ((argv.includes("--context-only") && !contextOnly) || unknown.length > 0) throw new Error("usage: build.js [--refresh-bases] [--lab-only] [--context-only DIR]");
  const t0 = Date.now();
  const node = strippedNode();
  if (contextOnly) {
    for (const part of PARTS) {
      stageContext(part, node.path, join(resolve(contextOnly), part.name));
      log(`${part.name}: context in ${join(resolve(contextOnly), part.name)} (podman/docker build -f ${part.name}/Containerfile --build-arg BASE=<Debian 12 with ${part.base.packages.join(", ")}> …)`);
    }
    return;
  }
  const p = podman();
  if (argv.includes("--lab-only")) {
    await buildLabImages(p, await ensureBase(p, ACTION_BASE, argv.includes("--refresh-bases")), node.path);
    log(`${builtLabImagesFile()} written (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    return;
  }
  const bases = new Map<string, string>();
  for (const b of [SERVER_BASE, SIGNER_BASE, ACTION_BASE]) bases.set(b.name, await ensureBase(p, b, argv.includes("--refresh-bases")));
  const meta = { revision: gitRevision(), source: sourceUrl() };
  const images: BuiltImage[] = [];
  for (const name of PART_NAMES) {
    const part = PARTS.find((x) => x.name === name) as Part;
    images.push(await buildPart(p, part, bases.get(part.base.name) as string, node.path, meta));
  }
  await buildLabImages(p, bases.get(ACTION_BASE.name) as string, node.path);
  await pruneOld(p, new Set([...bases.values(), ...images.map((i) => i.ref)]));
  const out: BuiltImages = { schema: 1, images };
  mkdirSync(imagesDir(), { recursive: true });
  const file = builtImagesFile();
  writeFileSync(`${file}.tmp`, `${JSON.stringify(out, null, 2)}\n`);
  renameSync(`${file}.tmp`, file);
  for (const i of images) {
    console.log(`${i.ref}  ${i.digest}  ${(i.sizeBytes / 1e6).toFixed(1)} MB`);
  }
  log(`${file} written (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
}

// One build at a time per cache (a second waits): re-run under flock(1) on the cache's lock file.
if (process.env["FLEETD_IMAGES_LOCKED"] !== "1") {
  mkdirSync(imagesDir(), { recursive: true });
  const r = spawnSync("flock", [join(imagesDir(), ".lock"), process.execPath, fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: "inherit",
    env: { ...process.env, FLEETD_IMAGES_LOCKED: "1" },
  });
  process.exit(r.status ?? 1);
} else {
  main(process.argv.slice(2)).catch((e: unknown) => {
    const message = (e as Error).message;
    process.stderr.write(`[images] ${message}\n`);
    process.exit(message.startsWith("usage:") ? 2 : 1); // fleetd's exit table: 2 usage
  });
}

/**
 * The image's ID and its manifest digest (what a registry serves it by: pushing it to a scratch OCI layout gives the
 * digest podman computes for it), written to `recordFile`.
 */
async function recordBuilt(p: Podman, ref: string, scratch: string, tag: string, recordFile: string): Promise<{ id: string; digest: string }> {
  const oci = join(imagesDir(), "tmp", `oci-${scratch}-${process.pid}`);
  const digestFile = `${oci}.digest`;
  let record: { id: string; digest: string };
  try {
    await p.must(["push", "--quiet", "--digestfile", digestFile, ref, `oci:${oci}:${tag}`], { timeoutMs: 15 * 60_000 });
    const id = `sha256:${(await p.must(["image", "inspect", "--format", "{{.Id}}", ref])).trim()}`;
    record = { id, digest: readFileSync(digestFile, "utf8").trim() };
  } finally {
    rmSync(oci, { recursive: true, force: true });
    rmSync(digestFile, { force: true });
  }
  mkdirSync(dirname(recordFile), { recursive: true });
  writeFileSync(recordFile, `${JSON.stringify(record)}\n`);
  return record;
}
