/**
 * The workspace's import rules, checked on the TypeScript sources (no build needed):
 *  - no import cycle between the top-level folders of one package (`src/<folder>/…`, product files only);
 *  - no deep import across packages: `@fleetd/<pkg>/<sub>` only where `<sub>` is a key of that package's `exports`,
 *    no relative path from one package into another, and only workspace packages the importer declares;
 *  - `@fleetd/verify` is pure: its product files import only its own files, `node:crypto`, `node:buffer`, `node:zlib` (checksums), `zod`,
 *    `yaml` and `@peculiar/asn1-schema` + `@peculiar/asn1-x509` (x509/build.ts encodes certificates with them: pure
 *    ASN.1 schema code, no I/O) — no file system, network, process, native module or dynamic loading — and its
 *    package.json depends on nothing else.
 *   node tests/dist/tools/importCheck.js [ROOT]     prints the violations; exit 1 when there are any
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { parse as parseYaml } from "yaml";
import { z } from "zod";

export type ViolationKind = "folder-cycle" | "deep-import" | "undeclared-dependency" | "impure-verify";
export interface Violation {
  kind: ViolationKind;
  /** The file (relative to the root) or package the violation is in. */
  where: string;
  detail: string;
}

const PURE_VERIFY_IMPORTS = new Set(["node:crypto", "node:buffer", "node:zlib", "zod", "yaml", "@peculiar/asn1-schema", "@peculiar/asn1-x509"]);
const VERIFY = "@fleetd/verify";

const PackageJson = z.object({
  name: z.string(),
  exports: z.union([z.string(), z.record(z.string(), z.unknown())]).optional(),
  dependencies: z.record(z.string(), z.string()).optional(),
  devDependencies: z.record(z.string(), z.string()).optional(),
  peerDependencies: z.record(z.string(), z.string()).optional(),
});

interface Pkg {
  name: string;
  dir: string;
  src: string;
  exportKeys: Set<string>;
  deps: Set<string>;
  /** Production dependencies (what a product file may import). */
  prodDeps: Set<string>;
}

/** The module specifiers a file imports (static, `export … from`, dynamic `import()`, `require()`), as TypeScript's own
 * scanner reads them: never the text of a string or a comment. */
const specifiers = (text: string): string[] => ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName);

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir)) {
    if (e === "node_modules" || e === "dist") continue;
    const p = join(dir, e);
    if (statSync(p).isDirectory()) sourceFiles(p, out);
    else if (e.endsWith(".ts") && !e.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

export function workspacePackages(root: string): Pkg[] {
  const ws = z.object({ packages: z.array(z.string()) }).parse(parseYaml(readFileSync(join(root, "pnpm-workspace.yaml"), "utf8")));
  return ws.packages.filter((p) => existsSync(join(root, p, "package.json"))).map((p) => {
    const dir = join(root, p);
    const pj = PackageJson.parse(JSON.parse(readFileSync(join(dir, "package.json"), "utf8")));
    const exportKeys = new Set(typeof pj.exports === "string" ? ["."] : Object.keys(pj.exports ?? {}));
    const prodDeps = new Set([...Object.keys(pj.dependencies ?? {}), ...Object.keys(pj.peerDependencies ?? {})]);
    const deps = new Set([...prodDeps, ...Object.keys(pj.devDependencies ?? {})]);
    return { name: pj.name, dir, src: join(dir, "src"), exportKeys, deps, prodDeps };
  });
}

/** Whether `sub` ("." or "./x/y") is an entry point of `pkg` (exact keys, or Node's "./*" patterns). */
function exported(pkg: Pkg, sub: string): boolean {
  if (pkg.exportKeys.has(sub)) return true;
  for (const k of pkg.exportKeys) {
    const star = k.indexOf("*");
    if (star >= 0 && sub.startsWith(k.slice(0, star)) && sub.endsWith(k.slice(star + 1)) && sub.length > k.length - 1) return true;
  }
  return false;
}

const isTest = (file: string) => /\.test\.ts$/.test(file);
const bareName = (spec: string) => (spec.startsWith("@") ? spec.split("/").slice(0, 2).join("/") : spec.split("/")[0]!);

/** Strongly connected components with more than one member (Tarjan). */
function cycles(graph: Map<string, Set<string>>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const comp: string[] = [];
      for (;;) {
        const w = stack.pop()!;
        on.delete(w);
        comp.push(w);
        if (w === v) break;
      }
      if (comp.length > 1) out.push(comp.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!idx.has(v)) visit(v);
  return out;
}

export function checkImports(root: string): Violation[] {
  const pkgs = workspacePackages(root).filter((p) => existsSync(p.src));
  const byName = new Map(pkgs.map((p) => [p.name, p]));
  const owner = (path: string) => pkgs.find((p) => path === p.dir || path.startsWith(p.dir + sep));
  const out: Violation[] = [];

  for (const pkg of pkgs) {
    const folderOf = (file: string) => {
      const rel = relative(pkg.src, file).split(sep);
      return rel.length > 1 ? rel[0]! : ".";
    };
    const graph = new Map<string, Set<string>>();
    const example = new Map<string, string>();
    for (const file of sourceFiles(pkg.src)) {
      const where = relative(root, file);
      const text = readFileSync(file, "utf8");
      const test = isTest(file);
      if (pkg.name === VERIFY && !test && /\b(createRequire|require\s*\(|process\.(env|argv|cwd|exit))/.test(text)) {
        out.push({ kind: "impure-verify", where, detail: "loads modules dynamically or reads the process (require, process.env/argv/cwd/exit)" });
      }
      for (const spec of specifiers(text)) {
        if (spec.startsWith(".")) {
          const target = resolve(dirname(file), spec);
          const into = owner(target);
          if (into && into !== pkg) {
            out.push({ kind: "deep-import", where, detail: `relative import ${spec} reaches into ${into.name}; import its exports instead` });
            continue;
          }
          if (!test && target.startsWith(pkg.src + sep)) {
            const from = folderOf(file);
            const to = folderOf(target.replace(/\.js$/, ".ts"));
            if (from !== to) {
              (graph.get(from) ?? graph.set(from, new Set()).get(from)!).add(to);
              if (!example.has(`${from}>${to}`)) example.set(`${from}>${to}`, `${where} imports ${spec}`);
            }
          }
          continue;
        }
        if (pkg.name === VERIFY && !test && !PURE_VERIFY_IMPORTS.has(spec)) {
          out.push({ kind: "impure-verify", where, detail: `imports ${spec} (allowed: its own files, ${[...PURE_VERIFY_IMPORTS].join(", ")})` });
        }
        if (spec.startsWith("node:")) continue;
        const name = bareName(spec);
        const dep = byName.get(name);
        if (dep) {
          const sub = spec === name ? "." : "." + spec.slice(name.length);
          if (!exported(dep, sub)) out.push({ kind: "deep-import", where, detail: `${spec} is not an entry point of ${name} (its exports: ${[...dep.exportKeys].join(", ")})` });
        }
        if (dep || name.startsWith("@fleetd/")) {
          const declared = test ? pkg.deps : pkg.prodDeps;
          if (dep !== pkg && !declared.has(name)) {
            out.push({ kind: "undeclared-dependency", where, detail: `imports ${name}, which ${pkg.name} does not declare${test ? "" : " as a dependency"}` });
          }
        }
      }
    }
    for (const comp of cycles(graph)) {
      const edges = [...example.entries()].filter(([k]) => {
        const [a, b] = k.split(">");
        return comp.includes(a!) && comp.includes(b!);
      });
      out.push({
        kind: "folder-cycle",
        where: pkg.name,
        detail: `folders ${comp.join(", ")} import each other: ${edges.map(([, v]) => v).join("; ")}`,
      });
    }
    if (pkg.name === VERIFY) {
      for (const d of pkg.prodDeps) {
        if (!PURE_VERIFY_IMPORTS.has(d)) out.push({ kind: "impure-verify", where: pkg.name, detail: `package.json depends on ${d}` });
      }
    }
  }
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), "../../.."));
  const found = checkImports(root);
  for (const v of found) console.log(`${v.kind}  ${v.where}: ${v.detail}`);
  console.log(found.length === 0 ? "imports: no violation" : `imports: ${found.length} violation(s)`);
  process.exit(found.length === 0 ? 0 : 1);
}
