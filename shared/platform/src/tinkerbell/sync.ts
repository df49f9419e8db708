/**
 * Sync of fleetd-owned objects, in the one shape (style.md §4): list what exists (ours, by label), render what
 * should exist, key both by name, diff into create / update / delete, apply, count. An object of the same name
 * that is not labelled as fleetd's is never changed or deleted: it is counted as refused and named.
 */
import { isAlreadyExists } from "../kube/client.js";
import { AnyObject, isOurs, LABEL_MANAGED_BY, MANAGED_BY, type ApiResource } from "./api.js";
import { contains, replaceKeys } from "./diff.js";
import type { Objects } from "./objects.js";

export interface SyncCounts {
  created: string[];
  updated: string[];
  deleted: string[];
  unchanged: string[];
  /** Objects of a desired name that fleetd does not own (left alone), with the reason. */
  refused: { name: string; reason: string }[];
}

export interface Desired {
  metadata: { name: string; labels: Record<string, string> };
  spec: Record<string, unknown>;
}

export interface SyncOptions {
  /** Label selector (besides managed-by=fleetd) of the set this sync owns; ours outside `desired` are deleted. */
  scope: string;
  /** Spec keys fleetd manages: absent from the desired spec means removed from the live one. */
  managedSpecKeys: readonly string[];
  /** Delete ours that are no longer desired (false for per-node upserts). */
  prune: boolean;
}

const empty = (): SyncCounts => ({ created: [], updated: [], deleted: [], unchanged: [], refused: [] });

function upToDate(live: AnyObject, want: Desired, managed: readonly string[]): boolean {
  const spec = (live as { spec?: Record<string, unknown> }).spec ?? {};
  if (!contains(live.metadata.labels ?? {}, want.metadata.labels)) return false;
  if (!contains(spec, want.spec)) return false;
  return managed.every((k) => k in want.spec || spec[k] === undefined);
}

export async function syncObjects(objs: Objects, r: ApiResource, desired: Desired[], o: SyncOptions): Promise<SyncCounts> {
  const counts = empty();
  const selector = [`${LABEL_MANAGED_BY}=${MANAGED_BY}`, o.scope].filter(Boolean).join(",");
  const live = new Map((await objs.list(r, selector, AnyObject)).map((x) => [x.metadata.name, x]));
  for (const want of desired) {
    const name = want.metadata.name;
    let cur = live.get(name);
    live.delete(name);
    if (!cur) {
      // Not among ours: maybe someone else's object of that name.
      const other = await objs.get(r, name, AnyObject);
      if (other && !isOurs(other.metadata)) {
        counts.refused.push({ name, reason: `${r.kind} ${objs.namespace}/${name} exists and is not labelled ${LABEL_MANAGED_BY}=${MANAGED_BY}: fleetd leaves it alone` });
        continue;
      }
      cur = other;
    }
    if (!cur) {
      try {
        await objs.create(r, { apiVersion: `${r.group}/${r.version}`, kind: r.kind, ...want, metadata: { ...want.metadata, namespace: objs.namespace } });
        counts.created.push(name);
        continue;
      } catch (e) {
        if (!isAlreadyExists(e)) throw e;
        cur = await objs.get(r, name, AnyObject); // created meanwhile (another replica): compare with it
        if (!cur || !isOurs(cur.metadata)) {
          counts.refused.push({ name, reason: `${r.kind} ${objs.namespace}/${name} appeared meanwhile and is not fleetd's` });
          continue;
        }
      }
    }
    if (upToDate(cur, want, o.managedSpecKeys)) {
      counts.unchanged.push(name);
      continue;
    }
    await objs.mergePatch(r, name, { metadata: { labels: want.metadata.labels, ...(cur.metadata.resourceVersion ? { resourceVersion: cur.metadata.resourceVersion } : {}) }, spec: replaceKeys(want.spec, o.managedSpecKeys) });
    counts.updated.push(name);
  }
  if (o.prune) {
    for (const [name, x] of live) {
      await objs.delete(r, name, x.metadata.uid);
      counts.deleted.push(name);
    }
  }
  return counts;
}
