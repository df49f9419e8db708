/**
 * What `pnpm -s images` built: `$FLEETD_CACHE/images/images.json` (default ~/.cache/fleetd/images/images.json),
 * one entry per deployable part. The deploy manifests and the Tinkerbell Template pin images by `digest` from it:
 * the manifest digest a registry holds after `podman push` of the image (computed by pushing to an OCI layout;
 * the same bytes reach any registry, so the digest is the same there — images.it.test.ts checks it on a real one).
 *
 *   {
 *     "schema": 1,
 *     "images": [                                         // one per part, in this order (a list: deploy:images reads it)
 *       {
 *         "part": "tink-action",                          // tink-action | talos-config-server | netbox-script | spire-plugin
 *         "name": "localhost/fleetd-tink-action",          // repository in local storage
 *         "tag": "0.1.0-3f2a…",                           // <version>-<first 16 hex of the inputs' hash>
 *         "ref": "localhost/fleetd-tink-action:0.1.0-3f2a…",
 *         "id": "sha256:…",                               // image ID (the config's digest)
 *         "digest": "sha256:…",                           // manifest digest once pushed (gzip layers)
 *         "sizeBytes": 123456789,                         // uncompressed, as `podman image inspect .Size`
 *         "version": "0.1.0", "revision": "<git commit>[-dirty]", "source": "…",
 *         "base": "localhost/fleetd-base-action:…",
 *         "user": "0:0" | "65532:65532"
 *       }, …
 *     ]
 *   }
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { fleetdCache } from "../harness/podman.js";

export const PART_NAMES = ["tink-action", "talos-config-server", "netbox-script", "spire-plugin"] as const;
export type PartName = (typeof PART_NAMES)[number];

const Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);
export const BuiltImage = z.strictObject({
  part: z.enum(PART_NAMES),
  name: z.string().min(1),
  tag: z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/),
  ref: z.string().min(1),
  id: Digest,
  digest: Digest,
  sizeBytes: z.number().int().positive(),
  version: z.string().min(1),
  revision: z.string().min(1),
  source: z.string().min(1),
  base: z.string().min(1),
  user: z.string().min(1),
});
export type BuiltImage = z.infer<typeof BuiltImage>;

export const BuiltImages = z
  .strictObject({ schema: z.literal(1), images: z.array(BuiltImage) })
  .refine((b) => b.images.length === PART_NAMES.length && PART_NAMES.every((p, i) => b.images[i]?.part === p), `images: one per part, in the order ${PART_NAMES.join(", ")}`);
export type BuiltImages = z.infer<typeof BuiltImages>;

/** The image of one part. */
export function builtImage(b: BuiltImages, part: PartName): BuiltImage {
  return b.images.find((i) => i.part === part) as BuiltImage;
}

export function imagesDir(): string {
  return join(fleetdCache(), "images");
}

export function builtImagesFile(): string {
  return join(imagesDir(), "images.json");
}

/**
 * The lab's stand-ins for the Templates' non-fleetd actions (tests/images/README.md): `wipe` (images.wipe) and
 * `image2disk` (images.image2disk, a fleetd-built equivalent of tinkerbell/actions image2disk). Written by the
 * same build to `lab-images.json` beside images.json (which lists the deployable parts only).
 */
export const LAB_IMAGE_NAMES = ["wipe", "image2disk"] as const;
export type LabImageName = (typeof LAB_IMAGE_NAMES)[number];
export const BuiltLabImage = z.strictObject({
  name: z.enum(LAB_IMAGE_NAMES),
  ref: z.string().min(1),
  id: Digest,
  digest: Digest,
  sizeBytes: z.number().int().positive(),
  base: z.string().min(1),
});
export type BuiltLabImage = z.infer<typeof BuiltLabImage>;
export const BuiltLabImages = z
  .strictObject({ schema: z.literal(1), images: z.array(BuiltLabImage) })
  .refine((b) => b.images.length === LAB_IMAGE_NAMES.length && LAB_IMAGE_NAMES.every((n, i) => b.images[i]?.name === n), `images: one per lab image, in the order ${LAB_IMAGE_NAMES.join(", ")}`);
export type BuiltLabImages = z.infer<typeof BuiltLabImages>;

export function builtLabImagesFile(): string {
  return join(imagesDir(), "lab-images.json");
}

/** lab-images.json, validated; missing: run `pnpm -s images`. */
export function readBuiltLabImages(file = builtLabImagesFile()): BuiltLabImages {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new Error(`${file}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}: run \`pnpm -s images\` (.ci/setup does) first`);
  }
  const r = BuiltLabImages.safeParse(JSON.parse(text));
  if (!r.success) throw new Error(`${file}: ${r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}: run \`pnpm -s images\` again`);
  return r.data;
}

export function builtLabImage(b: BuiltLabImages, name: LabImageName): BuiltLabImage {
  return b.images.find((i) => i.name === name) as BuiltLabImage;
}

/** images.json, validated; a missing or stale-shaped file says to run `pnpm -s images` (never built here). */
export function readBuiltImages(file = builtImagesFile()): BuiltImages {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new Error(`${file}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}: run \`pnpm -s images\` (.ci/setup does) first`);
  }
  const r = BuiltImages.safeParse(JSON.parse(text));
  if (!r.success) throw new Error(`${file}: ${r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}: run \`pnpm -s images\` again`);
  return r.data;
}
