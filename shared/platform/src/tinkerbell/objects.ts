/**
 * Namespaced custom objects through client-node's CustomObjectsApi, every answer judged by zod. Updates are
 * JSON merge patches (CRDs take no strategic merge patch); deletes carry a UID precondition so a recreated
 * object of the same name is never deleted by mistake.
 */
import * as k8s from "@kubernetes/client-node";
import type { z } from "zod";
import { isNotFound, type Kube } from "../kube/client.js";
import { AnyObject, ObjectList, type ApiResource } from "./api.js";
import { TinkerbellError } from "./errors.js";

const mergePatch = (): k8s.ConfigurationOptions => k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch);

function judge<S extends z.ZodType>(schema: S, raw: unknown, what: string): z.infer<S> {
  const r = schema.safeParse(raw);
  if (!r.success) throw new TinkerbellError("bad-response", `${what}: unexpected answer from the API server: ${r.error.issues.slice(0, 3).map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  return r.data;
}

export class Objects {
  constructor(
    private readonly kube: Kube,
    readonly namespace: string,
  ) {}

  private base(r: ApiResource) {
    return { group: r.group, version: r.version, namespace: this.namespace, plural: r.plural };
  }

  async get<S extends z.ZodType>(r: ApiResource, name: string, schema: S): Promise<z.infer<S> | undefined> {
    try {
      const raw: unknown = await this.kube.custom.getNamespacedCustomObject({ ...this.base(r), name });
      return judge(schema, raw, `${r.kind} ${this.namespace}/${name}`);
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  async list<S extends z.ZodType>(r: ApiResource, labelSelector: string, schema: S): Promise<z.infer<S>[]> {
    const out: z.infer<S>[] = [];
    let cont: string | undefined;
    for (let page = 0; page < 1000; page++) {
      const raw: unknown = await this.kube.custom.listNamespacedCustomObject({ ...this.base(r), labelSelector, limit: 500, ...(cont ? { _continue: cont } : {}) });
      const list = judge(ObjectList, raw, `list ${r.plural} in ${this.namespace}`);
      for (const item of list.items) out.push(judge(schema, item, `${r.kind} ${this.namespace}/${item.metadata.name}`));
      cont = list.metadata?.continue || undefined;
      if (!cont) return out;
    }
    throw new TinkerbellError("bad-response", `list ${r.plural}: more than 1000 pages`);
  }

  async create(r: ApiResource, body: object): Promise<AnyObject> {
    const raw: unknown = await this.kube.custom.createNamespacedCustomObject({ ...this.base(r), body });
    return judge(AnyObject, raw, `create ${r.kind}`);
  }

  async mergePatch(r: ApiResource, name: string, patch: object): Promise<AnyObject> {
    const raw: unknown = await this.kube.custom.patchNamespacedCustomObject({ ...this.base(r), name, body: patch }, mergePatch());
    return judge(AnyObject, raw, `patch ${r.kind} ${this.namespace}/${name}`);
  }

  /** Deletes exactly the object with this UID; a missing object counts as deleted. */
  async delete(r: ApiResource, name: string, uid: string | undefined): Promise<void> {
    try {
      await this.kube.custom.deleteNamespacedCustomObject({
        ...this.base(r),
        name,
        propagationPolicy: "Background",
        ...(uid ? { body: { preconditions: { uid } } } : {}),
      });
    } catch (e) {
      if (isNotFound(e)) return;
      throw e;
    }
  }
}
