// The one bundler of fleetd's deployable parts: each part's compiled entry point and everything it imports
// (@fleetd/verify, @fleetd/platform, its npm dependencies) as one ES module for its image. A part's
// `scripts/bundle.mjs` calls `bundlePart` with its name and esbuild's `build` (esbuild is each part's own dev
// dependency). Native addons cannot be bundled: the ones a part may load (PARTS[part].natives) stay external and
// its image build copies them, built for the pinned Node.js 24, into node_modules beside the bundle; any other
// native module the bundle would still import, or one bundled into it, fails the build.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** Every native addon in the workspace's dependencies. */
const NATIVE = ["better-sqlite3", "pkcs11js"];

/** The parts: folder, entry point (compiled), bundle name, the native addons the part may load at run time. */
export const PARTS = {
  "tink-action": { entry: "dist/cli.js", out: "fleetd-tink-action.mjs", natives: [] },
  "talos-config-server": { entry: "dist/main.js", out: "talos-config-server.mjs", natives: ["better-sqlite3", "pkcs11js"] },
  "netbox-script": { entry: "dist/main.js", out: "netbox-script.mjs", natives: ["better-sqlite3"] },
  "spire-plugin": { entry: "dist/main.js", out: "spire-plugin.mjs", natives: [] },
};

/**
 * esbuild's options for one ES module that the pinned Node.js 24 runs with no node_modules beside it (every part's
 * bundle, and the lab OS's programs under tests/src/vm/).
 */
export const ESM_NODE_BUNDLE = Object.freeze({
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node24",
  // CommonJS dependencies (pino, yaml, …) call require() for Node's modules; an ES module bundle has to provide it.
  banner: { js: 'import { createRequire as __fleetdCreateRequire } from "node:module"; const require = __fleetdCreateRequire(import.meta.url);' },
  legalComments: "none",
  logLevel: "warning",
});

/** Bundles `part` into `outfile` (default <part>/dist/bundle/<out>; run after `tsc -b`); prints and returns the path. */
export async function bundlePart(build, part, outfile) {
  const p = PARTS[part];
  if (!p) throw new Error(`bundle: no part ${part} (${Object.keys(PARTS).join(", ")})`);
  const pkg = join(root, part);
  const out = resolve(outfile ?? join(pkg, "dist/bundle", p.out));
  const result = await build({
    ...ESM_NODE_BUNDLE,
    entryPoints: [join(pkg, p.entry)],
    outfile: out,
    external: NATIVE,
    metafile: true,
  });
  // External modules are never among the inputs: what the bundle would still import at run time is in its outputs.
  const isNative = (path) => NATIVE.some((n) => path === n || path.startsWith(`${n}/`));
  const reached = Object.values(result.metafile.outputs)
    .flatMap((o) => o.imports)
    .filter((i) => i.external && isNative(i.path) && !p.natives.some((n) => i.path === n || i.path.startsWith(`${n}/`)));
  const inside = Object.keys(result.metafile.inputs).filter((i) => /\.node$|node-gyp-build|prebuild/.test(i));
  if (reached.length || inside.length) {
    console.error(`bundle: ${part}: native modules ${[...reached.map((i) => `reached: ${i.path}`), ...inside.map((i) => `bundled: ${i}`)].join(", ")} (it may load only: ${p.natives.join(", ") || "none"})`);
    process.exit(1);
  }
  console.log(out);
  return out;
}
