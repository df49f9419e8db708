/**
 * Where `spire-nodes.json` (and the sync's status) live: a file or a ConfigMap — the site chooses. Both replace
 * the whole document atomically, so a reader sees the old bytes or the new, never a mix:
 *  - file: write a temp file in the same directory, fsync it, rename it over the target, fsync the directory;
 *  - ConfigMap: a replace carrying the resourceVersion read (409: someone wrote in between — read and retry),
 *    a create when absent. A ConfigMap holds at most 1 MiB: a document over 900 KiB is stored gzip-compressed
 *    in `binaryData["<key>.gz"]` (10,000 nodes compress to about 150 KB).
 * Watching: the file's directory (fs.watch; a rename replaces the inode) or the ConfigMap (a Kubernetes watch on
 * its name). Watches are hints — callers also poll on an interval.
 */
import { mkdirSync, readFileSync, statSync, watch, type FSWatcher } from "node:fs";
import { basename, dirname } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import * as k8s from "@kubernetes/client-node";
import { z } from "zod";
import { isConflict, isNotFound, loadKube, type Kube } from "../kube/client.js";
import { OWNER_LABELS } from "../fleet/ownership.js";
import { writeFileAtomic } from "../state/privateFiles.js";

export interface StoredDocument {
  bytes: Uint8Array;
  /** Changes whenever the document does (file: mtime+size+inode; ConfigMap: resourceVersion). */
  version: string;
}

export interface DocumentStore {
  /** e.g. `file /var/lib/fleetd/spire-nodes.json`, `ConfigMap fleetd/spire-nodes key spire-nodes.json`. */
  readonly describe: string;
  /** Undefined when absent. Throws DocumentTooLarge over `maxBytes`, before reading it all where it can. */
  read(maxBytes: number): Promise<StoredDocument | undefined>;
  /** Replace atomically; returns false when the stored bytes were already these (nothing written). */
  write(bytes: Uint8Array): Promise<boolean>;
  /** Calls `onChange` (a hint) when the document may have changed; returns the stop function. */
  watch(onChange: () => void, onError?: (e: unknown) => void): () => void;
}

export class DocumentTooLarge extends Error {
  override readonly name = "DocumentTooLarge";
  constructor(
    readonly size: number,
    readonly limit: number,
    where: string,
  ) {
    super(`${where}: ${size} bytes, at most ${limit} are read`);
  }
}

const equal = (a: Uint8Array, b: Uint8Array): boolean => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

/** A document in a file (`mode` for new files, default 0644: the list is not secret). */
export function fileDocument(path: string, mode = 0o644): DocumentStore {
  const where = `file ${path}`;
  return {
    describe: where,
    async read(maxBytes) {
      let st;
      try {
        st = statSync(path);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
        throw e;
      }
      if (st.size > maxBytes) throw new DocumentTooLarge(st.size, maxBytes, where);
      const bytes = readFileSync(path);
      if (bytes.byteLength > maxBytes) throw new DocumentTooLarge(bytes.byteLength, maxBytes, where);
      return { bytes, version: `${st.ino}:${st.mtimeMs}:${st.size}` };
    },
    async write(bytes) {
      try {
        if (equal(readFileSync(path), bytes)) return false;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
      const dir = dirname(path);
      mkdirSync(dir, { recursive: true });
      writeFileAtomic(path, bytes, mode);
      return true;
    },
    watch(onChange, onError) {
      const dir = dirname(path);
      const name = basename(path);
      let w: FSWatcher | undefined;
      try {
        mkdirSync(dir, { recursive: true });
        w = watch(dir, { persistent: false }, (_event, file) => {
          if (file === null || file === name) onChange();
        });
        w.on("error", (e) => onError?.(e));
      } catch (e) {
        onError?.(e);
      }
      return () => w?.close();
    },
  };
}

/** ConfigMaps hold at most 1 MiB in all; above this a document is stored gzip-compressed. */
const CONFIGMAP_PLAIN_MAX = 900 * 1024;

export interface ConfigMapDocumentOptions {
  kube: Kube;
  namespace: string;
  name: string;
  /** The data key, e.g. `spire-nodes.json`. */
  key: string;
  /** Labels put on a ConfigMap fleetd creates (default fleetd's owner labels). */
  labels?: Record<string, string>;
}

/** A document in a ConfigMap key (plain under 900 KiB, else `binaryData["<key>.gz"]`). */
export function configMapDocument(o: ConfigMapDocumentOptions): DocumentStore {
  const where = `ConfigMap ${o.namespace}/${o.name} key ${o.key}`;
  const gzKey = `${o.key}.gz`;
  const get = async (): Promise<k8s.V1ConfigMap | undefined> => {
    try {
      return await o.kube.core.readNamespacedConfigMap({ name: o.name, namespace: o.namespace });
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  };
  const contentOf = (cm: k8s.V1ConfigMap, maxBytes: number): Uint8Array | undefined => {
    const plain = cm.data?.[o.key];
    if (plain !== undefined) {
      const b = Buffer.from(plain, "utf8");
      if (b.byteLength > maxBytes) throw new DocumentTooLarge(b.byteLength, maxBytes, where);
      return b;
    }
    const gz = cm.binaryData?.[gzKey];
    if (gz === undefined) return undefined;
    try {
      return gunzipSync(Buffer.from(gz, "base64"), { maxOutputLength: maxBytes });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE" || /Cannot create a Buffer larger|maxOutputLength|buffer.*too large/i.test((e as Error).message)) throw new DocumentTooLarge(maxBytes + 1, maxBytes, `${where} (gzip)`);
      throw e;
    }
  };
  return {
    describe: where,
    async read(maxBytes) {
      const cm = await get();
      if (!cm) return undefined;
      const bytes = contentOf(cm, maxBytes);
      if (bytes === undefined) return undefined;
      return { bytes, version: cm.metadata?.resourceVersion ?? "" };
    },
    async write(bytes) {
      for (let attempt = 1; ; attempt++) {
        const cm = await get();
        if (cm) {
          let now: Uint8Array | undefined;
          try {
            now = contentOf(cm, Number.MAX_SAFE_INTEGER);
          } catch {
            now = undefined;
          }
          if (now !== undefined && equal(now, bytes)) return false;
        }
        const data = { ...(cm?.data ?? {}) };
        const binaryData = { ...(cm?.binaryData ?? {}) };
        delete data[o.key];
        delete binaryData[gzKey];
        if (bytes.byteLength <= CONFIGMAP_PLAIN_MAX) data[o.key] = Buffer.from(bytes).toString("utf8");
        else binaryData[gzKey] = gzipSync(bytes, { level: 9 }).toString("base64");
        const body: k8s.V1ConfigMap = {
          apiVersion: "v1",
          kind: "ConfigMap",
          metadata: {
            name: o.name,
            namespace: o.namespace,
            labels: { ...(cm?.metadata?.labels ?? o.labels ?? OWNER_LABELS) },
            ...(cm?.metadata?.annotations ? { annotations: cm.metadata.annotations } : {}),
            ...(cm?.metadata?.resourceVersion ? { resourceVersion: cm.metadata.resourceVersion } : {}),
          },
          data,
          binaryData,
        };
        try {
          if (cm) await o.kube.core.replaceNamespacedConfigMap({ name: o.name, namespace: o.namespace, body });
          else await o.kube.core.createNamespacedConfigMap({ namespace: o.namespace, body });
          return true;
        } catch (e) {
          // 409: written (or created) by someone else since the read: read again and retry.
          if (isConflict(e) && attempt < 10) continue;
          throw e;
        }
      }
    },
    watch(onChange, onError) {
      let stopped = false;
      let req: { abort(): void } | undefined;
      let timer: NodeJS.Timeout | undefined;
      const start = (): void => {
        if (stopped) return;
        const w = new k8s.Watch(o.kube.config);
        w.watch(
          `/api/v1/namespaces/${o.namespace}/configmaps`,
          { fieldSelector: `metadata.name=${o.name}`, allowWatchBookmarks: false },
          () => onChange(),
          (err: unknown) => {
            if (stopped) return;
            if (err) onError?.(err);
            timer = setTimeout(start, err ? 1000 : 0);
            timer.unref();
          },
        ).then(
          (r) => {
            req = r;
            if (stopped) r.abort();
          },
          (e: unknown) => {
            if (stopped) return;
            onError?.(e);
            timer = setTimeout(start, 1000);
            timer.unref();
          },
        );
      };
      start();
      return () => {
        stopped = true;
        if (timer) clearTimeout(timer);
        req?.abort();
      };
    },
  };
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** Where a document lives (site configuration): a file, or a key of a ConfigMap. */
export const DocumentLocation = z.union([
  z.strictObject({ file: z.string().min(1).refine((p) => p.startsWith("/"), "an absolute path") }),
  z.strictObject({
    configMap: z.strictObject({
      /** kubeconfig of the cluster holding it; "in-cluster" for a pod's service account. */
      kubeconfig: z.string().min(1).default("in-cluster"),
      namespace: z.string().regex(DNS_LABEL, "a namespace name"),
      name: z.string().regex(/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/, "a ConfigMap name"),
      key: z.string().regex(/^[-._a-zA-Z0-9]{1,253}$/),
    }),
  }),
]);
export type DocumentLocation = z.infer<typeof DocumentLocation>;

/** The store of a configured location. */
export function documentStore(loc: DocumentLocation): DocumentStore {
  if ("file" in loc) return fileDocument(loc.file);
  const c = loc.configMap;
  return configMapDocument({ kube: loadKube(c.kubeconfig), namespace: c.namespace, name: c.name, key: c.key });
}
