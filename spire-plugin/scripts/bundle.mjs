// Bundles the compiled sync (dist/main.js and what it imports from @fleetd/platform, the SPIRE gRPC client, the
// Kubernetes client, pino, zod, yaml) into one ES module for the image (spire-plugin/Containerfile): no
// node_modules, no native addons at run time (the modules of shared that need better-sqlite3 or pkcs11js are not
// reachable from the sync; the bundle fails if they ever are).
// The bundler is shared by every part (shared/scripts/bundle.mjs: the natives each may load, the checks).
//   node scripts/bundle.mjs [OUTFILE]     default dist/bundle/spire-plugin.mjs (run after `tsc -b`)
import { build } from "esbuild";
import { bundlePart } from "../../shared/scripts/bundle.mjs";

await bundlePart(build, "spire-plugin", process.argv[2]);
