// Bundles the compiled server (dist/main.js and what it imports from @fleetd/verify and @fleetd/platform, express,
// the Kubernetes client, pino, zod, yaml) into one ES module for the image (talos-config-server/Containerfile).
// The native addons better-sqlite3 (the state store) and pkcs11js (the CA signer) cannot be bundled: they stay
// external and the image build copies them, built for the pinned Node.js 24, into node_modules beside the bundle.
// Any other native module reached is an error.
// The bundler is shared by every part (shared/scripts/bundle.mjs: the natives each may load, the checks).
//   node scripts/bundle.mjs [OUTFILE]     default dist/bundle/talos-config-server.mjs (run after `tsc -b`)
import { build } from "esbuild";
import { bundlePart } from "../../shared/scripts/bundle.mjs";

await bundlePart(build, "talos-config-server", process.argv[2]);
