// Bundles the compiled handler (dist/main.js and what it imports from @fleetd/verify and @fleetd/platform, express,
// the Kubernetes client, pino, zod, yaml) into one ES module for the image (netbox-script/Containerfile).
// The native addon better-sqlite3 (the queue and state store) cannot be bundled: it stays
// external and the image build copies it, built for the pinned Node.js 24, into node_modules beside the bundle.
// Any other native module reached is an error.
//   node scripts/bundle.mjs [OUTFILE]     default dist/bundle/netbox-script.mjs (run after `tsc -b`)
import { build } from "esbuild";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const outfile = resolve(process.argv[2] ?? join(pkg, "dist/bundle/netbox-script.mjs"));
const NATIVE = ["better-sqlite3"];
const result = await build({
  entryPoints: [join(pkg, "dist/main.js")],
  outfile,
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node24",
  // CommonJS dependencies call require() for Node's modules; an ES module bundle has to provide it.
  banner: { js: 'import { createRequire as __fleetdCreateRequire } from "node:module"; const require = __fleetdCreateRequire(import.meta.url);' },
  external: NATIVE,
  legalComments: "none",
  logLevel: "warning",
  metafile: true,
});
const nativeInside = Object.keys(result.metafile.inputs).filter((i) => /\.node$|node-gyp-build|prebuild/.test(i));
if (nativeInside.length) {
  console.error(`bundle: native modules bundled into netbox-script: ${nativeInside.join(", ")}`);
  process.exit(1);
}
console.log(outfile);
