// Bundles the compiled action (dist/cli.js and what it imports from @fleetd/verify and @fleetd/platform, zod, pino) into one ES
// module for the image: no node_modules, no native addons at run time (the server-side modules of shared that
// need better-sqlite3 or pkcs11js are not reachable from the action's commands).
//   node scripts/bundle.mjs [OUTFILE]     default dist/bundle/fleetd-tink-action.mjs (run after `tsc -b`)
import { build } from "esbuild";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const outfile = resolve(process.argv[2] ?? join(pkg, "dist/bundle/fleetd-tink-action.mjs"));
const result = await build({
  entryPoints: [join(pkg, "dist/cli.js")],
  outfile,
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node24",
  // pino is CommonJS and calls require() for Node's modules; an ES module bundle has to provide it.
  banner: { js: 'import { createRequire as __fleetdCreateRequire } from "node:module"; const require = __fleetdCreateRequire(import.meta.url);' },
  external: ["better-sqlite3", "pkcs11js"],
  legalComments: "none",
  logLevel: "warning",
  metafile: true,
});
// External modules are never among the inputs: what the bundle would still import at run time is in its outputs.
const reached = Object.values(result.metafile.outputs).flatMap((o) => o.imports).filter((i) => i.external && /better-sqlite3|pkcs11js/.test(i.path));
if (reached.length) {
  console.error(`bundle: native modules reached from the action: ${reached.map((i) => i.path).join(", ")}`);
  process.exit(1);
}
console.log(outfile);
