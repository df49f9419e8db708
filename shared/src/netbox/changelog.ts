/**
 * NetBox's change log as evidence: who made a change. Used to accept EK bindings only when the inventory apply
 * account wrote them, and to authorize wipe and decommission by the user who requested them.
 */
import { z } from "zod";
import { must, NetBoxError, type NetBox } from "./client.js";
import { canonicalJson } from "./sync.js";

const Change = z
  .object({
    id: z.number().int(),
    time: z.string(),
    user: z.object({ id: z.number().int(), username: z.string() }).passthrough().nullish(),
    user_name: z.string(),
    request_id: z.string(),
    action: z.union([z.object({ value: z.string() }).passthrough(), z.string()]).transform((v) => (typeof v === "string" ? v : v.value)),
    prechange_data: z.record(z.string(), z.unknown()).nullish(),
    postchange_data: z.record(z.string(), z.unknown()).nullish(),
  })
  .passthrough();
export type ObjectChangeRecord = z.infer<typeof Change>;

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
      const r = Change.safeParse(raw);
      if (!r.success) throw new NetBoxError("netbox_bad_response", `change log of device ${deviceId}`, undefined, r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
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

/** The newest change that altered `path` (e.g. "custom_fields.ek_bindings", "status"), or undefined. */
export async function lastChangeOf(nb: NetBox, deviceId: number, path: string): Promise<ObjectChangeRecord | undefined> {
  for await (const c of deviceChanges(nb, deviceId)) {
    const before = c.action === "create" ? null : fieldOf(c.prechange_data, path);
    const after = c.action === "delete" ? null : fieldOf(c.postchange_data, path);
    if (canonicalJson(before) !== canonicalJson(after)) return c;
  }
  return undefined;
}

export type Attribution = { ok: true; by: string; time: string } | { ok: false; code: "ek_binding_unattributed"; reason: string };

/**
 * EK bindings are approved by the nodes file only: the current `ek_bindings` value must be the one the apply
 * service account wrote last. Anyone else's edit (an API user, a bulk edit, a script) makes them unusable.
 */
export async function checkEkAttribution(nb: NetBox, deviceId: number, current: unknown, applyAccount: string): Promise<Attribution> {
  const c = await lastChangeOf(nb, deviceId, "custom_fields.ek_bindings");
  if (!c) {
    return { ok: false, code: "ek_binding_unattributed", reason: "no change-log record of the EK bindings being written (retention expired, or written outside the API): re-run inventory apply" };
  }
  const written = c.action === "delete" ? null : cfOf(c.postchange_data, "ek_bindings");
  if (canonicalJson(written) !== canonicalJson(current)) {
    return { ok: false, code: "ek_binding_unattributed", reason: `the EK bindings differ from the last recorded change (#${c.id}, ${c.time})` };
  }
  if (c.user_name !== applyAccount) {
    return { ok: false, code: "ek_binding_unattributed", reason: `EK bindings were last changed by ${c.user_name} at ${c.time} (change #${c.id}), not by the inventory apply account ${applyAccount}` };
  }
  return { ok: true, by: c.user_name, time: c.time };
}

/** Group names of a NetBox user (needs view permission on users.user). */
export async function userGroups(nb: NetBox, userId: number): Promise<string[]> {
  const { data } = await must(nb.api.GET("/api/users/users/{id}/", { params: { path: { id: userId } } }), `user ${userId}`);
  const groups = (data as { groups?: { name?: string }[] }).groups ?? [];
  return groups.map((g) => g.name ?? "").filter((n) => n.length > 0);
}
