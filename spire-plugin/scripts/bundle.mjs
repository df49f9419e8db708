// Bundles the compiled sync (dist/main.js and what it imports from @fleetd/platform, the SPIRE gRPC client, the
// Kubernetes client, pino, zod, yaml) into one ES module for the image (spire-plugin/Containerfile): no
// node_modules, no native addons at run time (the modules of shared that need better-sqlite3 or pkcs11js are not
// reachable from the sync; the bundle fails if they ever are).
//   node scripts/bundle.mjs [OUTFILE]     default dist/bundle/spire-plugin.mjs (run after `tsc -b`)
import { build } from "esbuild";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const outfile = resolve(process.argv[2] ?? join(pkg, "dist/bundle/spire-plugin.mjs"));
const result = await build({
  entryPoints: [join(pkg, "dist/main.js")],
  outfile,
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node24",
  // CommonJS dependencies call require() for Node's modules; an ES module bundle has to provide it.
  banner: { js: 'import { createRequire as __fleetdCreateRequire } from "node:module"; const require = __fleetdCreateRequire(import.meta.url);' },
  external: ["better-sqlite3", "pkcs11js"],
  legalComments: "none",
  logLevel: "warning",
  metafile: true,
});
const reached = Object.values(result.metafile.outputs).flatMap((o) => o.imports).filter((i) => i.external && /better-sqlite3|pkcs11js/.test(i.path));
if (reached.length) {
  console.error(`bundle: native modules reached from spire-plugin: ${reached.map((i) => i.path).join(", ")}`);
  process.exit(1);
}
console.log(outfile);
