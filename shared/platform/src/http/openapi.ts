/**
 * An OpenAPI 3.1 document built from zod schemas and a small route table, so an HTTP API is described once: the
 * zod schemas the server parses with (and builds its answers to) are the document's schemas. zod's own
 * `z.toJSONSchema` does the conversion (JSON Schema 2020-12, the input side of every transform: what goes over
 * the wire); this module only places the results — named schemas under `components.schemas`, the rest inline —
 * and adds what zod does not know (paths, methods, status codes, media types, descriptions).
 *
 * What JSON Schema cannot say (a `superRefine`, a transform's output) is not in the document; a schema whose
 * conversion would need a shared `$defs` outside `components`, or that refers to an unnamed inline schema, is
 * an error here, never a silently different document.
 */
import { Document, isScalar } from "yaml";
import { z } from "zod";

/** A schema object of the document (JSON). */
export type JsonSchema = { [k: string]: unknown };
export type Schema = z.ZodType;

export interface HeaderSpec {
  description?: string;
  required?: boolean;
  schema: Schema;
}

export interface ResponseSpec {
  description: string;
  headers?: Record<string, HeaderSpec>;
  /** Media type → body schema. */
  content?: Record<string, Schema>;
}

export interface ParameterSpec {
  name: string;
  in: "query" | "header" | "path";
  required: boolean;
  description?: string;
  schema: Schema;
}

export interface OperationSpec {
  method: "get" | "post" | "put" | "delete" | "patch";
  path: string;
  tags: string[];
  operationId: string;
  summary: string;
  description?: string;
  parameters?: ParameterSpec[];
  /** The JSON request body (required when given). */
  requestBody?: Schema;
  /** Status → a response, or the name of one in `components.responses`. */
  responses: Record<string, ResponseSpec | string>;
}

export interface ApiSpec {
  info: Record<string, unknown>;
  tags: { name: string; description: string }[];
  operations: OperationSpec[];
  components: {
    /** Named schemas (`#/components/schemas/<name>`); any schema used elsewhere is referenced by its name. */
    schemas: Record<string, Schema>;
    responses?: Record<string, ResponseSpec>;
  };
}

const SCHEMAS = "#/components/schemas/";
const INLINE = "__inline";

/** Every `$ref` in a converted schema must name a component; `__inline…` would be a schema that has no name. */
function checkRefs(v: unknown, names: Set<string>, where: string): void {
  if (Array.isArray(v)) return v.forEach((x) => checkRefs(x, names, where));
  if (!v || typeof v !== "object") return;
  for (const [k, x] of Object.entries(v)) {
    if (k === "$ref") {
      const name = typeof x === "string" && x.startsWith(SCHEMAS) ? x.slice(SCHEMAS.length) : undefined;
      if (!name || !names.has(name)) throw new Error(`${where}: $ref ${String(x)} names no component (a schema used in two places needs a name in components.schemas)`);
    } else {
      checkRefs(x, names, where);
    }
  }
}

/** The OpenAPI 3.1 document of `spec` (a plain JSON value, keys in the order OpenAPI documents usually have). */
export function openApiDocument(spec: ApiSpec): JsonSchema {
  const registry = z.registry<{ id: string }>();
  const nameOf = new Map<Schema, string>();
  for (const [name, schema] of Object.entries(spec.components.schemas)) {
    if (nameOf.has(schema)) throw new Error(`components.schemas.${name}: the same schema is already named ${nameOf.get(schema)}`);
    nameOf.set(schema, name);
    registry.add(schema, { id: name });
  }
  // Every other schema the route table uses is converted in the same pass (so references agree), then inlined.
  const inline = new Map<Schema, string>();
  const use = (s: Schema): void => {
    if (nameOf.has(s) || inline.has(s)) return;
    const id = `${INLINE}${inline.size}`;
    inline.set(s, id);
    registry.add(s, { id });
  };
  const responses = (r: ResponseSpec) => {
    for (const h of Object.values(r.headers ?? {})) use(h.schema);
    for (const s of Object.values(r.content ?? {})) use(s);
  };
  for (const op of spec.operations) {
    for (const p of op.parameters ?? []) use(p.schema);
    if (op.requestBody) use(op.requestBody);
    for (const r of Object.values(op.responses)) if (typeof r !== "string") responses(r);
  }
  for (const r of Object.values(spec.components.responses ?? {})) responses(r);

  const { schemas } = z.toJSONSchema(registry, { target: "draft-2020-12", io: "input", unrepresentable: "throw", cycles: "throw", reused: "inline", uri: (id) => SCHEMAS + id });
  if ("__shared" in schemas) throw new Error(`schemas shared without a name: ${Object.keys((schemas["__shared"] as { $defs?: object }).$defs ?? {}).join(", ")}`);
  const names = new Set(nameOf.values());
  const converted = (id: string): JsonSchema => {
    const { $schema: _dialect, $id: _id, ...rest } = schemas[id] as JsonSchema;
    checkRefs(rest, names, id);
    return rest;
  };
  const schemaOf = (s: Schema): JsonSchema => {
    const name = nameOf.get(s);
    if (name) return { $ref: SCHEMAS + name };
    return converted(inline.get(s) as string);
  };
  const response = (r: ResponseSpec) => ({
    description: r.description,
    ...(r.headers ? { headers: Object.fromEntries(Object.entries(r.headers).map(([k, h]) => [k, { ...(h.description ? { description: h.description } : {}), ...(h.required ? { required: true } : {}), schema: schemaOf(h.schema) }])) } : {}),
    ...(r.content ? { content: Object.fromEntries(Object.entries(r.content).map(([media, s]) => [media, { schema: schemaOf(s) }])) } : {}),
  });
  /** A parameter's schema; its description, when the parameter says the same, only once (on the parameter). */
  const parameterSchema = (p: ParameterSpec): JsonSchema => {
    const { description, ...rest } = schemaOf(p.schema);
    return description === undefined || description === p.description ? rest : { description, ...rest };
  };
  const responseNames = new Set(Object.keys(spec.components.responses ?? {}));

  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of spec.operations) {
    const item = (paths[op.path] ??= {});
    if (item[op.method]) throw new Error(`${op.method.toUpperCase()} ${op.path} is in the route table twice`);
    item[op.method] = {
      tags: op.tags,
      operationId: op.operationId,
      summary: op.summary,
      ...(op.description ? { description: op.description } : {}),
      ...(op.parameters
        ? { parameters: op.parameters.map((p) => ({ name: p.name, in: p.in, required: p.required, ...(p.description ? { description: p.description } : {}), schema: parameterSchema(p) })) }
        : {}),
      ...(op.requestBody ? { requestBody: { required: true, content: { "application/json": { schema: schemaOf(op.requestBody) } } } } : {}),
      responses: Object.fromEntries(
        Object.entries(op.responses).map(([status, r]) => {
          if (typeof r !== "string") return [status, response(r)];
          if (!responseNames.has(r)) throw new Error(`${op.method.toUpperCase()} ${op.path} ${status}: no response named ${r}`);
          return [status, { $ref: `#/components/responses/${r}` }];
        }),
      ),
    };
  }
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    info: spec.info,
    tags: spec.tags,
    paths,
    components: {
      ...(spec.components.responses ? { responses: Object.fromEntries(Object.entries(spec.components.responses).map(([k, r]) => [k, response(r)])) } : {}),
      schemas: Object.fromEntries([...nameOf.values()].map((name) => [name, converted(name)])),
    },
  };
}

/**
 * The document as YAML. Its first line says where it comes from (the file must not be edited by hand), as a
 * comment after `openapi: 3.1.0`: the text still begins with the version, as readers sniffing it expect.
 */
export function openApiYaml(spec: ApiSpec, generatedBy: string): string {
  const doc = new Document(openApiDocument(spec));
  const version = doc.get("openapi", true);
  if (!isScalar(version)) throw new Error("the document has no openapi version");
  version.comment = ` Generated by ${generatedBy}; do not edit.`;
  return doc.toString({ lineWidth: 0 });
}
