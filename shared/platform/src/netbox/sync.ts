/**
 * The one shape of every fleetd sync loop against NetBox (style §4): list what exists, render what should
 * exist, key both the same way, diff into create / update, apply, count outcomes, touch only what we own.
 * A second run with nothing changed yields only "unchanged" — the test that the loop is right.
 */
import { oneAtATime, reconcile, type ReconcileBackend } from "../reconcile/engine.js";

export type ChangeKind = "create" | "update" | "unchanged" | "orphan";

export interface FieldChange {
  field: string;
  from: unknown;
  to: unknown;
}

export interface Change {
  kind: ChangeKind;
  /** e.g. "extras.customfield desired_action" */
  object: string;
  fields?: FieldChange[];
  note?: string;
}

/**
 * Normalises a NetBox read value for comparison with a write value: choice fields `{value,label}` → value,
 * nested objects → id, recursively; key order does not matter.
 */
export function normalizeRead(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(normalizeRead);
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    if (Object.hasOwn(o, "value") && Object.hasOwn(o, "label") && Object.keys(o).length === 2) return o["value"];
    if (typeof o["id"] === "number" && Object.hasOwn(o, "id") && (Object.hasOwn(o, "url") || Object.hasOwn(o, "display"))) return o["id"];
    // fromEntries defines own properties: a key "__proto__" (JSON.parse keeps it as one) stays a key.
    return Object.fromEntries(Object.keys(o).sort().map((k) => [k, normalizeRead(o[k])]));
  }
  return v;
}

export function comparableJson(v: unknown): string {
  return JSON.stringify(normalizeRead(v));
}

/** Fields of `desired` whose value differs from `existing` (after normalisation). */
export function diffFields(existing: Record<string, unknown>, desired: Record<string, unknown>, unordered: string[] = []): FieldChange[] {
  const out: FieldChange[] = [];
  for (const [field, to] of Object.entries(desired)) {
    let a = normalizeRead(existing[field] ?? null);
    let b = normalizeRead(to ?? null);
    if (unordered.includes(field) && Array.isArray(a) && Array.isArray(b)) {
      a = [...a].map((x) => JSON.stringify(x)).sort();
      b = [...b].map((x) => JSON.stringify(x)).sort();
    }
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push({ field, from: existing[field] ?? null, to });
  }
  return out;
}

export interface SyncKind<E extends { id: number }, B extends Record<string, unknown>> {
  /** NetBox object type for messages, e.g. "extras.customfield". */
  what: string;
  list(): Promise<E[]>;
  keyOf(e: E): string;
  keyOfDesired(b: B): string;
  create(b: B): Promise<E>;
  update(id: number, patch: Partial<B>): Promise<E>;
  /** Fields compared as sets. */
  unordered?: string[];
  /** Fields written on create only (never corrected afterwards). */
  createOnly?: string[];
}

const withoutLocal = <B extends Record<string, unknown>>(withLocal: B): B =>
  // Keys starting with "_" are the caller's bookkeeping, never sent to NetBox.
  Object.fromEntries(Object.entries(withLocal).filter(([k]) => !k.startsWith("_"))) as B;

/**
 * Diffs and (unless dryRun) applies one kind on the reconcile engine (../reconcile): NetBox objects of a kind are
 * listed, keyed, compared field by field (createOnly fields never corrected), created or patched one at a time.
 * Nothing is ever deleted: an object the file does not declare is left alone (the engine reports it undeclared), and
 * of several objects with one key the lowest id is kept and the others are left alone too. The first failed write
 * ends the run: the rest is not attempted (during an outage each would only fail again) and the write's own error
 * is thrown, so a caller classifies it as before. Returns the changes (in declared order) and the resulting objects
 * by key.
 */
export async function syncKind<E extends { id: number }, B extends Record<string, unknown>>(
  kind: SyncKind<E, B>,
  desired: B[],
  dryRun: boolean,
): Promise<{ changes: Change[]; byKey: Map<string, E | undefined> }> {
  const compared = (b: B) => Object.fromEntries(Object.entries(withoutLocal(b)).filter(([k]) => !(kind.createOnly ?? []).includes(k)));
  const fieldsOf = (e: E, b: B) => diffFields(e as unknown as Record<string, unknown>, compared(b), kind.unordered);
  /** The differing fields of each object to update, as the engine's comparison found them (before any write). */
  const fieldsBefore = new Map<string, FieldChange[]>();
  const oneByOne = oneAtATime<E>();
  const backend: ReconcileBackend<E, B> = {
    kind: kind.what,
    listCurrent: async () => ({ items: await kind.list() }),
    owned: () => true,
    keyOfCurrent: (e) => kind.keyOf(e),
    keyOfDeclared: (b) => kind.keyOfDesired(b),
    same: (e, b) => {
      const fields = fieldsOf(e, b);
      if (fields.length > 0) fieldsBefore.set(kind.keyOfDesired(b), fields);
      return fields.length === 0;
    },
    pickKeeper: (dupes) => dupes.reduce((a, b) => (b.id < a.id ? b : a)),
    create: (batch) => oneByOne(batch, (b) => kind.create(withoutLocal(b))),
    update: (batch) =>
      oneByOne(batch, ({ current, declared }) => {
        // the fields `same` found differing (the engine compared this very pair just before)
        const b = withoutLocal(declared);
        const fields = fieldsBefore.get(kind.keyOfDesired(declared)) ?? fieldsOf(current, declared);
        return kind.update(current.id, Object.fromEntries(fields.map((f) => [f.field, b[f.field]])) as Partial<B>);
      }),
    delete: async (batch) => batch.map(() => ({ ok: false as const, error: "fleetd never deletes NetBox objects in a sync" })),
  };
  const report = await reconcile(backend, desired, { dryRun, deleteUndeclared: false, deleteDuplicates: false });
  const error = [...report.creates, ...report.updates].find((o) => o.outcome === "error" && o.cause !== undefined);
  if (error) throw error.cause;

  const updated = new Set(report.updates.map((u) => u.key));
  const created = new Set(report.creates.map((c) => c.key));
  const changes: Change[] = [];
  const byKey = new Map<string, E | undefined>();
  for (const b of desired) {
    const key = kind.keyOfDesired(b);
    const after = report.byKey.get(key);
    byKey.set(key, after);
    const object = `${kind.what} ${key}`;
    if (created.has(key)) changes.push({ kind: "create", object });
    else if (updated.has(key)) {
      // The fields as they were before the write (report.byKey holds the object after it, except in a dry run).
      changes.push({ kind: "update", object, fields: fieldsBefore.get(key) ?? [] });
    } else changes.push({ kind: "unchanged", object });
  }
  return { changes, byKey };
}

/** `tofu plan`-like rendering of changes; unchanged objects are counted, not listed. */
export function renderPlan(changes: Change[], title: string): string {
  const lines: string[] = [];
  const sym: Record<ChangeKind, string> = { create: "+", update: "~", unchanged: " ", orphan: "!" };
  for (const c of changes) {
    if (c.kind === "unchanged") continue;
    lines.push(`  ${sym[c.kind]} ${c.object}${c.note ? `  (${c.note})` : ""}`);
    for (const f of c.fields ?? []) {
      const secret = /secret|password|token/i.test(f.field);
      lines.push(`      ${f.field}: ${secret ? "(secret)" : short(f.from)} -> ${secret ? "(secret, changed)" : short(f.to)}`);
    }
  }
  const n = (k: ChangeKind): number => changes.filter((c) => c.kind === k).length;
  const done = title === "Applied";
  lines.push(`${title}: ${n("create")} ${done ? "created" : "to create"}, ${n("update")} ${done ? "updated" : "to update"}, ${n("unchanged")} unchanged${n("orphan") ? `, ${n("orphan")} not in the file (never deleted)` : ""}.`);
  return lines.join("\n");
}

function short(v: unknown): string {
  const s = JSON.stringify(normalizeRead(v)) ?? "null";
  return s.length > 120 ? s.slice(0, 117) + "..." : s;
}
