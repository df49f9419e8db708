// Bundles the compiled server (dist/main.js and what it imports from @fleetd/verify and @fleetd/platform, express,
// the Kubernetes client, pino, zod, yaml) into one ES module for the image (talos-config-server/Containerfile).
// The native addons better-sqlite3 (the state store) and pkcs11js (the CA signer) cannot be bundled: they stay
// external and the image build copies them, built for the pinned Node.js 24, into node_modules beside the bundle.
// Any other native module reached is an error.
//   node scripts/bundle.mjs [OUTFILE]     default dist/bundle/talos-config-server.mjs (run after `tsc -b`)
import { build } from "esbuild";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const outfile = resolve(process.argv[2] ?? join(pkg, "dist/bundle/talos-config-server.mjs"));
const NATIVE = ["better-sqlite3", "pkcs11js"];
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
  console.error(`bundle: native modules bundled into talos-config-server: ${nativeInside.join(", ")}`);
  process.exit(1);
}
console.log(outfile);
