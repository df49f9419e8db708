// Bundles the compiled action (dist/cli.js and what it imports from @fleetd/verify and @fleetd/platform, zod, pino) into one ES
// module for the image: no node_modules, no native addons at run time (the server-side modules of shared that
// need better-sqlite3 or pkcs11js are not reachable from the action's commands).
// The bundler is shared by every part (shared/scripts/bundle.mjs: the natives each may load, the checks).
//   node scripts/bundle.mjs [OUTFILE]     default dist/bundle/fleetd-tink-action.mjs (run after `tsc -b`)
import { build } from "esbuild";
import { bundlePart } from "../../shared/scripts/bundle.mjs";

await bundlePart(build, "tink-action", process.argv[2]);
