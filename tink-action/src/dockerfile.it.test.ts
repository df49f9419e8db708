/**
 * The image without an engine (this machine has no Docker or BuildKit): the Dockerfile is read instruction by
 * instruction and its build stage is replayed in a temporary directory standing for the stage's filesystem —
 * every COPY from the repository (through Dockerfile.dockerignore), every RUN (pnpm offline, from this
 * machine's store) — then the runtime stage's COPY --from sources must exist, and the ENTRYPOINT file, alone
 * in a directory without node_modules as in the image, must run. What this cannot show: the base image and
 * Debian's lldpd in it (the runtime RUN is checked, not run), and the real digest (a required build argument).
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, posix, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";

const pkg = resolve(fileURLToPath(import.meta.url), "../..");
const repo = resolve(pkg, "..");
const dockerfile = readFileSync(join(pkg, "Dockerfile"), "utf8");
const ignore = readFileSync(join(pkg, "Dockerfile.dockerignore"), "utf8")
  .split("\n")
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith("#"));

interface Instruction {
  op: string;
  args: string;
  line: number;
}
interface Stage {
  from: string;
  name?: string;
  instructions: Instruction[];
}

/** Instructions of a Dockerfile: comments dropped, `\` continuations joined; grouped into stages at FROM. */
function parseDockerfile(text: string): { globalArgs: Instruction[]; stages: Stage[] } {
  const globalArgs: Instruction[] = [];
  const stages: Stage[] = [];
  let buf = "";
  let start = 0;
  text.split("\n").forEach((raw, i) => {
    if (!buf && (raw.trim().startsWith("#") || !raw.trim())) return;
    if (!buf) start = i + 1;
    if (raw.trim().startsWith("#")) return; // comment inside a continuation
    buf += (buf ? " " : "") + raw.trim().replace(/\\$/, "").trim();
    if (raw.trimEnd().endsWith("\\")) return;
    const m = /^([A-Za-z]+)\s+(.*)$/.exec(buf);
    buf = "";
    if (!m) throw new Error(`line ${start}: not an instruction`);
    const ins = { op: (m[1] ?? "").toUpperCase(), args: m[2] ?? "", line: start };
    if (ins.op === "FROM") {
      const f = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      stages.push({ from: f?.[1] ?? "", ...(f?.[2] ? { name: f[2] } : {}), instructions: [] });
    } else if (stages.length === 0) {
      if (ins.op !== "ARG") throw new Error(`line ${start}: ${ins.op} before the first FROM`);
      globalArgs.push(ins);
    } else (stages[stages.length - 1] as Stage).instructions.push(ins);
  });
  return { globalArgs, stages };
}

/** Docker's ignore patterns as used here: `**\/` any depth, `*` within a segment; a match excludes the subtree. */
function ignored(rel: string): boolean {
  return ignore.some((p) => {
    const re = p
      .split("/")
      .map((seg) => (seg === "**" ? "(?:[^/]+/)*" : seg.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/]*") + "/"))
      .join("")
      .replace(/\/$/, "");
    return new RegExp(`^${re}(?:/.*)?$`).test(rel);
  });
}

function copyTree(src: string, dest: string, copied: string[]): void {
  const rel = relative(repo, src).split("\\").join("/");
  if (rel && ignored(rel)) return;
  const st = statSync(src);
  if (st.isDirectory()) {
    mkdirSync(dest, { recursive: true });
    for (const e of readdirSync(src)) copyTree(join(src, e), join(dest, e), copied);
  } else {
    mkdirSync(dirname(dest), { recursive: true });
    copyFileSync(src, dest);
    copied.push(rel);
  }
}

const { globalArgs, stages } = parseDockerfile(dockerfile);
const build = stages.find((s) => s.name === "build");
const runtime = stages[stages.length - 1];
const work = mkdtempSync(join(tmpdir(), "fleetd-image-"));
after(() => rmSync(work, { recursive: true, force: true }));

test("base images are pinned by digest: a required NODE_IMAGE_DIGEST argument without default, used by every FROM", () => {
  const args = Object.fromEntries(globalArgs.map((a) => [a.args.split("=")[0], a.args.includes("=") ? a.args.slice(a.args.indexOf("=") + 1) : undefined]));
  assert.ok("NODE_IMAGE_DIGEST" in args, "ARG NODE_IMAGE_DIGEST is declared");
  assert.equal(args["NODE_IMAGE_DIGEST"], undefined, "and has no default: the build needs the digest");
  assert.match(args["NODE_IMAGE"] ?? "", /^docker\.io\/library\/node:24-bookworm-slim$/);
  assert.equal(stages.length, 2);
  for (const s of stages) {
    const ref = s.from.replace("${NODE_IMAGE}", args["NODE_IMAGE"] ?? "");
    assert.ok(/@sha256:[0-9a-f]{64}$/.test(s.from) || ref.endsWith("@${NODE_IMAGE_DIGEST}"), `FROM ${s.from} is pinned by digest`);
    // Without the argument the reference ends in '@', which no registry client accepts.
    assert.ok(!/^[^@]+@sha256:[0-9a-f]{64}$/.test(ref.replace("${NODE_IMAGE_DIGEST}", "")));
    assert.match(ref.replace("${NODE_IMAGE_DIGEST}", `sha256:${"0".repeat(64)}`), /^[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}$/);
  }
});

test("the runtime stage: lldpd installed, no USER (root, documented), ENTRYPOINT is the bundle copied from the build stage", () => {
  assert.ok(build && runtime && runtime !== build);
  const runs = runtime.instructions.filter((i) => i.op === "RUN").map((i) => i.args);
  assert.ok(runs.some((r) => /apt-get install -y --no-install-recommends lldpd\b/.test(r)), "lldpd is installed");
  assert.ok(!runtime.instructions.some((i) => i.op === "USER"));
  assert.match(dockerfile, /runs as root, privileged/);
  const entry = runtime.instructions.find((i) => i.op === "ENTRYPOINT");
  const argv = JSON.parse(entry?.args ?? "null") as string[];
  assert.equal(argv[0], "node");
  const copies = runtime.instructions.filter((i) => i.op === "COPY").map((i) => i.args.split(/\s+/));
  assert.ok(copies.some((c) => c[0] === "--from=build" && c[c.length - 1] === argv[1]), `ENTRYPOINT ${argv[1]} is what COPY --from=build puts there`);
  const npm = build?.instructions.find((i) => i.op === "RUN" && /npm install -g pnpm@/.test(i.args));
  const pinned = /pnpm@(\S+)/.exec(npm?.args ?? "")?.[1];
  assert.equal(`pnpm@${pinned}`, (JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { packageManager: string }).packageManager, "the image's pnpm is the workspace's");
});

test("the build stage replayed from the repository: every COPY source exists and is not ignored; the RUNs build the bundle; it runs alone", { timeout: 10 * 60_000 }, () => {
  assert.ok(build && runtime);
  const root = join(work, "build-stage");
  let wd = "/";
  const at = (p: string) => join(root, posix.isAbsolute(p) ? p : posix.join(wd, p));
  const copiedSources: string[] = [];
  for (const ins of build.instructions) {
    if (ins.op === "WORKDIR") {
      wd = posix.resolve(wd, ins.args);
      mkdirSync(at("."), { recursive: true });
    } else if (ins.op === "COPY") {
      const parts = ins.args.split(/\s+/);
      assert.ok(!parts.some((p) => p.startsWith("--")), `line ${ins.line}: build-stage COPY takes no flags`);
      const dest = parts.pop() as string;
      for (const s of parts) {
        const src = join(repo, s);
        assert.ok(existsSync(src), `line ${ins.line}: COPY source ${s} exists in the repository`);
        assert.ok(!ignored(s.replace(/\/$/, "")), `line ${ins.line}: ${s} is not excluded by Dockerfile.dockerignore`);
        const target = statSync(src).isDirectory() || dest.endsWith("/") || parts.length > 1 ? at(statSync(src).isDirectory() ? dest : posix.join(dest, basename(s))) : at(dest);
        copyTree(src, target, copiedSources);
      }
    } else if (ins.op === "RUN") {
      if (/^npm install -g pnpm@/.test(ins.args)) {
        const have = spawnSync("pnpm", ["--version"], { encoding: "utf8" }).stdout.trim();
        assert.equal(`npm install -g pnpm@${have}`, ins.args, "the pnpm here is the one the image installs");
        continue;
      }
      // npm_config_offline: this replay uses the local pnpm store and never the network.
      const r = spawnSync("sh", ["-c", ins.args], { cwd: at("."), encoding: "utf8", env: { ...process.env, npm_config_offline: "true", CI: "true" }, timeout: 8 * 60_000 });
      assert.equal(r.status, 0, `line ${ins.line}: RUN ${ins.args}\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-2000)}`);
    } else if (ins.op !== "ARG" && ins.op !== "ENV") {
      assert.fail(`line ${ins.line}: ${ins.op} is not replayed by this test; extend it`);
    }
  }
  assert.ok(copiedSources.length > 50, "the sources were copied");
  assert.ok(!copiedSources.some((f) => /(^|\/)(node_modules|dist)\//.test(f)), "no node_modules or dist from the context");

  // The runtime stage: its COPY --from=build sources, placed as the image places them, with nothing else.
  const image = join(work, "image");
  for (const ins of runtime.instructions.filter((i) => i.op === "COPY")) {
    const [flag, src, dest] = ins.args.split(/\s+/);
    assert.equal(flag, "--from=build", `line ${ins.line}: the runtime stage copies only from the build stage`);
    const from = join(root, src ?? "");
    assert.ok(existsSync(from), `line ${ins.line}: ${src} exists after the build stage`);
    mkdirSync(dirname(join(image, dest ?? "")), { recursive: true });
    copyFileSync(from, join(image, dest ?? ""));
  }
  const entry = JSON.parse(runtime.instructions.find((i) => i.op === "ENTRYPOINT")?.args ?? "[]") as string[];
  const file = join(image, entry[1] ?? "");
  assert.ok(!existsSync(join(dirname(file), "node_modules")) && readdirSync(dirname(file)).length === 1, "the bundle is alone");
  const help = spawnSync(process.execPath, [file, "--help"], { cwd: image, encoding: "utf8", env: { PATH: process.env["PATH"] ?? "" } });
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /attest\s+attest this machine's TPM/);
  assert.match(help.stdout, /write-meta\s+write the install code/);
  const bare = spawnSync(process.execPath, [file, "attest"], { cwd: image, encoding: "utf8", env: { PATH: process.env["PATH"] ?? "" } });
  assert.equal(bare.status, 2, "attest without configuration: exit 2");
  const line = JSON.parse(bare.stderr.trim().split("\n")[0] ?? "{}") as { code?: string; msg?: string };
  assert.equal(line.code, "config", "and pino's JSON log works inside the bundle");
  assert.match(line.msg ?? "", /FLEETD_SERVER: is required/);
});
