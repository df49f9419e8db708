/**
 * The attestation gates' fresh read of one device as ONE NetBox request (issue 12): NetBox's GraphQL
 * (`POST /graphql/`, the same token and object permissions as the REST API) returns the device fields a `Node`
 * needs, its interfaces with their cable peers and primary MAC, and the device's whole change log (ChangelogMixin,
 * newest first) — what the REST path read with a device GET, an interface listing and a change-log walk.
 * The answer is judged by zod here: an `errors` array is a NetBoxError as a REST error is; the device itself
 * becomes a `DeviceRecord` (device.ts), so `nodeFromDevice` stays the one conversion.
 */
import { z } from "zod";
import { NetBoxError, type NetBox } from "./client.js";
import { ObjectChange, type ObjectChangeRecord } from "./changelog.js";
import { DeviceRecord } from "./device.js";

/** A cabled interface as the gates use it: its peer (the switch port) and its primary MAC. */
export interface InterfaceRow {
  id: number;
  name: string;
  mgmt_only: boolean;
  cabled: boolean;
  link_peers: { name?: string; device?: { name?: string | null } }[];
  primary_mac_address: { id: number; mac_address?: string } | null;
}

export interface GateRead {
  device: DeviceRecord;
  interfaces: InterfaceRow[];
  /** The device's change log, newest first (sorted here: the order is not left to NetBox's default). */
  changes: ObjectChangeRecord[];
}

/** What fleetd asks for. Related objects as `{ id slug name }` and IDs as GraphQL IDs (strings). */
export function gateQuery(deviceId: number): string {
  if (!Number.isSafeInteger(deviceId) || deviceId <= 0) throw new Error(`device id ${deviceId}`);
  const peer = "name device { name }";
  return `query FleetdGateRead {
  device_list(filters: { id: { exact: "${deviceId}" } }) {
    id name serial status custom_fields last_updated
    site { id name slug } role { id name slug } device_type { id slug } primary_ip4 { id address }
    interfaces { id name mgmt_only cable { id } primary_mac_address { id mac_address }
      link_peers { __typename ... on InterfaceType { ${peer} } ... on FrontPortType { ${peer} } ... on RearPortType { ${peer} } } }
    changelog { id time user_name request_id action prechange_data postchange_data message }
  }
}`;
}

const GqlId = z.union([z.string().regex(/^[1-9][0-9]{0,15}$/), z.number().int().positive()]).transform((v) => Number(v));
const GqlRef = z.object({ id: GqlId, name: z.string().nullish(), slug: z.string().nullish() }).passthrough();

const GqlInterface = z.object({
  id: GqlId,
  name: z.string(),
  mgmt_only: z.boolean(),
  cable: z.object({ id: GqlId }).nullable(),
  primary_mac_address: z.object({ id: GqlId, mac_address: z.string() }).nullable(),
  link_peers: z.array(z.object({ __typename: z.string(), name: z.string().optional(), device: z.object({ name: z.string().nullable() }).nullish() })),
});

const GqlChange = z.object({ id: GqlId }).passthrough();

const GqlDevice = z
  .object({
    id: GqlId,
    site: GqlRef,
    role: GqlRef,
    device_type: GqlRef,
    primary_ip4: z.object({ id: GqlId, address: z.string() }).nullable(),
    interfaces: z.array(GqlInterface),
    changelog: z.array(GqlChange),
  })
  .passthrough();

/** A GraphQL answer: errors (then data is null or partial, and not used), or the data asked for. */
const GqlErrors = z.object({ errors: z.array(z.object({ message: z.string() }).passthrough()).min(1) }).passthrough();
const GqlData = z.object({ data: z.object({ device_list: z.array(z.unknown()) }), errors: z.undefined().optional() }).passthrough();

const issues = (e: z.ZodError) => e.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ").slice(0, 2000);

/**
 * NetBox's GraphQL answer for `gateQuery(deviceId)`, judged: undefined when NetBox lists no such device (gone, or
 * not visible to the account — both refuse at the gates); a NetBoxError for an `errors` answer (a permission
 * NetBox reports as an error, a field it does not know) and for anything malformed.
 */
export function parseGateRead(body: unknown, deviceId: number): GateRead | undefined {
  const what = `read device ${deviceId} (GraphQL)`;
  const bad = (detail: string) => new NetBoxError("netbox-bad-response", what, undefined, detail);
  if (body !== null && typeof body === "object" && "errors" in body) {
    const e = GqlErrors.safeParse(body);
    throw bad(e.success ? `NetBox answered with errors: ${e.data.errors.map((x) => x.message).join("; ").slice(0, 2000)}` : `malformed errors: ${issues(e.error)}`);
  }
  const a = GqlData.safeParse(body);
  if (!a.success) throw bad(issues(a.error));
  const list = a.data.data.device_list;
  if (list.length === 0) return undefined;
  if (list.length !== 1) throw bad(`${list.length} devices for one ID`);
  const g = GqlDevice.safeParse(list[0]);
  if (!g.success) throw bad(issues(g.error));
  if (g.data.id !== deviceId) throw bad(`asked for device ${deviceId}, NetBox answered device ${g.data.id}`);
  const { interfaces: rawInterfaces, changelog, ...fields } = g.data;
  const d = DeviceRecord.safeParse({ ...fields, primary_ip4: fields.primary_ip4 });
  if (!d.success) throw bad(issues(d.error));
  const changes: ObjectChangeRecord[] = [];
  for (const raw of changelog) {
    const c = ObjectChange.safeParse(raw);
    if (!c.success) throw bad(`change log: ${issues(c.error)}`);
    changes.push(c.data);
  }
  // Newest first, as the REST walk (ordering=-time); a tie by ID.
  const at = (c: ObjectChangeRecord) => Date.parse(c.time);
  if (changes.some((c) => Number.isNaN(at(c)))) throw bad("change log: a change with an unreadable time");
  changes.sort((x, y) => at(y) - at(x) || y.id - x.id);
  const interfaces: InterfaceRow[] = rawInterfaces.map((i) => ({
    id: i.id,
    name: i.name,
    mgmt_only: i.mgmt_only,
    cabled: i.cable !== null,
    link_peers: i.link_peers.map((p) => ({ ...(p.name !== undefined ? { name: p.name } : {}), ...(p.device ? { device: { name: p.device.name } } : {}) })),
    primary_mac_address: i.primary_mac_address,
  }));
  return { device: d.data, interfaces, changes };
}

/** One POST /graphql/: the device, its interfaces and its change log (undefined: no such device). */
export async function readForGates(nb: NetBox, deviceId: number, timeoutMs = 30_000): Promise<GateRead | undefined> {
  const what = `read device ${deviceId} (GraphQL)`;
  let r: Response;
  try {
    r = await fetch(`${nb.url}/graphql/`, {
      method: "POST",
      headers: { authorization: nb.authorization, accept: "application/json", "content-type": "application/json" },
      body: JSON.stringify({ query: gateQuery(deviceId) }),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (e) {
    throw new NetBoxError("netbox-unreachable", what, undefined, (e as Error).message);
  }
  const text = await r.text();
  if (!r.ok) throw new NetBoxError(r.status === 412 ? "netbox-conflict" : "netbox-http", what, r.status, text.slice(0, 2000));
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new NetBoxError("netbox-bad-response", what, r.status, `not JSON: ${text.slice(0, 200)}`);
  }
  return parseGateRead(body, deviceId);
}
