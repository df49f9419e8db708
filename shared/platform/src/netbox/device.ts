/**
 * Reading and writing one device the way fleetd needs it: the response is judged by zod (the generated types
 * are optimistic about nulls and 4.7's `{value,label}` select custom fields), the ETag is kept, and writes can
 * be conditional (`If-Match` → 412 when someone changed the device meanwhile).
 */
import { z } from "zod";
import { cfValue, must, NetBoxError, type NetBox } from "./client.js";
import { DESIRED_ACTIONS, type DesiredAction } from "./fields.js";

const Ref = z.object({ id: z.number().int(), name: z.string().nullish(), slug: z.string().nullish() }).passthrough();
const Choice = z.union([z.object({ value: z.string() }).passthrough(), z.string()]).transform((v) => (typeof v === "string" ? v : v.value));

export const DeviceRecord = z
  .object({
    id: z.number().int().positive(),
    name: z.string().nullable(),
    serial: z.string().default(""),
    status: Choice,
    site: Ref,
    role: Ref,
    device_type: Ref,
    primary_ip4: Ref.nullable().optional(),
    custom_fields: z.record(z.string(), z.unknown()).default({}),
    last_updated: z.string().nullish(),
  })
  .passthrough()
  .transform((d) => ({ ...d, cf: Object.fromEntries(Object.entries(d.custom_fields).map(([k, v]) => [k, cfValue(v)])) }));
export type DeviceRecord = z.infer<typeof DeviceRecord>;

export function desiredActionOf(d: DeviceRecord): DesiredAction | null {
  const v = d.cf["desired_action"];
  return typeof v === "string" && (DESIRED_ACTIONS as readonly string[]).includes(v) ? (v as DesiredAction) : null;
}

function parseDevice(raw: unknown, what: string): DeviceRecord {
  const r = DeviceRecord.safeParse(raw);
  if (!r.success) throw new NetBoxError("netbox-bad-response", what, undefined, r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
  return r.data;
}

export async function readDevice(nb: NetBox, id: number): Promise<{ device: DeviceRecord; etag: string | null }> {
  const { data, response } = await must(nb.api.GET("/api/dcim/devices/{id}/", { params: { path: { id } } }), `read device ${id}`);
  return { device: parseDevice(data, `read device ${id}`), etag: response.headers.get("etag") };
}

/** Returns undefined when the device does not exist (404), instead of throwing. */
export async function readDeviceIfExists(nb: NetBox, id: number): Promise<{ device: DeviceRecord; etag: string | null } | undefined> {
  try {
    return await readDevice(nb, id);
  } catch (e) {
    if (e instanceof NetBoxError && e.status === 404) return undefined;
    throw e;
  }
}

export async function listDevices(nb: NetBox, query: Record<string, string | number | string[] | number[]>): Promise<DeviceRecord[]> {
  const out: DeviceRecord[] = [];
  let offset = 0;
  for (let page = 0; page < 1000; page++) {
    const { data } = await must(nb.api.GET("/api/dcim/devices/", { params: { query: { ...query, limit: 500, offset } as never } }), "list devices");
    for (const d of data.results) out.push(parseDevice(d, "list devices"));
    if (!data.next) return out;
    offset += data.results.length;
  }
  throw new NetBoxError("netbox-bad-response", "list devices", undefined, "more than 1000 pages");
}

/**
 * The id of the one device named exactly `name`; undefined when NetBox has none or several (names are unique
 * per site only: a lookup that finds two refuses rather than pick one).
 */
export async function deviceIdByName(nb: NetBox, name: string): Promise<number | undefined> {
  const found = (await listDevices(nb, { name, fields: "id,name,serial,status,site,role,device_type" })).filter((d) => d.name === name);
  return found.length === 1 ? found[0]?.id : undefined;
}

/** PATCH a device; with `ifMatch`, NetBox answers 412 (NetBoxError code netbox-conflict) if it changed meanwhile. */
export async function patchDevice(nb: NetBox, id: number, body: Record<string, unknown>, ifMatch: string | null, changelogMessage: string): Promise<DeviceRecord> {
  const { data } = await must(
    nb.api.PATCH("/api/dcim/devices/{id}/", {
      params: { path: { id } },
      body: { ...body, changelog_message: changelogMessage } as never,
      headers: ifMatch ? { "If-Match": ifMatch } : {},
    }),
    `update device ${id}`,
  );
  return parseDevice(data, `update device ${id}`);
}
