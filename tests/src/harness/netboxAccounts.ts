/**
 * NetBox accounts for tests and the lab, created through the REST API by the harness admin: a group, users
 * with object permissions, and v2 tokens (NetBox 4.7 returns the plaintext once, on creation).
 */
import { z } from "zod";
import type { NetBoxInstance } from "./netbox.js";

/** What fleetd's service accounts touch (documented in netbox-script/README.md). */
export const SERVICE_OBJECT_TYPES = [
  "dcim.site", "dcim.manufacturer", "dcim.devicetype", "dcim.devicerole", "dcim.device", "dcim.interface",
  "dcim.cable", "dcim.cabletermination", "dcim.macaddress", "ipam.ipaddress", "extras.customfield",
  "extras.customfieldchoiceset", "extras.journalentry", "core.objectchange", "users.user", "users.group",
] as const;

export interface Account {
  id: number;
  username: string;
  /** `nbt_<key>.<plaintext>` */
  token: string;
}

async function call(nb: NetBoxInstance, method: string, path: string, body?: unknown): Promise<unknown> {
  const r = await fetch(`${nb.url}${path}`, {
    method,
    headers: { authorization: nb.authorization, "content-type": "application/json", accept: "application/json" },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: HTTP ${r.status}: ${text.slice(0, 500)}`);
  return text ? JSON.parse(text) : null;
}

export async function createGroup(nb: NetBoxInstance, name: string): Promise<number> {
  const g = z.object({ id: z.number() }).parse(await call(nb, "POST", "/api/users/groups/", { name }));
  return g.id;
}

export async function createAccount(
  nb: NetBoxInstance,
  username: string,
  opts: { groups?: number[]; objectTypes: readonly string[]; actions?: string[] },
): Promise<Account> {
  const password = `pw-${username}-${Math.random().toString(36).slice(2)}-X9`;
  const u = z.object({ id: z.number() }).parse(await call(nb, "POST", "/api/users/users/", { username, password, groups: opts.groups ?? [] }));
  await call(nb, "POST", "/api/users/permissions/", {
    name: `${username} permissions`,
    object_types: opts.objectTypes,
    actions: opts.actions ?? ["view", "add", "change", "delete"],
    users: [u.id],
    enabled: true,
  });
  const t = z.object({ key: z.string(), token: z.string() }).parse(await call(nb, "POST", "/api/users/tokens/", { user: u.id, version: 2, write_enabled: true }));
  return { id: u.id, username, token: `nbt_${t.key}.${t.token}` };
}

export { call as netboxCall };
