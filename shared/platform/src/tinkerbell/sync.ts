/**
 * Sync of fleetd-owned Tinkerbell objects on the one reconcile engine (../reconcile): list what exists (ours, by
 * label), render what should exist, key both by name, diff into create / update / delete, apply, count. An object of the same name
 * that is not labelled as fleetd's is never changed or deleted: it is counted as refused and named.
 */
import { isAlreadyExists } from "../kube/client.js";
import { oneAtATime, reconcile, type ReconcileBackend } from "../reconcile/engine.js";
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

/**
 * One reconcile of `desired` against fleetd's objects of `r` in `scope`, on the reconcile engine (../reconcile).
 * A desired name held by an object fleetd does not own is refused (never created over, changed or deleted). A
 * create that meets AlreadyExists (another replica got there first) is compared with what is there and patched if
 * needed, in the same run. The first failed write ends the run (the rest is not attempted) and its error is thrown.
 */
export async function syncObjects(objs: Objects, r: ApiResource, desired: Desired[], o: SyncOptions): Promise<SyncCounts> {
  const selector = [`${LABEL_MANAGED_BY}=${MANAGED_BY}`, o.scope].filter(Boolean).join(",");
  const notOurs = (name: string) => `${r.kind} ${objs.namespace}/${name} exists and is not labelled ${LABEL_MANAGED_BY}=${MANAGED_BY}: fleetd leaves it alone`;
  /** Creates that met an object made meanwhile: what became of them. */
  const raced = new Map<string, "updated" | "unchanged" | { refused: string }>();
  const oneByOne = oneAtATime<AnyObject>();
  const patch = (name: string, cur: AnyObject, want: Desired) =>
    objs.mergePatch(r, name, { metadata: { labels: want.metadata.labels, ...(cur.metadata.resourceVersion ? { resourceVersion: cur.metadata.resourceVersion } : {}) }, spec: replaceKeys(want.spec, o.managedSpecKeys) });
  const backend: ReconcileBackend<AnyObject, Desired> = {
    kind: `tinkerbell.${r.kind.toLowerCase()}`,
    listCurrent: async () => ({ items: await objs.list(r, selector, AnyObject) }),
    // Names the scoped listing did not return: someone else's object (a conflict), or ours outside this scope.
    lookup: async (names) => {
      const found: AnyObject[] = [];
      for (const n of names) {
        const x = await objs.get(r, n, AnyObject); // one at a time, as before: the set is the run's creates
        if (x) found.push(x);
      }
      return found;
    },
    owned: (x) => isOurs(x.metadata),
    keyOfCurrent: (x) => x.metadata.name,
    keyOfDeclared: (d) => d.metadata.name,
    same: (x, want) => upToDate(x, want, o.managedSpecKeys),
    create: (batch) =>
      oneByOne(batch, async (want) => {
        const name = want.metadata.name;
        try {
          await objs.create(r, { apiVersion: `${r.group}/${r.version}`, kind: r.kind, ...want, metadata: { ...want.metadata, namespace: objs.namespace } });
          return undefined;
        } catch (e) {
          if (!isAlreadyExists(e)) throw e;
          const cur = await objs.get(r, name, AnyObject); // created meanwhile (another replica): compare with it
          if (!cur || !isOurs(cur.metadata)) raced.set(name, { refused: `${r.kind} ${objs.namespace}/${name} appeared meanwhile and is not fleetd's` });
          else if (upToDate(cur, want, o.managedSpecKeys)) raced.set(name, "unchanged");
          else {
            await patch(name, cur, want);
            raced.set(name, "updated");
          }
          return undefined;
        }
      }),
    update: (batch) =>
      oneByOne(batch, async ({ current, declared }) => {
        await patch(declared.metadata.name, current, declared);
        return undefined;
      }),
    delete: (batch) =>
      oneByOne(batch, async (x) => {
        await objs.delete(r, x.metadata.name, x.metadata.uid);
        return undefined;
      }),
  };
  const report = await reconcile(backend, desired, { deleteUndeclared: o.prune, deleteDuplicates: false });
  const error = [...report.creates, ...report.updates, ...report.deletes].find((x) => x.outcome === "error" && x.cause !== undefined);
  if (error) throw error.cause;

  const counts = empty();
  for (const c of report.creates) {
    const race = raced.get(c.key);
    if (c.outcome === "conflict") counts.refused.push({ name: c.key, reason: notOurs(c.key) });
    else if (race === undefined) counts.created.push(c.key);
    else if (typeof race === "object") counts.refused.push({ name: c.key, reason: race.refused });
    else counts[race].push(c.key);
  }
  for (const u of report.updates) counts.updated.push(u.key);
  for (const d of report.deletes) counts.deleted.push(d.key);
  // The rest of the desired names were the same already (a create that met its twin made meanwhile is counted above).
  const counted = new Set([...counts.created, ...counts.updated, ...counts.unchanged, ...counts.refused.map((x) => x.name)]);
  for (const want of desired) if (!counted.has(want.metadata.name)) counts.unchanged.push(want.metadata.name);
  return counts;
}
