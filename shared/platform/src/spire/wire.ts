/**
 * SPIRE API values as fleetd code sees them (camelCase, SPIFFE IDs as strings, int64 as numbers) and their wire
 * form (the snake_case objects `proto.ts` encodes and decodes). What SPIRE sends back is checked here with zod,
 * once, where it enters; what fleetd sends is checked before any RPC, so bad input changes nothing.
 */
import { z } from "zod";
import { checkTrustDomain, formatSpiffeId, parseSpiffeId, SpiffeIdError, type SpiffeIdParts } from "./spiffeId.js";
import { SpireApiError } from "./errors.js";

export interface Selector {
  /** e.g. `tpm_devid`, `unix`, `k8s` */
  readonly type: string;
  /** e.g. `subject:cn:worker-1.g1`, `uid:0` */
  readonly value: string;
}

/** An entry as fleetd writes it. Fields left out are SPIRE's defaults on create and untouched on update (see `EntryField`). */
export interface EntrySpec {
  /** Client-chosen ID (`[A-Za-z0-9._-]{1,255}`); SPIRE makes a UUID when absent. */
  readonly id?: string;
  readonly spiffeId: string;
  readonly parentId: string;
  readonly selectors: readonly Selector[];
  /** Seconds; 0 = the server's default. */
  readonly x509SvidTtl?: number;
  readonly jwtSvidTtl?: number;
  readonly federatesWith?: readonly string[];
  readonly admin?: boolean;
  readonly downstream?: boolean;
  /** Unix seconds; 0 = never. */
  readonly expiresAt?: number;
  readonly dnsNames?: readonly string[];
  readonly storeSvid?: boolean;
  /** ≤ 1024 characters; fleetd can mark its own entries with it. */
  readonly hint?: string;
}

/** An entry as SPIRE holds it. */
export interface Entry extends Required<Omit<EntrySpec, "id">> {
  readonly id: string;
  readonly revisionNumber: number;
  /** Unix seconds. */
  readonly createdAt: number;
}

/** The fields a BatchUpdateEntry writes (the bits of its `input_mask`). */
export const ENTRY_FIELDS = ["spiffeId", "parentId", "selectors", "x509SvidTtl", "jwtSvidTtl", "federatesWith", "admin", "downstream", "expiresAt", "dnsNames", "storeSvid", "hint"] as const;
export type EntryField = (typeof ENTRY_FIELDS)[number];

const SNAKE: Record<EntryField, string> = {
  spiffeId: "spiffe_id",
  parentId: "parent_id",
  selectors: "selectors",
  x509SvidTtl: "x509_svid_ttl",
  jwtSvidTtl: "jwt_svid_ttl",
  federatesWith: "federates_with",
  admin: "admin",
  downstream: "downstream",
  expiresAt: "expires_at",
  dnsNames: "dns_names",
  storeSvid: "store_svid",
  hint: "hint",
};

export interface Agent {
  /** e.g. `spiffe://lab.test/spire/agent/tpm_devid/<sha1>` */
  readonly id: string;
  readonly attestationType: string;
  readonly x509SvidSerialNumber: string;
  /** Unix seconds. */
  readonly x509SvidExpiresAt: number;
  readonly selectors: readonly Selector[];
  readonly banned: boolean;
  readonly canReattest: boolean;
  readonly agentVersion: string;
}

/** A per-item status of a batch RPC (`types.Status`, a google.rpc.Code): SPIRE answers the batch OK and each item on its own. */
export interface ItemStatus {
  readonly code: number;
  /** e.g. `OK`, `ALREADY_EXISTS`, `NOT_FOUND`, `INVALID_ARGUMENT` */
  readonly codeName: string;
  readonly message: string;
}

// ---- what SPIRE sends (zod) ----

const Int64 = z
  .string()
  .regex(/^-?\d{1,19}$/)
  .transform(Number)
  .refine((n) => Number.isSafeInteger(n), "an int64 beyond 2^53");
const Int32 = z.number().int();

const SpiffeIdWire = z.object({ trust_domain: z.string(), path: z.string() });
const SelectorWire = z.object({ type: z.string(), value: z.string() });

export const EntryWire = z.object({
  id: z.string(),
  spiffe_id: SpiffeIdWire,
  parent_id: SpiffeIdWire,
  selectors: z.array(SelectorWire),
  x509_svid_ttl: Int32,
  federates_with: z.array(z.string()),
  admin: z.boolean(),
  downstream: z.boolean(),
  expires_at: Int64,
  dns_names: z.array(z.string()),
  revision_number: Int64,
  store_svid: z.boolean(),
  jwt_svid_ttl: Int32,
  hint: z.string(),
  created_at: Int64,
});

export const StatusWire = z.object({ code: Int32, message: z.string() });

export const AgentWire = z.object({
  id: SpiffeIdWire,
  attestation_type: z.string(),
  x509svid_serial_number: z.string(),
  x509svid_expires_at: Int64,
  selectors: z.array(SelectorWire),
  banned: z.boolean(),
  can_reattest: z.boolean(),
  agent_version: z.string(),
});

export const ListEntriesResponse = z.object({ entries: z.array(EntryWire), next_page_token: z.string() });
export const CountEntriesResponse = z.object({ count: Int32 });
export const ListAgentsResponse = z.object({ agents: z.array(AgentWire), next_page_token: z.string() });
export const BatchEntryResponse = z.object({ results: z.array(z.object({ status: StatusWire, entry: EntryWire.nullable() })) });
export const BatchDeleteResponse = z.object({ results: z.array(z.object({ status: StatusWire, id: z.string() })) });
export const HealthCheckResponse = z.object({ status: z.enum(["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"]) });

/** Parses an answer of `rpc` or throws `spire-bad-response` naming the first problem. */
export function readAnswer<T extends z.ZodType>(rpc: string, schema: T, value: unknown): z.output<T> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  throw new SpireApiError("spire-bad-response", rpc, undefined, `unexpected answer at ${issue?.path.join(".") || "(root)"}: ${issue?.message ?? "invalid"}`);
}

// ---- conversions ----

const idString = (rpc: string, w: z.infer<typeof SpiffeIdWire>, what: string): string => {
  try {
    return formatSpiffeId({ trustDomain: w.trust_domain, path: w.path });
  } catch (e) {
    throw new SpireApiError("spire-bad-response", rpc, undefined, `${what}: ${(e as Error).message}`);
  }
};

export function entryFromWire(rpc: string, w: z.output<typeof EntryWire>): Entry {
  return {
    id: w.id,
    spiffeId: idString(rpc, w.spiffe_id, `entry ${w.id} spiffe_id`),
    parentId: idString(rpc, w.parent_id, `entry ${w.id} parent_id`),
    selectors: w.selectors.map((s) => ({ type: s.type, value: s.value })),
    x509SvidTtl: w.x509_svid_ttl,
    jwtSvidTtl: w.jwt_svid_ttl,
    federatesWith: w.federates_with,
    admin: w.admin,
    downstream: w.downstream,
    expiresAt: w.expires_at,
    dnsNames: w.dns_names,
    storeSvid: w.store_svid,
    hint: w.hint,
    revisionNumber: w.revision_number,
    createdAt: w.created_at,
  };
}

export function agentFromWire(rpc: string, w: z.output<typeof AgentWire>): Agent {
  return {
    id: idString(rpc, w.id, "agent id"),
    attestationType: w.attestation_type,
    x509SvidSerialNumber: w.x509svid_serial_number,
    x509SvidExpiresAt: w.x509svid_expires_at,
    selectors: w.selectors.map((s) => ({ type: s.type, value: s.value })),
    banned: w.banned,
    canReattest: w.can_reattest,
    agentVersion: w.agent_version,
  };
}

export function itemStatus(w: z.output<typeof StatusWire>): ItemStatus {
  return { code: w.code, codeName: RPC_CODE_NAMES[w.code] ?? `code ${w.code}`, message: w.message };
}

/** google.rpc.Code names (google/rpc/code.proto), the codes of `types.Status`. */
const RPC_CODE_NAMES: Record<number, string> = {
  0: "OK",
  1: "CANCELLED",
  2: "UNKNOWN",
  3: "INVALID_ARGUMENT",
  4: "DEADLINE_EXCEEDED",
  5: "NOT_FOUND",
  6: "ALREADY_EXISTS",
  7: "PERMISSION_DENIED",
  8: "RESOURCE_EXHAUSTED",
  9: "FAILED_PRECONDITION",
  10: "ABORTED",
  11: "OUT_OF_RANGE",
  12: "UNIMPLEMENTED",
  13: "INTERNAL",
  14: "UNAVAILABLE",
  15: "DATA_LOSS",
  16: "UNAUTHENTICATED",
};

// ---- what fleetd sends (checked before any RPC) ----

/** A request fleetd refuses to send, with the reason (nothing was sent). */
function badRequest(rpc: string, detail: string): never {
  throw new SpireApiError("spire-bad-request", rpc, undefined, detail);
}

export function spiffeIdToWire(rpc: string, id: string, what: string): { trust_domain: string; path: string } {
  let p: SpiffeIdParts;
  try {
    p = parseSpiffeId(id);
  } catch (e) {
    if (e instanceof SpiffeIdError) badRequest(rpc, `${what}: ${e.message}`);
    throw e;
  }
  return { trust_domain: p.trustDomain, path: p.path };
}

export function trustDomainToWire(rpc: string, td: string): string {
  try {
    checkTrustDomain(td);
  } catch (e) {
    if (e instanceof SpiffeIdError) badRequest(rpc, e.message);
    throw e;
  }
  return td;
}

const ENTRY_ID = /^[A-Za-z0-9._-]{1,255}$/;

function selectorToWire(rpc: string, s: Selector, what: string): { type: string; value: string } {
  if (s.type === "" || s.type.includes(":")) badRequest(rpc, `${what}: selector type ${JSON.stringify(s.type)} must be non-empty and without ':'`);
  if (s.value === "") badRequest(rpc, `${what}: selector ${s.type} has an empty value`);
  return { type: s.type, value: s.value };
}

export function selectorsToWire(rpc: string, sel: readonly Selector[], what: string): { type: string; value: string }[] {
  return sel.map((s) => selectorToWire(rpc, s, what));
}

function ttl(rpc: string, v: number, what: string): number {
  if (!Number.isInteger(v) || v < 0 || v > 0x7fffffff) badRequest(rpc, `${what} must be an integer of seconds from 0 to 2^31-1`);
  return v;
}

/**
 * The wire form of `e` for a create or update: an entry ID if given, and only the fields given. A field that is
 * given but not in the update's mask is not written by SPIRE.
 */
export function entryToWire(rpc: string, e: EntrySpec, i: number): Record<string, unknown> {
  const what = `entry ${i}${e.id !== undefined ? ` (${e.id})` : ""}`;
  if (e.id !== undefined && !ENTRY_ID.test(e.id)) badRequest(rpc, `${what}: an entry ID is 1 to 255 of [A-Za-z0-9._-]`);
  if (e.selectors.length === 0) badRequest(rpc, `${what}: an entry needs at least one selector`);
  if (e.hint !== undefined && e.hint.length > 1024) badRequest(rpc, `${what}: hint longer than 1024 characters`);
  const w: Record<string, unknown> = {
    spiffe_id: spiffeIdToWire(rpc, e.spiffeId, `${what} spiffeId`),
    parent_id: spiffeIdToWire(rpc, e.parentId, `${what} parentId`),
    selectors: selectorsToWire(rpc, e.selectors, what),
  };
  if (e.id !== undefined) w["id"] = e.id;
  if (e.x509SvidTtl !== undefined) w["x509_svid_ttl"] = ttl(rpc, e.x509SvidTtl, `${what} x509SvidTtl`);
  if (e.jwtSvidTtl !== undefined) w["jwt_svid_ttl"] = ttl(rpc, e.jwtSvidTtl, `${what} jwtSvidTtl`);
  if (e.federatesWith !== undefined) w["federates_with"] = e.federatesWith.map((td) => trustDomainToWire(rpc, td));
  if (e.admin !== undefined) w["admin"] = e.admin;
  if (e.downstream !== undefined) w["downstream"] = e.downstream;
  if (e.expiresAt !== undefined) {
    if (!Number.isSafeInteger(e.expiresAt) || e.expiresAt < 0) badRequest(rpc, `${what} expiresAt must be unix seconds`);
    w["expires_at"] = String(e.expiresAt);
  }
  if (e.dnsNames !== undefined) w["dns_names"] = [...e.dnsNames];
  if (e.storeSvid !== undefined) w["store_svid"] = e.storeSvid;
  if (e.hint !== undefined) w["hint"] = e.hint;
  return w;
}

/**
 * `types.EntryMask` with exactly `fields` set. An empty list is refused: the update would write nothing, and
 * leaving the mask out instead would make SPIRE overwrite every field (see proto.ts).
 */
export function entryMask(rpc: string, fields: readonly EntryField[]): Record<string, boolean> {
  if (fields.length === 0) badRequest(rpc, "an update must name the fields it writes");
  const mask: Record<string, boolean> = {};
  for (const f of fields) {
    const snake = SNAKE[f];
    if (snake === undefined) badRequest(rpc, `unknown entry field ${JSON.stringify(f)}`);
    mask[snake] = true;
  }
  return mask;
}
