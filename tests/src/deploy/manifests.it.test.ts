/**
 * The deployable fleetd against the real kube-apiserver 1.36 (tests/src/harness/kube.ts): both overlays, rendered
 * by the real kustomize with the digests given, go through server-side apply — a server-side dry run of every
 * object first (nothing stored), then the real apply — and every object is accepted and reads back as sent; a
 * second apply changes nothing. One API server stands for both clusters (a site may run both on one: the site
 * configuration allows it), so the overlays must also agree where they meet (the fleetd Namespace, the
 * ServiceAccount fleetd-netbox-script).
 *
 * Digests: those of the images this checkout built (`pnpm -s images`, run by .ci/setup: images.json in the
 * fleetd cache), or of the images JSON FLEETD_IMAGES_JSON names. Tinkerbell's namespace is Tinkerbell's and
 * made here first, as installing Tinkerbell would; no CRD is needed (RBAC may name resources not yet served).
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { KubeConfig, KubernetesObjectApi, PatchStrategy, type KubernetesObject } from "@kubernetes/client-node";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { builtImagesFile } from "../images/built.js";
import { pinsFromImagesJson, type ImagePin } from "./images.js";
import { renderOverlay, type K8sObject, type Overlay } from "./render.js";

const FIELD_MANAGER = "fleetd-deploy";
let cp: ControlPlane;
let api: KubernetesObjectApi;

before(async () => {
  // --allow-privileged: as every cluster that runs privileged pods (Talos's API server sets it); the node agent's
  // DaemonSet opens the TPM from privileged containers (tink-action/manifests/renew-daemonset.yaml says why)
  cp = await startControlPlane({ apiserverArgs: ["--allow-privileged=true"] });
  const kc = new KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  api = KubernetesObjectApi.makeApiClient(kc);
});
after(async () => {
  await cp?.stop();
});

function givenPins(): { pins: ImagePin[]; from: string } {
  const file = process.env["FLEETD_IMAGES_JSON"] ?? builtImagesFile();
  return { pins: pinsFromImagesJson(readFileSync(file, "utf8")), from: file };
}

const ref = (o: K8sObject) => ({ apiVersion: o.apiVersion, kind: o.kind, metadata: { name: o.metadata.name, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}) } });
const id = (o: K8sObject) => `${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ""}${o.metadata.name}`;

/** Server-side apply of one object (dry run or real); the API's answer. */
async function apply(o: K8sObject, dryRun: boolean, manager: string): Promise<KubernetesObject> {
  try {
    return await api.patch(o as KubernetesObject, undefined, dryRun ? "All" : undefined, manager, true, PatchStrategy.ServerSideApply);
  } catch (e) {
    const body = (e as { body?: unknown }).body;
    throw new Error(`${id(o)} ${dryRun ? "(dry run) " : ""}refused: ${typeof body === "string" ? body : JSON.stringify(body ?? (e as Error).message)}`);
  }
}

async function exists(o: K8sObject): Promise<boolean> {
  try {
    await api.read(ref(o));
    return true;
  } catch (e) {
    if ((e as { code?: number }).code === 404) return false;
    throw e;
  }
}

/** The fields of `want` as they read back (what the apply sent is what is stored, modulo defaults). */
function assertSubset(got: unknown, want: unknown, path: string): void {
  if (Array.isArray(want)) {
    assert.ok(Array.isArray(got) && got.length === want.length, `${path}: a list of ${want.length}`);
    want.forEach((w, i) => assertSubset((got as unknown[])[i], w, `${path}[${i}]`));
  } else if (want && typeof want === "object") {
    assert.ok(got && typeof got === "object", `${path}: an object`);
    for (const [k, v] of Object.entries(want)) assertSubset((got as Record<string, unknown>)[k], v, `${path}.${k}`);
  } else {
    // the API server writes quantities and ports its own way ("0.1" vs "100m" is not used here)
    assert.equal(String(got), String(want), path);
  }
}

test("both overlays: server-side dry run, then server-side apply; every object accepted and stored as sent; a second apply changes nothing", { timeout: 600_000 }, async () => {
  const { pins, from } = givenPins();
  process.stdout.write(`# digests: ${from}\n`);
  await apply({ apiVersion: "v1", kind: "Namespace", metadata: { name: "tinkerbell" } }, false, "tinkerbell-install");
  for (const overlay of ["management", "workload"] as Overlay[]) {
    const manager = `${FIELD_MANAGER}-${overlay}`;
    const { objects } = await renderOverlay(overlay, pins);
    // every fleetd container runs exactly the image this checkout built (by digest)
    const images = JSON.stringify(objects).match(/"image":"[^"]+"/g) ?? [];
    const ours = images.map((x) => x.slice(9, -1)).filter((x) => /\/fleetd-[a-z-]+@/.test(x));
    assert.ok(ours.length > 0, `${overlay}: no fleetd image rendered`);
    for (const image of ours) {
      const pin = pins.find((p) => image.startsWith(`${p.newName}@`));
      assert.ok(pin && image === `${pin.newName}@${pin.digest}`, `${overlay}: ${image} is not an image this checkout built (${from})`);
    }
    // Namespaces first: a dry run of an object in a namespace that does not exist yet is refused (NotFound)
    const namespaces = objects.filter((o) => o.kind === "Namespace");
    const rest = objects.filter((o) => o.kind !== "Namespace");
    let t = Date.now();
    for (const n of namespaces) await apply(n, true, manager);
    for (const n of namespaces) await apply(n, false, manager);
    const nsMs = Date.now() - t;

    t = Date.now();
    for (const o of rest) await apply(o, true, manager);
    const dryMs = Date.now() - t;
    const stored = [];
    for (const o of rest) if (await exists(o)) stored.push(id(o));
    // the workload overlay meets the management one only where both make the same object
    const shared = overlay === "workload" ? ["ServiceAccount fleetd/fleetd-netbox-script"] : [];
    assert.deepEqual(stored, shared, `${overlay}: a dry run stores nothing`);

    t = Date.now();
    const answers = [];
    for (const o of rest) answers.push(await apply(o, false, manager));
    const applyMs = Date.now() - t;
    for (const o of objects) {
      const got = await api.read(ref(o));
      const { metadata, ...body } = o;
      assertSubset(got, { ...body, metadata: { name: metadata.name, labels: metadata.labels ?? {} } }, id(o));
    }

    // again: server-side apply of the same objects is a no-op — no generation moves (controllers write status,
    // so for objects with a generation the resourceVersion may; for the others the resourceVersion read just before)
    assert.equal(answers.length, rest.length);
    for (const o of rest) {
      const before = await api.read(ref(o));
      const a = await apply(o, false, manager);
      const mark = (x: KubernetesObject) => x.metadata?.generation ?? x.metadata?.resourceVersion;
      assert.equal(mark(a), mark(before), `${id(o)}: a second apply changes nothing`);
    }

    process.stdout.write(`# ${overlay}: ${objects.length} objects (${namespaces.length} Namespaces); namespaces ${nsMs} ms, dry run ${rest.length} objects ${dryMs} ms, apply ${applyMs} ms\n`);
  }
});
