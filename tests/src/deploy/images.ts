/**
 * The overlays' image pins: talos-config-server/deploy/images/kustomization.yaml, a Kustomize Component with one
 * `images:` entry per container image, generated here from the images JSON `pnpm -s images` writes (tag and
 * digest per fleetd image), and the action image the Templates run (kubernetes.management.tinkerbell.images.action
 * in the overlay's two site configurations), rewritten to the same digest.
 *
 *   pnpm -s deploy:images IMAGES.json [--registry HOST/PATH]     (imagesWrite.ts)
 *
 * The SPIRE images are not built by fleetd: their entries are the site's pins and are kept as the file has them.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, parseDocument } from "yaml";
import { z } from "zod";

export const repoRoot = resolve(fileURLToPath(import.meta.url), "../../../..");
export const DEPLOY = join(repoRoot, "talos-config-server/deploy");
export const IMAGES_COMPONENT = join(DEPLOY, "images/kustomization.yaml");
/** The site configurations holding the Templates' action image (kubernetes.management.tinkerbell.images.action). */
export const ACTION_PIN_FILES = [join(DEPLOY, "overlays/management/config/talos-config-server.yaml"), join(DEPLOY, "overlays/management/config/netbox-script.yaml")];

/** fleetd's four images, by the names the bases use (and `pnpm -s images` builds). */
export const FLEETD_IMAGES = ["fleetd-talos-config-server", "fleetd-netbox-script", "fleetd-spire-plugin", "fleetd-tink-action"] as const;
export type FleetdImage = (typeof FLEETD_IMAGES)[number];
/** The site's own pins (third-party images the bases name); regeneration keeps them. */
export const SITE_IMAGES = ["ghcr.io/spiffe/spire-server", "ghcr.io/spiffe/spire-agent"] as const;
export const DEFAULT_REGISTRY = "registry.example.internal/fleetd";

export const Digest = z.string().regex(/^sha256:[0-9a-f]{64}$/, "must be sha256:<64 lowercase hex>");
const Repository = z.string().regex(/^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(\/[a-z0-9]+([._-][a-z0-9]+)*)*$/, "must be an image repository (registry/path, no tag)");

/** One `images:` entry: the name the bases use → repository and digest (a tag is kept as a comment only). */
export interface ImagePin {
  name: string;
  newName: string;
  digest: string;
  tag?: string;
}

/**
 * The images JSON of `pnpm -s images`, read tolerantly: `{ images: [...] }`, a list, or a map keyed by name;
 * each image `{ name?, tag?, digest, repository? | reference? }`. Names are fleetd's (`fleetd-<part>` or `<part>`).
 */
const ImageEntry = z.looseObject({
  name: z.string().min(1).optional(),
  tag: z.string().min(1).optional(),
  digest: Digest,
  repository: z.string().min(1).optional(),
  reference: z.string().min(1).optional(),
});
type ImageEntry = z.infer<typeof ImageEntry>;
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** The entries of the three shapes, each with where it was found (for errors). */
function entriesOf(raw: unknown): [string, unknown][] {
  if (Array.isArray(raw)) return raw.map((e, i) => [`[${i}]`, e]);
  if (isRecord(raw) && Array.isArray(raw["images"])) return (raw["images"] as unknown[]).map((e, i) => [`images[${i}]`, e]);
  if (isRecord(raw)) return Object.entries(raw).map(([name, e]) => [name, isRecord(e) ? { name, ...e } : e]);
  throw new ImagesError("images JSON: expected { images: [...] }, a list, or a map of name to { tag, digest }");
}

export class ImagesError extends Error {
  override readonly name = "ImagesError";
}

const fleetdName = (n: string): FleetdImage | undefined => {
  const base = n.split("/").pop()?.split(/[:@]/)[0] ?? n;
  const full = base.startsWith("fleetd-") ? base : `fleetd-${base}`;
  return (FLEETD_IMAGES as readonly string[]).includes(full) ? (full as FleetdImage) : undefined;
};

/** The repository of an entry: `repository`, else `reference` without tag/digest, else registry/name. */
function repositoryOf(e: ImageEntry, name: FleetdImage, registry: string): string {
  const ref = e.repository ?? e.reference?.replace(/@sha256:[0-9a-f]{64}$/, "").replace(/:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/, "");
  const repo = ref ?? `${registry}/${name}`;
  const r = Repository.safeParse(repo);
  if (!r.success) throw new ImagesError(`${name}: "${repo}" ${r.error.issues[0]?.message ?? "is not a repository"}`);
  return repo;
}

/** The fleetd pins of an images JSON text; every one of the four images must be there. */
export function pinsFromImagesJson(text: string, registry: string = DEFAULT_REGISTRY): ImagePin[] {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new ImagesError(`images JSON: ${(e as Error).message}`);
  }
  const pins = new Map<FleetdImage, ImagePin>();
  for (const [where, entry] of entriesOf(raw)) {
    const r = ImageEntry.safeParse(entry);
    if (!r.success) throw new ImagesError(`images JSON ${where}: ${r.error.issues.map((i) => `${i.path.join(".") || "(entry)"}: ${i.message}`).join("; ")}`);
    const e = r.data;
    const name = fleetdName(e.name ?? e.repository ?? e.reference ?? "");
    if (!name) continue; // not one of fleetd's (a build may list helpers too)
    pins.set(name, { name, newName: repositoryOf(e, name, registry), digest: e.digest, ...(e.tag ? { tag: e.tag } : {}) });
  }
  const missing = FLEETD_IMAGES.filter((n) => !pins.has(n));
  if (missing.length > 0) throw new ImagesError(`images JSON: no digest for ${missing.join(", ")}`);
  return FLEETD_IMAGES.map((n) => pins.get(n) as ImagePin);
}

/** Pins from a map name → digest (a test's, or the merge's), under `registry`. */
export function pinsFromDigests(digests: Readonly<Record<string, string>>, registry: string = DEFAULT_REGISTRY): ImagePin[] {
  return FLEETD_IMAGES.map((name) => {
    const d = digests[name];
    const r = Digest.safeParse(d);
    if (!r.success) throw new ImagesError(`${name}: digest ${JSON.stringify(d)} ${r.error.issues[0]?.message ?? ""}`);
    return { name, newName: `${registry}/${name}`, digest: r.data };
  });
}

const ComponentFile = z.looseObject({
  kind: z.literal("Component"),
  images: z.array(z.strictObject({ name: z.string().min(1), newName: z.string().min(1).optional(), digest: Digest })),
});

/** The pins of a component file's text (every entry must carry a digest). */
export function readImagesComponent(text: string): ImagePin[] {
  const r = ComponentFile.safeParse(parse(text));
  if (!r.success) throw new ImagesError(`images component: ${r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  return r.data.images.map((i) => ({ name: i.name, newName: i.newName ?? i.name, digest: i.digest }));
}

/**
 * The component's text: the fleetd pins given, then the site's pins taken from `sitePins` (the current file's),
 * in a fixed order. `source` says where the digests came from (a comment).
 */
export function imagesComponent(fleetd: readonly ImagePin[], sitePins: readonly ImagePin[], source: string): string {
  const site = SITE_IMAGES.map((n) => {
    const p = sitePins.find((x) => x.name === n);
    if (!p) throw new ImagesError(`images component: no pin for the site image ${n}`);
    return p;
  });
  const entry = (p: ImagePin, comment?: string) =>
    `${comment ? `  # ${comment}\n` : ""}  - name: ${p.name}\n    newName: ${p.newName}\n    digest: ${p.digest}\n`;
  return [
    "# Generated by `pnpm -s deploy:images` (tests/src/deploy/images.ts) from the images JSON `pnpm -s images` writes:",
    "# edit that, not this file. Every container image of the overlays, pinned by digest. The four fleetd images",
    "# carry the digests of the build named below; the two SPIRE images are the site's pins (kept as they are here",
    "# when the file is regenerated).",
    `# fleetd images: ${source}`,
    "apiVersion: kustomize.config.k8s.io/v1alpha1",
    "kind: Component",
    "images:",
  ].join("\n") + "\n" + [
    ...fleetd.map((p) => entry(p, p.tag ? `tag ${p.tag}` : undefined)),
    ...site.map((p, i) => entry(p, i === 0 ? "the site's pins (SPIRE v1.13.3, the release tests/go/spire builds): replace with your registry's digests" : undefined)),
  ].join("");
}

/** `name@digest` of a pin (what the Templates' action image and the rendered manifests carry). */
export const pinnedReference = (p: ImagePin): string => `${p.newName}@${p.digest}`;

const ACTION_PATH = ["kubernetes", "management", "tinkerbell", "images", "action"];

/**
 * A site configuration's text with kubernetes.management.tinkerbell.images.action replaced, every other byte
 * kept: the one `action:` line is rewritten, and the result is parsed to prove it was that key.
 */
export function withActionPin(configText: string, reference: string): string {
  const lines = [...configText.matchAll(/^(\s+action:\s+)(\S+)(.*)$/gm)];
  if (lines.length !== 1) throw new ImagesError(`the site configuration needs exactly one "action:" line (${ACTION_PATH.join(".")}), found ${lines.length}`);
  const out = configText.replace(/^(\s+action:\s+)(\S+)(.*)$/m, (_m, pre: string, _old: string, post: string) => `${pre}${reference}${post}`);
  if (parseDocument(out).getIn(ACTION_PATH) !== reference) throw new ImagesError(`the "action:" line is not ${ACTION_PATH.join(".")}`);
  return out;
}

/** The images component as shipped (its pins). */
export function shippedPins(): ImagePin[] {
  return readImagesComponent(readFileSync(IMAGES_COMPONENT, "utf8"));
}
