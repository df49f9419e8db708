/**
 * The one shape of every fleetd sync loop against NetBox (style §4): list what exists, render what should
 * exist, key both the same way, diff into create / update, apply, count outcomes, touch only what we own.
 * A second run with nothing changed yields only "unchanged" — the test that the loop is right.
 */

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

export function canonicalJson(v: unknown): string {
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

/** Diffs and (unless dryRun) applies one kind; returns the changes and the resulting objects by key. */
export async function syncKind<E extends { id: number }, B extends Record<string, unknown>>(
  kind: SyncKind<E, B>,
  desired: B[],
  dryRun: boolean,
): Promise<{ changes: Change[]; byKey: Map<string, E | undefined> }> {
  const existing = new Map((await kind.list()).map((e) => [kind.keyOf(e), e]));
  const changes: Change[] = [];
  const byKey = new Map<string, E | undefined>();
  for (const withLocal of desired) {
    const key = kind.keyOfDesired(withLocal);
    // Keys starting with "_" are the caller's bookkeeping, never sent to NetBox.
    const b = Object.fromEntries(Object.entries(withLocal).filter(([k]) => !k.startsWith("_"))) as B;
    const e = existing.get(key);
    if (!e) {
      changes.push({ kind: "create", object: `${kind.what} ${key}` });
      byKey.set(key, dryRun ? undefined : await kind.create(b));
      continue;
    }
    const compared = Object.fromEntries(Object.entries(b).filter(([k]) => !(kind.createOnly ?? []).includes(k)));
    const fields = diffFields(e as unknown as Record<string, unknown>, compared, kind.unordered);
    if (fields.length === 0) {
      changes.push({ kind: "unchanged", object: `${kind.what} ${key}` });
      byKey.set(key, e);
      continue;
    }
    changes.push({ kind: "update", object: `${kind.what} ${key}`, fields });
    const patch = Object.fromEntries(fields.map((f) => [f.field, b[f.field]])) as Partial<B>;
    byKey.set(key, dryRun ? e : await kind.update(e.id, patch));
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
