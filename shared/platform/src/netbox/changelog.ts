/**
 * NetBox's change log as evidence: who made a change. Used to accept EK bindings only when the inventory apply
 * account wrote them, and to authorize wipe and decommission by the user who requested them.
 */
import { z } from "zod";
import { must, NetBoxError, type NetBox } from "./client.js";
import { comparableJson } from "./sync.js";

export const ObjectChange = z
  .object({
    id: z.number().int(),
    time: z.string(),
    user: z.object({ id: z.number().int(), username: z.string() }).passthrough().nullish(),
    user_name: z.string(),
    request_id: z.string(),
    action: z.union([z.object({ value: z.string() }).passthrough(), z.string()]).transform((v) => (typeof v === "string" ? v : v.value)),
    prechange_data: z.record(z.string(), z.unknown()).nullish(),
    postchange_data: z.record(z.string(), z.unknown()).nullish(),
    /** The writer's changelog_message (NetBox ≥ 4.4). */
    message: z.string().nullish(),
  })
  .passthrough();
export type ObjectChangeRecord = z.infer<typeof ObjectChange>;

const MAX_CHANGES = 5000;

/** A device's changes, newest first, lazily paged. */
export async function* deviceChanges(nb: NetBox, deviceId: number): AsyncGenerator<ObjectChangeRecord> {
  let offset = 0;
  while (offset < MAX_CHANGES) {
    const { data } = await must(
      nb.api.GET("/api/core/object-changes/", {
        params: { query: { changed_object_type: "dcim.device", changed_object_id: [deviceId], ordering: "-time", limit: 200, offset } as never },
      }),
      `change log of device ${deviceId}`,
    );
    for (const raw of data.results) {
      const r = ObjectChange.safeParse(raw);
      if (!r.success) throw new NetBoxError("netbox-bad-response", `change log of device ${deviceId}`, undefined, r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
      yield r.data;
    }
    if (!data.next) return;
    offset += data.results.length;
  }
}

function cfOf(data: Record<string, unknown> | null | undefined, name: string): unknown {
  const cf = data?.["custom_fields"];
  if (!cf || typeof cf !== "object") return null;
  return (cf as Record<string, unknown>)[name] ?? null;
}

function fieldOf(data: Record<string, unknown> | null | undefined, path: string): unknown {
  if (path.startsWith("custom_fields.")) return cfOf(data, path.slice("custom_fields.".length));
  return data?.[path] ?? null;
}

function changed(c: ObjectChangeRecord, path: string): boolean {
  const before = c.action === "create" ? null : fieldOf(c.prechange_data, path);
  const after = c.action === "delete" ? null : fieldOf(c.postchange_data, path);
  return comparableJson(before) !== comparableJson(after);
}

/** The value `path` held after change `c` (null when the change deleted the object). */
function writtenBy(c: ObjectChangeRecord, path: string): unknown {
  return c.action === "delete" ? null : fieldOf(c.postchange_data, path);
}

const ISO_DATETIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Whether change `c` set `path` to exactly `value` (canonical JSON; absent and null are the same). A datetime
 * custom field is the one exception: the change log keeps the string as written ("…:07.439Z", "…:07.000Z") while
 * the device reads back NetBox's rendering of the same instant ("…:07.439000Z", "…:07Z"); two ISO datetimes are
 * the same value when they name the same instant.
 */
export function setsValue(c: ObjectChangeRecord, path: string, value: unknown): boolean {
  const written = writtenBy(c, path);
  if (typeof written === "string" && typeof value === "string" && ISO_DATETIME.test(written) && ISO_DATETIME.test(value)) {
    const a = Date.parse(written);
    const b = Date.parse(value);
    if (!Number.isNaN(a) && !Number.isNaN(b)) return a === b && sameSubMillis(written, value);
  }
  return comparableJson(written) === comparableJson(value ?? null);
}

/** Date.parse keeps milliseconds only: digits beyond them must agree too (padding zeros aside). */
function sameSubMillis(a: string, b: string): boolean {
  const frac = (s: string) => (/\.(\d+)/.exec(s)?.[1] ?? "").padEnd(9, "0").slice(3);
  return frac(a) === frac(b);
}

/**
 * The change that asked for what fleetd read: the newest change that altered `path` must have set exactly
 * `current`, the value the device held when fleetd read it. When it set something else, the field changed after
 * the read (a revert, another request): that change is not an authorization for the value read, and the caller
 * must not act (`changed`). No record at all: `{ change: undefined }` (nobody can be named as the requester).
 */
export async function requestChangeOf(
  nb: NetBox,
  deviceId: number,
  path: string,
  current: unknown,
): Promise<{ change: ObjectChangeRecord | undefined } | { changed: ObjectChangeRecord; value: unknown }> {
  const c = await lastChangeOf(nb, deviceId, path);
  if (!c || setsValue(c, path, current)) return { change: c };
  return { changed: c, value: writtenBy(c, path) };
}

/** The newest change that altered `path` (e.g. "custom_fields.ek_bindings", "status"), or undefined. */
export async function lastChangeOf(nb: NetBox, deviceId: number, path: string): Promise<ObjectChangeRecord | undefined> {
  return (await lastChangesOf(nb, deviceId, [path])).get(path);
}

/** The newest change that altered each of `paths`, from one walk of the change log (newest first). */
export async function lastChangesOf(nb: NetBox, deviceId: number, paths: readonly string[]): Promise<Map<string, ObjectChangeRecord>> {
  const found = new Map<string, ObjectChangeRecord>();
  if (paths.length === 0) return found;
  for await (const c of deviceChanges(nb, deviceId)) if (noteChange(found, c, paths)) break;
  return found;
}

/** The newest change that altered each of `paths`, from a device's whole change log already read (newest first). */
export function lastChangesIn(changes: Iterable<ObjectChangeRecord>, paths: readonly string[]): Map<string, ObjectChangeRecord> {
  const found = new Map<string, ObjectChangeRecord>();
  if (paths.length === 0) return found;
  for (const c of changes) if (noteChange(found, c, paths)) break;
  return found;
}

/** One step of the newest-first walk: `c` is the newest change of each path it altered not found yet; true when all are found. */
function noteChange(found: Map<string, ObjectChangeRecord>, c: ObjectChangeRecord, paths: readonly string[]): boolean {
  for (const p of paths) if (!found.has(p) && changed(c, p)) found.set(p, c);
  return found.size === paths.length;
}

/** The refusal code of a field its owning account did not write last, e.g. "ek-binding-unattributed", "role-unattributed". */
export type UnattributedCode = `${string}-unattributed`;
/** What an attribution check refuses with: an unattributed field, or a boot MAC no passing attestation wrote. */
export type AttributionCode = UnattributedCode | "boot-mac-unproven";

export type Attribution = { ok: true; by: string; time: string; change: number } | { ok: false; code: AttributionCode; reason: string };

/** A device field whose current value must be the one a given account wrote last. */
export interface AttributedField {
  /** Change-log path: a top-level field ("name", "serial") or "custom_fields.<name>". */
  path: string;
  /** The value the device holds now (as read). */
  current: unknown;
  /** The only NetBox username whose write counts. */
  account: string;
  /** The refusal code when it does not hold, e.g. "ek-binding-unattributed". */
  code: AttributionCode;
  /** What the field is, for people: "EK bindings", "device name". */
  label: string;
  /** The label is a plural noun ("EK bindings were…"). */
  plural?: boolean;
  /**
   * The field is a NetBox datetime: the change log keeps the value as written, the device read as NetBox
   * formats it, so the two are compared as instants.
   */
  datetime?: boolean;
}

/** Whether change `c` set `f` to the value the device holds (as instants for a datetime field). */
function setsCurrent(c: ObjectChangeRecord, f: AttributedField): boolean {
  if (setsValue(c, f.path, f.current)) return true;
  if (!f.datetime) return false;
  const written = writtenBy(c, f.path);
  if (typeof written !== "string" || typeof f.current !== "string") return false;
  const a = Date.parse(written);
  const b = Date.parse(f.current);
  return Number.isFinite(a) && a === b;
}

/**
 * Which of `fields` hold the value their account wrote last, from one walk of the device's change log. A field
 * is attributed when its newest change set exactly the current value and was made by the field's account;
 * anyone else's edit (an API user, a bulk edit, a script), a value that differs from the last recorded write, or
 * no record at all (retention expired, written outside the API) makes it unattributed.
 */
export async function checkAttribution(nb: NetBox, deviceId: number, fields: readonly AttributedField[]): Promise<Map<string, Attribution>> {
  return judgeAttribution(await lastChangesOf(nb, deviceId, fields.map((f) => f.path)), fields);
}

/**
 * checkAttribution on a change log already read (the gates' one GraphQL read, graphqlRead.ts): `changes` newest
 * first, the device's whole log. Same walk, same results, same refusal codes.
 */
export function attributionIn(changes: readonly ObjectChangeRecord[], fields: readonly AttributedField[]): Map<string, Attribution> {
  return judgeAttribution(lastChangesIn(changes, fields.map((f) => f.path)), fields);
}

/** Each field judged by the newest change that altered it (`last`; absent: none on record). */
function judgeAttribution(last: ReadonlyMap<string, ObjectChangeRecord>, fields: readonly AttributedField[]): Map<string, Attribution> {
  const out = new Map<string, Attribution>();
  for (const f of fields) {
    const c = last.get(f.path);
    const were = f.plural ? "were" : "was";
    if (!c) {
      out.set(f.path, { ok: false, code: f.code, reason: `no change-log record of the ${f.label} being written (retention expired, or written outside the API): re-run inventory apply` });
      continue;
    }
    if (!setsCurrent(c, f)) {
      out.set(f.path, { ok: false, code: f.code, reason: `the ${f.label} ${f.plural ? "differ" : "differs"} from the last recorded change (#${c.id}, ${c.time})` });
    } else if (c.user_name !== f.account) {
      out.set(f.path, { ok: false, code: f.code, reason: `the ${f.label} ${were} last changed by ${c.user_name} at ${c.time} (change #${c.id}), not by the account ${f.account}` });
    } else {
      out.set(f.path, { ok: true, by: c.user_name, time: c.time, change: c.id });
    }
  }
  return out;
}

/**
 * EK bindings are approved by the nodes file only: the current `ek_bindings` value must be the one the apply
 * service account wrote last. Anyone else's edit (an API user, a bulk edit, a script) makes them unusable.
 */
export async function checkEkAttribution(nb: NetBox, deviceId: number, current: unknown, applyAccount: string): Promise<Attribution> {
  const path = "custom_fields.ek_bindings";
  const r = await checkAttribution(nb, deviceId, [{ path, current, account: applyAccount, code: "ek-binding-unattributed", label: "EK bindings", plural: true }]);
  return r.get(path) as Attribution;
}

/** Group names of a NetBox user (needs view permission on users.user). */
export async function userGroups(nb: NetBox, userId: number): Promise<string[]> {
  const { data } = await must(nb.api.GET("/api/users/users/{id}/", { params: { path: { id: userId } } }), `user ${userId}`);
  const groups = (data as { groups?: { name?: string }[] }).groups ?? [];
  return groups.map((g) => g.name ?? "").filter((n) => n.length > 0);
}
