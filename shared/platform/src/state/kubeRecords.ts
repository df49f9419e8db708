/**
 * The object layer of the Kubernetes-held state (kubeStore.ts, kubeHandlerStore.ts): every record is one Secret
 * in one namespace, named `fleetd-<kind>-<sha256(key) hex>`, labelled fleetd's and with its kind, the record JSON
 * under `data.record` (checked with zod on the way back in). "First one wins" comes from the API server alone:
 * create-if-absent (409 AlreadyExists) and compare-and-swap on resourceVersion (409 Conflict), re-read and
 * re-decided in `casLoop`.
 */
import { createHash } from "node:crypto";
import type { V1Secret } from "@kubernetes/client-node";
import { z } from "zod";
import { isConflict, isNotFound, type Kube } from "../kube/client.js";
import { OWNER_LABELS } from "../fleet/ownership.js";

export const MANAGED_BY = OWNER_LABELS;
export const KIND_LABEL = "fleetd.io/kind";
/** Well under a Secret's 1 MiB (the API server's limit includes metadata and base64 of the data). */
export const MAX_RECORD_BYTES = 512 * 1024;
/** CAS retries before an operation gives up with an error (each retry re-reads; contention is a handful of replicas). */
const MAX_ATTEMPTS = 32;

/**
 * The fields of a record replicas take turns on (handler jobs, outbox items): the attempts so far, when the next
 * may start, the last error, and which replica claimed it when (a stale claim is taken over).
 */
export const CLAIMABLE_FIELDS = {
  attempts: z.number().int().min(0),
  notBefore: z.number(),
  lastError: z.string().nullable(),
  claimedBy: z.string().nullable(),
  claimedAt: z.number().nullable(),
};

export class KubeStoreError extends Error {
  constructor(
    readonly code: "too-large" | "exists" | "contention" | "corrupt" | "duplicate-token",
    message: string,
  ) {
    super(message);
    this.name = "KubeStoreError";
  }
}

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");
export const objectName = (kind: string, key: string): string => `fleetd-${kind}-${sha256(key)}`;

export interface Found<T> {
  record: T;
  resourceVersion: string;
}

/** Records of one namespace, as Secrets of type `secretType`. */
export class SecretRecords {
  constructor(
    private readonly kube: Kube,
    private readonly namespace: string,
    private readonly secretType: string,
  ) {}

  private body(kind: string, key: string, record: unknown, labels: Record<string, string>, resourceVersion?: string): V1Secret {
    const json = JSON.stringify(record);
    const bytes = Buffer.byteLength(json, "utf8");
    if (bytes > MAX_RECORD_BYTES) throw new KubeStoreError("too-large", `${kind} record of ${bytes} bytes exceeds ${MAX_RECORD_BYTES} (a Secret holds at most 1 MiB)`);
    return {
      apiVersion: "v1",
      kind: "Secret",
      type: this.secretType,
      metadata: {
        name: objectName(kind, key),
        namespace: this.namespace,
        labels: { ...MANAGED_BY, [KIND_LABEL]: kind, ...labels },
        ...(resourceVersion ? { resourceVersion } : {}),
      },
      data: { record: Buffer.from(json, "utf8").toString("base64") },
    };
  }

  private decode<T>(schema: z.ZodType<T>, s: V1Secret): Found<T> {
    const name = s.metadata?.name ?? "?";
    const raw = s.data?.["record"];
    const rv = s.metadata?.resourceVersion;
    if (raw === undefined || rv === undefined) throw new KubeStoreError("corrupt", `Secret ${this.namespace}/${name} has no record`);
    let json: unknown;
    try {
      json = JSON.parse(Buffer.from(raw, "base64").toString("utf8"));
    } catch {
      throw new KubeStoreError("corrupt", `Secret ${this.namespace}/${name}: record is not JSON`);
    }
    const r = schema.safeParse(json);
    if (!r.success) throw new KubeStoreError("corrupt", `Secret ${this.namespace}/${name}: ${r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
    return { record: r.data, resourceVersion: rv };
  }

  async read<T>(kind: string, key: string, schema: z.ZodType<T>): Promise<Found<T> | undefined> {
    try {
      return this.decode(schema, await this.kube.core.readNamespacedSecret({ name: objectName(kind, key), namespace: this.namespace }));
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  /** Create-if-absent: false when the object exists (409 AlreadyExists). */
  async create(kind: string, key: string, record: unknown, labels: Record<string, string> = {}): Promise<boolean> {
    try {
      await this.kube.core.createNamespacedSecret({ namespace: this.namespace, body: this.body(kind, key, record, labels) });
      return true;
    } catch (e) {
      if (isConflict(e)) return false;
      throw e;
    }
  }

  /** Compare-and-swap on resourceVersion: false when another writer got there first (409) or it is gone (404). */
  async replace(kind: string, key: string, record: unknown, resourceVersion: string, labels: Record<string, string> = {}): Promise<boolean> {
    try {
      await this.kube.core.replaceNamespacedSecret({ name: objectName(kind, key), namespace: this.namespace, body: this.body(kind, key, record, labels, resourceVersion) });
      return true;
    } catch (e) {
      if (isConflict(e) || isNotFound(e)) return false;
      throw e;
    }
  }

  /** Delete; with a resourceVersion, only that version (false on 409 or 404). */
  async remove(kind: string, key: string, resourceVersion?: string): Promise<boolean> {
    return this.removeByName(objectName(kind, key), resourceVersion);
  }

  async removeByName(name: string, resourceVersion?: string): Promise<boolean> {
    try {
      await this.kube.core.deleteNamespacedSecret({
        name,
        namespace: this.namespace,
        ...(resourceVersion ? { body: { preconditions: { resourceVersion } } } : {}),
      });
      return true;
    } catch (e) {
      if (isConflict(e) || isNotFound(e)) return false;
      throw e;
    }
  }

  async list<T>(kind: string, schema: z.ZodType<T>, extra: Record<string, string> = {}): Promise<(Found<T> & { name: string })[]> {
    const selector = Object.entries({ ...MANAGED_BY, [KIND_LABEL]: kind, ...extra })
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
    const out: (Found<T> & { name: string })[] = [];
    let cont: string | undefined;
    do {
      const page = await this.kube.core.listNamespacedSecret({ namespace: this.namespace, labelSelector: selector, limit: 500, ...(cont ? { _continue: cont } : {}) });
      for (const s of page.items) out.push({ ...this.decode(schema, s), name: s.metadata?.name ?? "" });
      cont = page.metadata?._continue || undefined;
    } while (cont);
    return out;
  }

  /** Re-read and re-decide until a CAS lands; `step` returns the result, or `retry` after a lost CAS. */
  async casLoop<R>(what: string, step: () => Promise<{ done: R } | "retry">): Promise<R> {
    for (let i = 0; i < MAX_ATTEMPTS; i++) {
      const r = await step();
      if (r !== "retry") return r.done;
      await new Promise((res) => setTimeout(res, Math.floor(Math.random() * (5 + i * 5))));
    }
    throw new KubeStoreError("contention", `${what}: gave up after ${MAX_ATTEMPTS} conflicting updates`);
  }
}
