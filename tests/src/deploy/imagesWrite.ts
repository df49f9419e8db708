/**
 * `pnpm -s deploy:images IMAGES.json [--registry HOST/PATH]`: pins the overlays to the images a build made.
 * Rewrites talos-config-server/deploy/images/kustomization.yaml (the four fleetd images; the SPIRE pins kept) and
 * the Templates' action image in the management overlay's site configurations. `--registry`: where the images
 * are pushed, for entries of the JSON that name no repository (default registry.example.internal/fleetd).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { ACTION_PIN_FILES, DEFAULT_REGISTRY, IMAGES_COMPONENT, imagesComponent, ImagesError, pinnedReference, pinsFromImagesJson, shippedPins, withActionPin } from "./images.js";

function main(argv: string[]): void {
  const args = [...argv];
  let registry = DEFAULT_REGISTRY;
  const i = args.indexOf("--registry");
  if (i >= 0) {
    const v = args[i + 1];
    if (!v) throw new ImagesError("--registry needs a value");
    registry = v.replace(/\/+$/, "");
    args.splice(i, 2);
  }
  const [file, ...rest] = args;
  if (!file || rest.length > 0) throw new ImagesError("usage: pnpm -s deploy:images IMAGES.json [--registry HOST/PATH]");
  const pins = pinsFromImagesJson(readFileSync(file, "utf8"), registry);
  writeFileSync(IMAGES_COMPONENT, imagesComponent(pins, shippedPins(), `from ${file.split("/").pop() ?? file}`));
  const action = pins.find((p) => p.name === "fleetd-tink-action");
  if (!action) throw new ImagesError("no fleetd-tink-action pin");
  for (const f of ACTION_PIN_FILES) writeFileSync(f, withActionPin(readFileSync(f, "utf8"), pinnedReference(action)));
  for (const p of pins) process.stdout.write(`${p.name}\t${pinnedReference(p)}\n`);
}

try {
  main(process.argv.slice(2));
} catch (e) {
  process.stderr.write(`deploy:images: ${(e as Error).message}\n`);
  process.exit(2);
}
