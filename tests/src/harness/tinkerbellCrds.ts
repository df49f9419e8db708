/**
 * Tinkerbell's real v1alpha1 CRDs (tinkerbell.org: hardware, templates, workflows, workflowrulesets;
 * bmc.tinkerbell.org: machines, jobs, tasks) from the Go module github.com/tinkerbell/tinkerbell at the pinned
 * release, fetched through the Go module proxy into the module cache — never copied into this repository — and
 * installed into a test control plane (created, then waited for until Established).
 */
import * as https from "node:https";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as k8s from "@kubernetes/client-node";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import type { ControlPlane } from "./kube.js";
import { sleep } from "./process.js";
import { tinkerbellModuleDir } from "./tinkerbell.js";

/** The version tests/go/tinkerbell-bin/go.mod pins (the built program and these CRDs come from it). */
export const TINKERBELL_VERSION = "v0.25.0";

/** POST a JSON body with the kubeconfig's credentials; the HTTP status (and the body on errors, thrown). */
async function postRaw(kc: k8s.KubeConfig, path: string, body: unknown): Promise<number> {
  const server = kc.getCurrentCluster()?.server;
  if (!server) throw new Error("kubeconfig has no current cluster");
  const url = new URL(path, server);
  const opts: https.RequestOptions = { method: "POST", host: url.hostname, port: url.port, path: url.pathname, headers: { "content-type": "application/json" }, timeout: 30_000 };
  await kc.applyToHTTPSOptions(opts);
  return new Promise((resolve, reject) => {
    const req = https.request(opts, (res) => {
      let text = "";
      res.on("data", (b: Buffer) => (text += b.toString("utf8")));
      res.on("end", () => (res.statusCode === 201 || res.statusCode === 409 ? resolve(res.statusCode) : reject(new Error(`POST ${path}: HTTP ${res.statusCode}: ${text.slice(0, 2000)}`))));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

/** The v1alpha1 CRD files in the pinned module (tests/go/tinkerbell-bin/go.mod) in the Go module cache. */
export async function tinkerbellCrdFiles(): Promise<string[]> {
  const base = join(await tinkerbellModuleDir(), "crd/bases/v1alpha1");
  return readdirSync(base).filter((f) => f.endsWith(".yaml")).sort().map((f) => join(base, f));
}

const Crd = z.object({ kind: z.literal("CustomResourceDefinition"), metadata: z.object({ name: z.string() }).passthrough() }).passthrough();

/** Creates every v1alpha1 CRD and waits until each is Established; returns their names. */
export async function installTinkerbellCrds(cp: Pick<ControlPlane, "kubeconfig">): Promise<string[]> {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(cp.kubeconfig);
  const api = kc.makeApiClient(k8s.ApiextensionsV1Api);
  const names: string[] = [];
  for (const file of await tinkerbellCrdFiles()) {
    const crd = Crd.parse(parseYaml(readFileSync(file, "utf8")));
    // Raw JSON, not client-node's typed createCustomResourceDefinition: its serializer maps JSONSchemaProps
    // fields by their TypeScript names (`_default`, `_enum`) and would silently drop `default` and `enum`.
    const status = await postRaw(kc, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd);
    if (status !== 201 && status !== 409) throw new Error(`creating CRD ${crd.metadata.name}: HTTP ${status}`);
    names.push(crd.metadata.name);
  }
  const deadline = Date.now() + 60_000;
  for (const name of names) {
    for (;;) {
      const c = await api.readCustomResourceDefinition({ name });
      if (c.status?.conditions?.some((x) => x.type === "Established" && x.status === "True")) break;
      if (Date.now() > deadline) throw new Error(`CRD ${name} not Established within 60 s`);
      await sleep(200);
    }
  }
  // Each resource's storage (re)initializes after its CRD is established (429 "storage is (re)initializing"):
  // wait until every plural can be listed.
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  for (const name of names) {
    const [plural, ...groupParts] = name.split(".");
    const group = groupParts.join(".");
    for (;;) {
      try {
        await custom.listClusterCustomObject({ group, version: "v1alpha1", plural: plural as string });
        break;
      } catch (e) {
        if (Date.now() > deadline) throw new Error(`${name} not served: ${(e as Error).message}`);
        await sleep(200);
      }
    }
  }
  return names;
}
