/**
 * Renders the overlays with the real kustomize (sigs.k8s.io/kustomize/kustomize/v5, built by
 * tests/go/kustomize/build.sh and cached), as a site would: `kustomize build talos-config-server/deploy/overlays/<x>`.
 * With `pins`, the images component is regenerated first — in a copy of the deploy trees, never in the checkout —
 * so a test renders with the digests it is given (a build's, or made-up ones).
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { parseAllDocuments } from "yaml";
import { runSetupScript } from "../harness/setupScript.js";
import { FLEETD_IMAGES, imagesComponent, repoRoot, shippedPins, type ImagePin } from "./images.js";

const run = promisify(execFile);

export const OVERLAYS = ["management", "workload"] as const;
export type Overlay = (typeof OVERLAYS)[number];
/** The folders the overlays read (every plugin's deploy/ and manifests/). */
const TREES = ["talos-config-server", "netbox-script", "spire-plugin", "tink-action"].flatMap((p) => [`${p}/deploy`, `${p}/manifests`]);

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [k: string]: unknown;
}

export async function kustomizeBinary(): Promise<string> {
  return join(await runSetupScript("tests/go/kustomize/build.sh", { needs: "Go >= 1.26 and the Go module proxy" }), "kustomize");
}

/** `kustomize build` of a directory: the YAML text. */
export async function kustomizeBuild(dir: string): Promise<string> {
  const bin = await kustomizeBinary();
  const { stdout } = await run(bin, ["build", dir], { maxBuffer: 64 * 1024 * 1024 });
  return stdout;
}

export function parseObjects(text: string): K8sObject[] {
  return parseAllDocuments(text).map((d, i) => {
    if (d.errors.length > 0) throw new Error(`document ${i}: ${d.errors.map((e) => e.message).join("; ")}`);
    return d.toJS() as K8sObject;
  }).filter((o) => o !== null);
}

/**
 * Render an overlay. `pins`: the fleetd images' pins to render with (pinsFromDigests / pinsFromImagesJson);
 * without, the shipped images component as it is.
 */
export async function renderOverlay(overlay: Overlay, pins?: readonly ImagePin[]): Promise<{ text: string; objects: K8sObject[] }> {
  if (!pins) {
    const text = await kustomizeBuild(join(repoRoot, "talos-config-server/deploy/overlays", overlay));
    return { text, objects: parseObjects(text) };
  }
  const dir = mkdtempSync(join(tmpdir(), "fleetd-deploy-"));
  try {
    for (const t of TREES) cpSync(join(repoRoot, t), join(dir, t), { recursive: true });
    writeFileSync(join(dir, "talos-config-server/deploy/images/kustomization.yaml"), imagesComponent(pins, shippedPins(), "given to the test"));
    const text = await kustomizeBuild(join(dir, "talos-config-server/deploy/overlays", overlay));
    return { text, objects: parseObjects(text) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Digests a test can render with when no build is at hand: sha256 of the image's name (well-formed, not real). */
export function madeUpDigests(): Record<string, string> {
  return Object.fromEntries(FLEETD_IMAGES.map((n) => [n, `sha256:${createHash("sha256").update(n).digest("hex")}`]));
}
