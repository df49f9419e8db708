// Bundles the compiled handler (dist/main.js and what it imports from @fleetd/verify and @fleetd/platform, express,
// the Kubernetes client, pino, zod, yaml) into one ES module for the image (netbox-script/Containerfile).
// The native addon better-sqlite3 (the queue and state store) cannot be bundled: it stays
// external and the image build copies it, built for the pinned Node.js 24, into node_modules beside the bundle.
// Any other native module reached is an error.
// The bundler is shared by every part (shared/scripts/bundle.mjs: the natives each may load, the checks).
//   node scripts/bundle.mjs [OUTFILE]     default dist/bundle/netbox-script.mjs (run after `tsc -b`)
import { build } from "esbuild";
import { bundlePart } from "../../shared/scripts/bundle.mjs";

await bundlePart(build, "netbox-script", process.argv[2]);
