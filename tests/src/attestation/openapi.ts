/**
 * Checking what talos-config-server really does against its OpenAPI 3.1 document: a recorder that performs
 * and keeps every HTTP exchange (fleetd's protocol client goes through it as its ServerTransport), and a
 * validator that judges requests and responses by the document's schemas with a real JSON Schema 2020-12
 * validator (Ajv). OpenAPI 3.1 schemas are JSON Schema 2020-12 (the document says so in jsonSchemaDialect).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { parse as parseYaml } from "yaml";
import type { ServerTransport } from "@fleetd/platform/protocol/client";
import { repoRoot } from "../netbox/fixture.js";

export const OPENAPI_FILE = join(repoRoot, "talos-config-server/openapi.yaml");
/** The replicas' internal API (HA), served only on the internal mutual-TLS listener. */
export const INTERNAL_OPENAPI_FILE = join(repoRoot, "talos-config-server/openapi-internal.yaml");

export interface Exchange {
  method: string;
  /** Path without the query. */
  path: string;
  query: URLSearchParams;
  requestContentType?: string;
  /** The request body as sent (text). */
  requestText?: string;
  status: number;
  /** Media type without parameters, e.g. application/json. */
  contentType: string;
  /** Response body: parsed JSON for JSON media types, else the text. */
  body: unknown;
  text: string;
}

/** Performs requests against one server and keeps every exchange. */
export class Recorder {
  readonly exchanges: Exchange[] = [];

  constructor(private readonly baseUrl: string) {}

  async request(method: string, pathAndQuery: string, body?: { text: string; contentType: string }): Promise<Exchange> {
    const url = new URL(pathAndQuery, this.baseUrl);
    const res = await fetch(url, {
      method,
      ...(body ? { body: body.text, headers: { "content-type": body.contentType } } : {}),
    });
    const text = await res.text();
    const contentType = (res.headers.get("content-type") ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
    let parsed: unknown = text;
    if (contentType === "application/json") parsed = JSON.parse(text);
    const ex: Exchange = {
      method: method.toLowerCase(),
      path: url.pathname,
      query: url.searchParams,
      ...(body ? { requestContentType: body.contentType, requestText: body.text } : {}),
      status: res.status,
      contentType,
      body: parsed,
      text,
    };
    this.exchanges.push(ex);
    return ex;
  }

  post(path: string, json: unknown): Promise<Exchange> {
    return this.request("POST", path, { text: JSON.stringify(json), contentType: "application/json" });
  }

  get(pathAndQuery: string): Promise<Exchange> {
    return this.request("GET", pathAndQuery);
  }

  /** fleetd's protocol client talks through this. */
  transport(): ServerTransport {
    return {
      post: async (path, body) => {
        const ex = await this.post(path, body);
        return { status: ex.status, body: ex.body };
      },
    };
  }
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
interface MediaType {
  schema?: Json;
}
interface ResponseObject {
  description: string;
  content?: Record<string, MediaType>;
}
interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  schema?: Json;
}
interface Operation {
  operationId?: string;
  parameters?: Parameter[];
  requestBody?: { required?: boolean; content: Record<string, MediaType> };
  responses: Record<string, ResponseObject | { $ref: string }>;
}
export interface OpenApiDocument {
  openapi: string;
  jsonSchemaDialect?: string;
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Json>; responses?: Record<string, ResponseObject> };
}

const ROOT_ID = "urn:fleetd:talos-config-server:openapi";

/** `#/components/schemas/X` → the validator's root schema `$defs/X`. */
function rewriteRefs(v: Json): Json {
  if (Array.isArray(v)) return v.map(rewriteRefs);
  if (v && typeof v === "object") {
    const out: Record<string, Json> = {};
    for (const [k, x] of Object.entries(v)) {
      if (k === "$ref" && typeof x === "string") {
        const m = /^#\/components\/schemas\/([A-Za-z0-9_.-]+)$/.exec(x);
        if (!m) throw new Error(`unsupported $ref ${x}`);
        out[k] = `${ROOT_ID}#/$defs/${m[1]}`;
      } else {
        out[k] = rewriteRefs(x);
      }
    }
    return out;
  }
  return v;
}

export class OpenApiValidator {
  readonly doc: OpenApiDocument;
  private readonly ajv: Ajv2020;
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(text: string) {
    this.doc = parseYaml(text) as OpenApiDocument;
    if (!/^3\.1\.\d+$/.test(this.doc.openapi)) throw new Error(`not an OpenAPI 3.1 document: openapi ${this.doc.openapi}`);
    // strict: unknown keywords, ignored formats and ambiguous types are errors in the document, not silently passed
    this.ajv = new Ajv2020({ strict: true, strictTypes: false, allErrors: true, validateFormats: true });
    addFormats.default(this.ajv);
    this.ajv.addSchema({ $id: ROOT_ID, $defs: rewriteRefs(this.doc.components.schemas) as Record<string, Json> } as object);
    // Compile every schema in the document once, so a broken schema fails here and not at first use.
    for (const name of Object.keys(this.doc.components.schemas)) this.schema({ $ref: `#/components/schemas/${name}` });
    for (const [path, item] of Object.entries(this.doc.paths)) {
      for (const method of Object.keys(item)) {
        const op = this.operation(method, path);
        for (const mt of Object.values(op?.requestBody?.content ?? {})) if (mt.schema) this.schema(mt.schema);
        for (const p of op?.parameters ?? []) if (p.schema) this.schema(p.schema);
        for (const status of Object.keys(op?.responses ?? {})) {
          for (const mt of Object.values(this.response(method, path, status)?.content ?? {})) if (mt.schema) this.schema(mt.schema);
        }
      }
    }
  }

  static fromFile(path = OPENAPI_FILE): OpenApiValidator {
    return new OpenApiValidator(readFileSync(path, "utf8"));
  }

  private schema(s: Json): ValidateFunction {
    const key = JSON.stringify(s);
    let v = this.compiled.get(key);
    if (!v) {
      v = this.ajv.compile(rewriteRefs(s) as object);
      this.compiled.set(key, v);
    }
    return v;
  }

  private check(s: Json, value: unknown, where: string): string[] {
    const v = this.schema(s);
    if (v(value)) return [];
    return (v.errors ?? []).map((e) => `${where}${e.instancePath || ""}: ${e.message ?? e.keyword}${e.params && Object.keys(e.params).length ? ` ${JSON.stringify(e.params)}` : ""}`);
  }

  operation(method: string, path: string): Operation | undefined {
    return this.doc.paths[path]?.[method.toLowerCase()];
  }

  response(method: string, path: string, status: string): ResponseObject | undefined {
    const r = this.operation(method, path)?.responses[status];
    if (!r) return undefined;
    if ("$ref" in r) {
      const m = /^#\/components\/responses\/([A-Za-z0-9_.-]+)$/.exec(r.$ref);
      const resolved = m ? this.doc.components.responses?.[m[1] as string] : undefined;
      if (!resolved) throw new Error(`unresolved response $ref ${r.$ref}`);
      return resolved;
    }
    return r;
  }

  /** Problems with a request body (empty list: the document accepts it). */
  requestProblems(method: string, path: string, contentType: string | undefined, text: string | undefined): string[] {
    const op = this.operation(method, path);
    if (!op) return [`${method.toUpperCase()} ${path} is not in the document`];
    if (!op.requestBody) return text === undefined || text === "" ? [] : ["the operation takes no body"];
    if (text === undefined) return op.requestBody.required ? ["a body is required"] : [];
    const media = (contentType ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
    const mt = op.requestBody.content[media];
    if (!mt) return [`request media type ${media || "(none)"} is not documented`];
    let value: unknown = text;
    if (media === "application/json") {
      // RFC 8259 §8.1: JSON exchanged between systems is UTF-8
      const charset = /;\s*charset=("?)([^";]+)\1/i.exec(contentType ?? "")?.[2];
      if (charset && charset.toLowerCase() !== "utf-8") return [`JSON in charset ${charset} (RFC 8259: UTF-8)`];
      try {
        value = JSON.parse(text);
      } catch {
        return ["the body is not JSON"];
      }
    }
    return mt.schema ? this.check(mt.schema, value, "request") : [];
  }

  /** Problems with a request value already parsed (for property tests against the zod schemas). */
  requestValueProblems(method: string, path: string, value: unknown): string[] {
    const schema = this.operation(method, path)?.requestBody?.content["application/json"]?.schema;
    if (!schema) return ["no application/json request body documented"];
    return this.check(schema, value, "request");
  }

  /** Problems with the query parameters. */
  queryProblems(method: string, path: string, query: URLSearchParams): string[] {
    const op = this.operation(method, path);
    if (!op) return [`${method.toUpperCase()} ${path} is not in the document`];
    const out: string[] = [];
    const known = new Set((op.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name));
    for (const p of op.parameters ?? []) {
      if (p.in !== "query") continue;
      const values = query.getAll(p.name);
      if (values.length === 0) {
        if (p.required) out.push(`query parameter ${p.name} is required`);
        continue;
      }
      if (values.length > 1) out.push(`query parameter ${p.name} is given ${values.length} times`);
      if (p.schema) out.push(...this.check(p.schema, values[0], `query.${p.name}`));
    }
    for (const k of query.keys()) if (!known.has(k)) out.push(`query parameter ${k} is not documented`);
    return out;
  }

  /** Problems with a response: its status documented for the operation, its media type, its body. */
  responseProblems(ex: Pick<Exchange, "method" | "path" | "status" | "contentType" | "body">): string[] {
    const op = this.operation(ex.method, ex.path);
    if (!op) return [`${ex.method.toUpperCase()} ${ex.path} is not in the document`];
    const r = this.response(ex.method, ex.path, String(ex.status));
    if (!r) return [`status ${ex.status} is not documented for ${ex.method.toUpperCase()} ${ex.path} (documented: ${Object.keys(op.responses).join(", ")})`];
    const mt = r.content?.[ex.contentType];
    if (!mt) return [`media type ${ex.contentType || "(none)"} is not documented for ${ex.status} (documented: ${Object.keys(r.content ?? {}).join(", ") || "none"})`];
    return mt.schema ? this.check(mt.schema, ex.body, `response ${ex.status}`) : [];
  }

  /** Every (method, path) in the document. */
  operations(): { method: string; path: string }[] {
    return Object.entries(this.doc.paths).flatMap(([path, item]) => Object.keys(item).map((method) => ({ method, path })));
  }
}
