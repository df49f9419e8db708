/**
 * A thin typed NetBox REST client: openapi-fetch over the types generated from NetBox's own schema
 * (schema.ts), plus the error handling every caller needs. Responses fleetd relies on are zod-parsed where they
 * are used (device.ts, ...): the schema and the runtime disagree in places (nullability, 4.7's `{value,label}`
 * select custom fields), so the generated types shape requests and the zod schemas judge responses.
 */
import createClient, { type Client } from "openapi-fetch";
import { type MaybeOutage, Unavailable } from "../outage/outage.js";
import type { paths } from "./schema.js";

export type NetBoxApi = Client<paths>;

/** NetBoxError's codes: netbox-http (a non-2xx answer), netbox-conflict (412), netbox-unreachable, netbox-bad-response. */
export const NETBOX_ERROR_CODES = ["netbox-http", "netbox-conflict", "netbox-unreachable", "netbox-bad-response"] as const;
export type NetBoxErrorCode = (typeof NETBOX_ERROR_CODES)[number];

export class NetBoxError extends Error implements MaybeOutage {
  override readonly name = "NetBoxError";
  constructor(
    /** Stable code: netbox-http (a non-2xx answer), netbox-conflict (412), netbox-unreachable, netbox-bad-response. */
    readonly code: NetBoxErrorCode,
    readonly what: string,
    readonly status: number | undefined,
    readonly detail: string,
  ) {
    super(`${what}: ${status !== undefined ? `HTTP ${status}: ` : ""}${detail}`);
  }

  /** NetBox did not answer, or answered 5xx (its database or a worker is down): an outage, not an answer. */
  outage(): Unavailable | undefined {
    if (this.code === "netbox-unreachable") return new Unavailable("netbox-unavailable", `${this.what}: NetBox did not answer`);
    if (this.code === "netbox-http" && this.status !== undefined && this.status >= 500) return new Unavailable("netbox-unavailable", `${this.what}: NetBox answered HTTP ${this.status}`);
    return undefined;
  }
}

export interface NetBoxClientOptions {
  /** Base URL, e.g. https://netbox.example.org (no /api). */
  url: string;
  /** A v2 token `nbt_<key>.<secret>` (or a full Authorization header value). */
  token: string;
  timeoutMs?: number;
}

export interface NetBox {
  readonly url: string;
  readonly api: NetBoxApi;
  /** The Authorization header value (for raw fetches such as the harness's). */
  readonly authorization: string;
}

export function authorizationHeader(token: string): string {
  return /^(bearer|token) /i.test(token) ? token : `Bearer ${token}`;
}

export function createNetBox(opts: NetBoxClientOptions): NetBox {
  const url = opts.url.replace(/\/+$/, "");
  const authorization = authorizationHeader(opts.token);
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const api = createClient<paths>({
    baseUrl: url,
    headers: { authorization, accept: "application/json" },
    fetch: async (req: Request) => {
      const deadline = AbortSignal.timeout(timeoutMs);
      for (let attempt = 1; ; attempt++) {
        try {
          return await fetch(req, { signal: deadline });
        } catch (e) {
          // A read (GET, HEAD) that failed at the connection — typically a kept-alive connection the server closed
          // as the request went out — is sent once more on a new one; a write never is (its outcome is unknown:
          // the caller's own idempotency, keys and If-Match, decides), nor anything after the deadline.
          if (attempt === 1 && retriable(req.method, e, deadline)) continue;
          throw new NetBoxError("netbox-unreachable", `${req.method} ${new URL(req.url).pathname}`, undefined, connectionDetail(e));
        }
      }
    },
  });
  return { url, api, authorization };
}

/** A failed read worth one more try: GET or HEAD, a connection error (not the deadline, not an abort). */
export function retriable(method: string, e: unknown, deadline: AbortSignal): boolean {
  if (method !== "GET" && method !== "HEAD") return false;
  if (deadline.aborted) return false;
  const name = (e as { name?: unknown } | null)?.name;
  return name !== "AbortError" && name !== "TimeoutError";
}

/** fetch's "fetch failed" with the cause that says why (connection refused, reset, …). */
function connectionDetail(e: unknown): string {
  const err = e as { message?: unknown; cause?: { code?: unknown; message?: unknown } };
  const msg = typeof err?.message === "string" ? err.message : String(e);
  const cause = err?.cause;
  const why = cause ? [cause.code, cause.message].filter((x) => typeof x === "string" && x).join(" ") : "";
  return why ? `${msg}: ${why}` : msg;
}

/** For readiness: NetBox answers `GET /api/status/` with 200 within `timeoutMs` (no body is trusted). */
export async function netboxReachable(nb: NetBox, timeoutMs: number): Promise<{ ok: true } | { ok: false; detail: string }> {
  try {
    const r = await fetch(`${nb.url}/api/status/`, { headers: { authorization: nb.authorization, accept: "application/json" }, signal: AbortSignal.timeout(timeoutMs) });
    await r.body?.cancel();
    return r.status === 200 ? { ok: true } : { ok: false, detail: `GET /api/status/: HTTP ${r.status}` };
  } catch (e) {
    return { ok: false, detail: `GET /api/status/: ${(e as Error).name === "TimeoutError" ? `no answer within ${timeoutMs} ms` : (e as Error).message}` };
  }
}

interface FetchResult<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** The data of a 2xx answer, or a NetBoxError naming the call and NetBox's own error body. */
export async function must<T>(call: Promise<FetchResult<T>>, what: string): Promise<{ data: T; response: Response }> {
  const res = await call;
  if (res.response.ok && res.data !== undefined) return { data: res.data, response: res.response };
  if (res.response.ok && res.response.status === 204) return { data: undefined as T, response: res.response };
  const detail = typeof res.error === "string" ? res.error : JSON.stringify(res.error ?? null).slice(0, 2000);
  throw new NetBoxError(res.response.status === 412 ? "netbox-conflict" : "netbox-http", what, res.response.status, detail);
}

/** Follows `next` links of a paginated list (NetBox's `{count,next,results}`). */
export async function listAll<T>(
  first: Promise<FetchResult<{ results: T[]; next?: string | null }>>,
  what: string,
  nb: NetBox,
): Promise<T[]> {
  const { data } = await must(first, what);
  const out = [...data.results];
  let next = data.next ?? null;
  let pages = 0;
  while (next) {
    if (++pages > 1000) throw new NetBoxError("netbox-bad-response", what, undefined, "more than 1000 pages");
    // Follow only the path and query of `next`: the token goes to the configured NetBox, never elsewhere.
    const u = new URL(next);
    const r = await getPage(`${nb.url}${u.pathname}${u.search}`, nb.authorization, what);
    if (!r.ok) throw new NetBoxError("netbox-http", what, r.status, (await r.text()).slice(0, 2000));
    const page = (await r.json()) as { results: T[]; next?: string | null };
    out.push(...page.results);
    next = page.next ?? null;
  }
  return out;
}

/** One page of a list: a GET, sent once more if its connection failed (as the client's reads are). */
async function getPage(url: string, authorization: string, what: string): Promise<Response> {
  const deadline = AbortSignal.timeout(30_000);
  for (let attempt = 1; ; attempt++) {
    try {
      return await fetch(url, { headers: { authorization, accept: "application/json" }, signal: deadline });
    } catch (e) {
      if (attempt === 1 && retriable("GET", e, deadline)) continue;
      throw new NetBoxError("netbox-unreachable", what, undefined, connectionDetail(e));
    }
  }
}

/**
 * NetBox 4.7 returns select custom fields as `{value,label}` (multiselect as a list of those); earlier versions
 * return the raw value. Writes always take the raw value. This returns the raw value for either form.
 */
export function cfValue(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(cfValue);
  if (v && typeof v === "object" && "value" in v && "label" in v && Object.keys(v).length === 2) return (v as { value: unknown }).value;
  return v;
}

/** A NetBox choice field (`status`, `kind`, ...) read as `{value,label}` or raw: the raw value. */
export function choiceValue(v: unknown): string | undefined {
  const raw = cfValue(v);
  return typeof raw === "string" ? raw : undefined;
}
