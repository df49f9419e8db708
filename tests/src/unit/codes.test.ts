/**
 * One case for fleetd's codes: every error, refusal and outcome code is kebab-case (`netbox-http`,
 * `boot-mac-unproven`), and no check name has an underscore (`quote.extraData`, `workflow.boot-job`). The codes
 * reach NetBox journal entries, HTTP error bodies and logs; snake_case belongs to NetBox field names, metric names
 * and JSON properties, which are not codes.
 *
 * Collected three ways: the declared code lists (each error class's list, the handler's refusals, the webhook
 * answers), the `error`/`reason` values of both generated OpenAPI documents, and a scan of product sources for
 * literals in code positions (`new XError("code"`, `code: "…"`, `readonly code = "…"`, `refuse("…"`, checks).
 */
import { strict as assert } from "node:assert";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";
import { INVENTORY_ERROR_CODES } from "@fleetd/platform/inventory";
import { NETBOX_ERROR_CODES, REFUSAL_CODES, SETUP_ERROR_CODES, WEBHOOK_REFUSALS } from "@fleetd/platform/netbox";
import { OUTAGE_REASONS } from "@fleetd/platform/outage";
import { REFUSAL_ERRORS } from "@fleetd/platform/protocol";
import { RECONCILE_ERROR_CODES } from "@fleetd/platform/reconcile";
import { RETIREMENT_PROGRESS_ERROR_CODES } from "@fleetd/platform/retire";
import { SPIRE_ERROR_CODES } from "@fleetd/platform/spire";
import { TINKERBELL_ERROR_CODES } from "@fleetd/platform/tinkerbell";
import { WEBHOOK_OUTCOMES } from "@fleetd/netbox-script/server";
import { CONFIG_FETCH_ERRORS } from "@fleetd/talos-config-server/configFetch";
import { INTERNAL_OPENAPI_FILE, OPENAPI_FILE } from "@fleetd/talos-config-server/openapi";
import { DEVID_ERROR_CODES } from "@fleetd/tink-action/devidStore";
import { EVENT_LOG_ERROR_CODES } from "@fleetd/tink-action/eventLog";

const root = resolve(fileURLToPath(import.meta.url), "../../../..");
const KEBAB = /^[a-z0-9]+(-[a-z0-9]+)*$/;
/** A check name: dot-separated segments, each kebab or camelCase (`quote.extraData`, `policy.secure-boot`). */
const CHECK = /^[a-zA-Z0-9]+(-[a-zA-Z0-9]+)*(\.[a-zA-Z0-9]+(-[a-zA-Z0-9]+)*)*$/;

const notKebab = (codes: Iterable<string>) => [...codes].filter((c) => !KEBAB.test(c));

test("declared code lists are kebab-case", () => {
  const lists: Record<string, readonly string[]> = {
    TINKERBELL_ERROR_CODES,
    SPIRE_ERROR_CODES,
    NETBOX_ERROR_CODES,
    WEBHOOK_REFUSALS,
    WEBHOOK_OUTCOMES,
    SETUP_ERROR_CODES,
    REFUSAL_CODES,
    RECONCILE_ERROR_CODES,
    INVENTORY_ERROR_CODES,
    RETIREMENT_PROGRESS_ERROR_CODES,
    REFUSAL_ERRORS,
    CONFIG_FETCH_ERRORS,
    OUTAGE_REASONS,
    DEVID_ERROR_CODES,
    EVENT_LOG_ERROR_CODES,
  };
  for (const [name, codes] of Object.entries(lists)) {
    assert.ok(codes.length > 0, `${name} is empty`);
    assert.deepEqual(notKebab(codes), [], `${name} holds codes that are not kebab-case`);
  }
});

/** Every `enum`/`const` value of a property named `error` or `reason` anywhere in a document. */
function errorNames(doc: unknown, out = new Set<string>()): Set<string> {
  if (Array.isArray(doc)) for (const x of doc) errorNames(x, out);
  else if (doc !== null && typeof doc === "object") {
    for (const [k, v] of Object.entries(doc)) {
      if ((k === "error" || k === "reason") && v !== null && typeof v === "object") {
        const s = v as { enum?: unknown[]; const?: unknown };
        for (const e of [...(s.enum ?? []), ...(s.const !== undefined ? [s.const] : [])]) if (typeof e === "string") out.add(e);
      }
      errorNames(v, out);
    }
  }
  return out;
}

test("the `error` and `reason` names of both OpenAPI documents are kebab-case", () => {
  for (const file of [OPENAPI_FILE, INTERNAL_OPENAPI_FILE]) {
    const names = errorNames(parse(readFileSync(join(root, file), "utf8")));
    assert.ok(names.size >= 5, `${file}: found only ${[...names].join(", ")}`);
    assert.deepEqual(notKebab(names), [], `${file}: error names that are not kebab-case`);
  }
});

/** Product sources: every package's src/, without tests. */
function productSources(): string[] {
  const dirs = [
    ...readdirSync(join(root, "shared")).map((p) => join(root, "shared", p, "src")),
    ...["netbox-script", "tink-action", "talos-config-server"].map((p) => join(root, p, "src")),
  ];
  const out: string[] = [];
  const walk = (d: string): void => {
    let entries;
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".ts") && !e.name.endsWith(".test.ts") && !e.name.endsWith(".d.ts")) out.push(p);
    }
  };
  for (const d of dirs) walk(d);
  return out;
}

/** String literals in the positions where fleetd puts a code, and where it puts a check name. */
const CODE_SITES = [
  /\bnew [A-Z]\w*Error\(\s*"([a-z][a-z0-9_-]*)"/g,
  /\bcode: "([^"]*)"/g,
  /\breadonly code = "([^"]*)"/g,
  /\brefuse\(\s*"([^"]*)"/g,
];
const CHECK_SITES = [/(?<![\w])check\([^,()]*,\s*"([^"]*)"/g, /\.fail\(\s*"([^"]*)"/g, /\bcheck: "([^"]*)"/g];

/** Not fleetd's: zod's issue codes, Node's errno codes. */
const FOREIGN = new Set(["custom", "invalid_type", "invalid_key", "ETIMEDOUT"]);

function scanSources(files: readonly { path: string; text: string }[]): { codes: string[]; checks: string[] } {
  const codes: string[] = [];
  const checks: string[] = [];
  for (const { path, text } of files) {
    for (const re of CODE_SITES) for (const m of text.matchAll(re)) if (!FOREIGN.has(m[1]!) && !KEBAB.test(m[1]!)) codes.push(`${path}: ${m[1]}`);
    // A check name is one word (a label for people, with spaces, is not a name): flag it when it is not one.
    for (const re of CHECK_SITES) for (const m of text.matchAll(re)) if (!/\s/.test(m[1]!) && !CHECK.test(m[1]!)) checks.push(`${path}: ${m[1]}`);
  }
  return { codes, checks };
}

test("the scan finds a snake code and a snake check name (it can fail)", () => {
  const r = scanSources([
    { path: "a.ts", text: 'throw new TinkerbellError("snake_one", "x"); return refuse("snake_two", "y"); const c = { code: "snake_three" };' },
    { path: "b.ts", text: 'c.check(false, "step.snake_check", "d"); c.fail("snake_fail", "d"); ok = { code: "custom", check: "quote.extraData" };' },
  ]);
  assert.deepEqual(r.codes.sort(), ["a.ts: snake_one", "a.ts: snake_three", "a.ts: snake_two"]);
  assert.deepEqual(r.checks, ["b.ts: step.snake_check", "b.ts: snake_fail"]);
});

test("product sources use kebab-case codes and check names without underscores", () => {
  const files = productSources().map((p) => ({ path: relative(root, p), text: readFileSync(p, "utf8") }));
  assert.ok(files.length > 100, `only ${files.length} source files found under ${root}`);
  const r = scanSources(files);
  assert.deepEqual(r.codes, [], "codes that are not kebab-case");
  assert.deepEqual(r.checks, [], "check names that are not dot-separated kebab/camelCase segments");
});
