/**
 * talos-config-server against its OpenAPI 3.1 document, on the real attestation world (NetBox, swtpm, SoftHSM2,
 * the express server with SQLite). fleetd's protocol client runs intake and provision through a recorder that
 * keeps every request and response; refusals, replays, malformed bodies and the config fetch are driven the
 * same way. Then every recorded exchange is judged by the document with Ajv (JSON Schema 2020-12): the request
 * body (and whether the server's verdict on its shape agrees), the status (documented for that path), the
 * media type and the body. Deliberately broken copies of real responses must fail, and the document's request
 * schemas must agree with the server's zod schemas on mutated real bodies (fast-check).
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { attest } from "@fleetd/platform/protocol/client";
import { ChallengeRequest, Confirm, Evidence } from "@fleetd/platform/protocol";
import { TcpTransport, TpmClient } from "@fleetd/platform/tpmclient";
import { startSwtpm } from "../harness/swtpm.js";
import { OPENAPI_FILE, OpenApiValidator, Recorder, type Exchange } from "./openapi.js";
import { refusal as refusedBy, runHonest } from "./machine.js";
import { NODE, startWorld, type World } from "./world.js";
import { TALOS_VERSION } from "../talos/goTools.js";
const run = (mode: "intake" | "provision" | "attest", over = {}) => runHonest(w, mode, over, w.withWorkflows(rec.transport()));

const RUNS = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 300);

let w: World;
let rec: Recorder;
const doc = OpenApiValidator.fromFile();

before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION });
  rec = new Recorder(w.baseUrl);
}, { timeout: 20 * 60_000 });
after(async () => {
  await w?.stop();
});

/** Checks that the server rejected for the request's shape (JSON, schema, size, encoding) — not for its content. */
function shapeRefusal(ex: Exchange): boolean {
  if (ex.status === 413 || ex.status === 415) return true;
  if (ex.status !== 400) return false;
  const reasons = (ex.body as { reasons?: { check: string }[] }).reasons ?? [];
  return reasons.length > 0 && reasons.every((r) => ["request.shape", "request.json", "request.body"].includes(r.check));
}

/** Everything the document says about one exchange; empty when it all holds. */
function judge(ex: Exchange): string[] {
  const where = `${ex.method.toUpperCase()} ${ex.path}${ex.query.size ? "?" + ex.query.toString().replace(/code=[0-9a-f]{64}/, "code=<64 hex>") : ""} → ${ex.status}`;
  const problems = doc.responseProblems(ex).map((p) => `${where}: ${p}`);
  if (ex.method === "post") {
    const req = doc.requestProblems(ex.method, ex.path, ex.requestContentType, ex.requestText);
    // The document and the server must agree on which bodies are well-formed.
    if (req.length === 0 && shapeRefusal(ex)) problems.push(`${where}: the document accepts the body, but the server refused its shape: ${JSON.stringify(ex.body)}`);
    if (req.length > 0 && !shapeRefusal(ex)) problems.push(`${where}: the server accepted the body's shape, but the document refuses it: ${req.slice(0, 3).join("; ")}`);
  } else {
    const q = doc.queryProblems(ex.method, ex.path, ex.query);
    if (ex.path === "/talos/config") {
      if (q.length === 0 && ex.status === 400) problems.push(`${where}: the document accepts the query, but the server called it malformed`);
      if (q.length > 0 && ![400, 429].includes(ex.status)) problems.push(`${where}: the query breaks the document (${q.join("; ")}), but the server answered ${ex.status}`);
    } else if (q.length > 0) {
      problems.push(`${where}: ${q.join("; ")}`);
    }
  }
  return problems;
}

function assertDocumented(exs: Exchange[]): void {
  const problems = exs.flatMap(judge);
  assert.deepEqual(problems, [], problems.join("\n"));
}

const since = (n: number) => rec.exchanges.slice(n);

test("the document is OpenAPI 3.1 with JSON Schema 2020-12 and is served at GET /openapi.yaml", async () => {
  assert.match(doc.doc.openapi, /^3\.1\./);
  assert.equal(doc.doc.jsonSchemaDialect, "https://json-schema.org/draft/2020-12/schema");
  const ex = await rec.get("/openapi.yaml");
  assert.equal(ex.status, 200);
  assert.equal(ex.contentType, "application/yaml");
  assert.equal(ex.text, readFileSync(OPENAPI_FILE, "utf8"), "the served document is the file");
  assertDocumented([ex]);
});

test("the document and the express app list the same operations", () => {
  const app = w.server.listeners("request")[0] as unknown as { router: { stack: { route?: { path: string; methods: Record<string, boolean> } }[] } };
  const routes = app.router.stack
    .flatMap((l) => (l.route ? Object.keys(l.route.methods).filter((m) => l.route?.methods[m]).map((m) => `${m} ${l.route?.path}`) : []))
    .sort();
  // The replicas' /internal/* is not on this listener (openapi-internal.yaml, tests/src/ha/replicas.it.test.ts).
  const documented = doc.operations().map((o) => `${o.method} ${o.path}`).sort();
  assert.deepEqual(routes, documented);
});

test("intake and provision through fleetd's client: every request and response is as documented", async () => {
  const start = rec.exchanges.length;
  const intake = await run("intake");
  assert.equal(intake.mode, "intake");
  const provision = await run("provision");
  assert.match(provision.installCode ?? "", /^[0-9a-f]{64}$/);
  const exs = since(start);
  assert.deepEqual(
    exs.map((e) => `${e.path} ${e.status}`),
    ["challenge", "evidence", "confirm", "challenge", "evidence", "confirm"].map((s) => `/v1/attest/${s} 200`),
  );
  assertDocumented(exs);
  // the config fetch with the code the TPM unwrapped: once, then never again
  const uuid = w.claims().uuid;
  const ok = await rec.get(`/talos/config?uuid=${uuid}&code=${provision.installCode}`);
  assert.equal(ok.status, 200);
  assert.match(ok.text, new RegExp(`hostname: ${NODE}`));
  const again = await rec.get(`/talos/config?uuid=${uuid}&code=${provision.installCode}`);
  assert.equal(again.status, 404);
  assertDocumented([ok, again]);
});

test("retries, replays and unknown sessions: the kept 200, and 409 and 404 bodies, are as documented", async () => {
  const ok = rec.exchanges.filter((e) => e.status === 200 && e.requestText !== undefined);
  const evidence = ok.find((e) => e.path === "/v1/attest/evidence");
  const confirm = ok.find((e) => e.path === "/v1/attest/confirm");
  assert.ok(evidence?.requestText && confirm?.requestText);
  const start = rec.exchanges.length;
  // The same request again: the answer kept for it (200, the same body).
  const retryE = await rec.request("POST", "/v1/attest/evidence", { text: evidence.requestText, contentType: "application/json" });
  assert.equal(retryE.status, 200);
  assert.deepEqual(retryE.body, evidence.body);
  const retryC = await rec.request("POST", "/v1/attest/confirm", { text: confirm.requestText, contentType: "application/json" });
  assert.equal(retryC.status, 200);
  // Any other request over a spent session: 409.
  const flipped = (b64: string) => {
    const b = Buffer.from(b64, "base64");
    b[0] = (b[0] ?? 0) ^ 1;
    return b.toString("base64");
  };
  const ev = JSON.parse(evidence.requestText) as { eventLog: string };
  const replayE = await rec.post("/v1/attest/evidence", { ...ev, eventLog: flipped(ev.eventLog) });
  assert.equal(replayE.status, 409);
  const conf = JSON.parse(confirm.requestText) as { signature: string };
  const replayC = await rec.post("/v1/attest/confirm", { ...conf, signature: flipped(conf.signature) });
  assert.equal(replayC.status, 409);
  const stranger = { ...(JSON.parse(evidence.requestText) as Record<string, unknown>), sessionId: "0".repeat(32) };
  assert.equal((await rec.post("/v1/attest/evidence", stranger)).status, 404);
  assert.equal((await rec.post("/v1/attest/confirm", { sessionId: "f".repeat(32), signature: "AAAA" })).status, 404);
  assertDocumented(since(start));
});

test("refusals: pending (an unknown TPM), refused (claims), malformed bodies, non-JSON, too large, wrong charset", async () => {
  const start = rec.exchanges.length;
  const other = await startSwtpm({ pcrBanks: ["sha1", "sha256"] });
  try {
    const tpm = new TpmClient(new TcpTransport(other.host, other.port));
    try {
      const r = await refusedBy(attest({ tpm, server: rec.transport(), claims: w.claims({ serial: "STRANGER-OPENAPI" }), eventLog: w.eventLog }));
      assert.equal(r.status, 403);
      assert.equal(r.refusal.error, "pending");
    } finally {
      await tpm.close();
    }
  } finally {
    await other.stop();
  }
  const r = await refusedBy(run("attest", { serial: "NOT-THIS-ONE" }));
  assert.equal(r.status, 403);
  assert.ok(r.refusal.reasons.some((x) => x.check === "claims.serial"));

  const challenge = rec.exchanges.find((e) => e.path === "/v1/attest/challenge" && e.status === 200);
  assert.ok(challenge?.requestText);
  const body = JSON.parse(challenge.requestText) as Record<string, unknown>;
  const cases: [string, Promise<Exchange>, number][] = [
    ["empty object", rec.post("/v1/attest/challenge", {}), 400],
    ["unknown property", rec.post("/v1/attest/challenge", { ...body, extra: 1 }), 400],
    ["EK public not base64", rec.post("/v1/attest/challenge", { ...body, eks: [{ public: "not base64!" }] }), 400],
    ["EK public that does not parse", rec.post("/v1/attest/challenge", { ...body, eks: [{ public: "AAEC" }] }), 400],
    ["evidence without secrets", rec.post("/v1/attest/evidence", { sessionId: "x" }), 400],
    ["confirm with a number", rec.post("/v1/attest/confirm", { sessionId: 7, signature: "AAAA" }), 400],
    ["not JSON", rec.request("POST", "/v1/attest/challenge", { text: "{claims:", contentType: "application/json" }), 400],
    ["text/plain", rec.request("POST", "/v1/attest/confirm", { text: "hello", contentType: "text/plain" }), 400],
    ["latin1", rec.request("POST", "/v1/attest/confirm", { text: JSON.stringify({ sessionId: "a", signature: "AAAA" }), contentType: "application/json; charset=latin1" }), 415],
    ["over 2 MiB", rec.post("/v1/attest/challenge", { ...body, akPublic: "A".repeat(2 * 1024 * 1024 + 16) }), 413],
  ];
  for (const [what, p, status] of cases) assert.equal((await p).status, status, what);
  assertDocumented(since(start));
});

test("config fetch refusals: the literal ${code}, malformed, unknown, then rate-limited per address", async () => {
  const start = rec.exchanges.length;
  const uuid = w.claims().uuid;
  assert.equal((await rec.get(`/talos/config?uuid=${uuid}&code=$%7Bcode%7D`)).status, 400);
  assert.equal((await rec.get(`/talos/config?uuid=not-a-uuid&code=${"a".repeat(64)}`)).status, 400);
  assert.equal((await rec.get(`/talos/config?code=${"a".repeat(64)}`)).status, 400);
  let limited: Exchange | undefined;
  for (let i = 0; i < 10 && !limited; i++) {
    const ex = await rec.get(`/talos/config?uuid=${uuid}&code=${i.toString(16).repeat(64)}`);
    if (ex.status === 429) limited = ex;
    else assert.equal(ex.status, 404);
  }
  assert.ok(limited, "wrong codes are limited per source address");
  assertDocumented(since(start));
});

test("health and metrics are as documented", async () => {
  const start = rec.exchanges.length;
  assert.equal((await rec.get("/healthz")).status, 200);
  const m = await rec.get("/metrics");
  assert.equal(m.status, 200);
  assert.match(m.text, /fleetd_attestation_steps_total\{step="challenge",outcome="pending"\} 1/);
  assertDocumented(since(start));
});

test("every exchange of this run matches the document, and every status the server produced is documented for its path", () => {
  assertDocumented(rec.exchanges);
  const produced = new Map<string, Set<number>>();
  for (const e of rec.exchanges) produced.set(e.path, (produced.get(e.path) ?? new Set()).add(e.status));
  const seen = (p: string) => [...(produced.get(p) ?? [])].sort((a, b) => a - b);
  assert.deepEqual(seen("/v1/attest/challenge"), [200, 400, 403, 413]);
  assert.deepEqual(seen("/v1/attest/evidence"), [200, 400, 404, 409]);
  assert.deepEqual(seen("/v1/attest/confirm"), [200, 400, 404, 409, 415]);
  assert.deepEqual(seen("/talos/config"), [200, 400, 404, 429]);
});

test("deliberately broken copies of real responses fail validation", () => {
  const real = (path: string, status: number, pred: (e: Exchange) => boolean = () => true) => {
    const e = rec.exchanges.find((x) => x.path === path && x.status === status && pred(x));
    assert.ok(e, `recorded ${path} ${status}`);
    return e;
  };
  const provisionConfirm = real("/v1/attest/confirm", 200, (e) => (e.body as { mode: string }).mode === "provision");
  const intakeConfirm = real("/v1/attest/confirm", 200, (e) => (e.body as { mode: string }).mode === "intake");
  const mutants: [string, Exchange, (b: Record<string, unknown>) => unknown][] = [
    ["challenge without nonce", real("/v1/attest/challenge", 200), (b) => ({ ...b, nonce: undefined })],
    ["challenge with an extra property", real("/v1/attest/challenge", 200), (b) => ({ ...b, debug: true })],
    ["challenge with an uppercase EK binding", real("/v1/attest/challenge", 200), (b) => ({ ...b, credentials: (b["credentials"] as { ekBinding: string }[]).map((c) => ({ ...c, ekBinding: c.ekBinding.toUpperCase() })) })],
    ["challenge with a bad expiry", real("/v1/attest/challenge", 200), (b) => ({ ...b, expiresAt: "tomorrow" })],
    ["evidence with verdict fail", real("/v1/attest/evidence", 200), (b) => ({ ...b, verdict: "fail" })],
    ["evidence with a bundle that is not PEM", real("/v1/attest/evidence", 200), (b) => ({ ...b, caBundle: "MIIB" })],
    ["provision confirm without the code", provisionConfirm, (b) => ({ mode: b["mode"] })],
    ["intake confirm with a code", intakeConfirm, (b) => ({ ...b, installCode: (provisionConfirm.body as Record<string, unknown>)["installCode"] })],
    ["refusal without reasons", real("/v1/attest/challenge", 403), (b) => ({ ...b, reasons: [] })],
    ["refusal with an unknown error", real("/v1/attest/challenge", 403), (b) => ({ ...b, error: "nope" })],
    ["refusal reason without detail", real("/v1/attest/evidence", 409), (b) => ({ ...b, reasons: [{ check: "nonce.reused" }] })],
    ["404 with error refused", real("/v1/attest/evidence", 404), (b) => ({ ...b, error: "refused" })],
    ["config refusal with a stack", real("/talos/config", 404), (b) => ({ ...b, stack: "at x" })],
    ["empty config", real("/talos/config", 200), () => ""],
  ];
  for (const [what, ex, mutate] of mutants) {
    const original = structuredClone(ex.body);
    assert.deepEqual(doc.responseProblems(ex), [], `${what}: the real response is valid`);
    const body = typeof ex.body === "object" ? JSON.parse(JSON.stringify(mutate(structuredClone(ex.body) as Record<string, unknown>))) : mutate({});
    assert.notDeepEqual(doc.responseProblems({ ...ex, body }), [], `${what}: must fail validation`);
    assert.deepEqual(ex.body, original, "the recorded response itself is unchanged");
  }
  const ok = real("/healthz", 200);
  assert.notDeepEqual(doc.responseProblems({ ...ok, status: 418 }), [], "an undocumented status fails");
  assert.notDeepEqual(doc.responseProblems({ ...ok, contentType: "text/html" }), [], "an undocumented media type fails");
});

// ---- the document's request schemas against the server's zod schemas, on real bodies changed at every bound

type J = null | boolean | number | string | J[] | { [k: string]: J };
type Step = (string | number)[];
const ZOD = { "/v1/attest/challenge": ChallengeRequest, "/v1/attest/evidence": Evidence, "/v1/attest/confirm": Confirm } as const;

/** Paths to every node; of each array only the first element stands for the others. */
function allPaths(v: J, at: Step = []): Step[] {
  const out: Step[] = [at];
  if (Array.isArray(v)) {
    if (v.length > 0) out.push(...allPaths(v[0] as J, [...at, 0]));
  } else if (v && typeof v === "object") {
    for (const [k, x] of Object.entries(v)) out.push(...allPaths(x, [...at, k]));
  }
  return out;
}

function getAt(root: J, path: Step): J {
  let v: J = root;
  for (const k of path) v = (v as Record<string | number, J>)[k] as J;
  return v;
}

function setAt(root: J, path: Step, f: (v: J) => J | undefined): J {
  if (path.length === 0) return f(root) ?? null;
  const parent = getAt(root, path.slice(0, -1)) as Record<string | number, J>;
  const key = path[path.length - 1] as string | number;
  const next = f(parent[key] as J);
  if (next === undefined) {
    if (Array.isArray(parent)) parent.splice(key as number, 1);
    else delete parent[key];
  } else {
    parent[key] = next;
  }
  return root;
}

/** Every length and item-count bound the document states, with its neighbours, and the zod schemas' own. */
function documentBounds(): { lengths: number[]; counts: number[] } {
  const lengths = new Set([0, 1, 2, 3, 4, 39, 40, 41, 43, 44, 45, 127, 128, 129, 130]);
  const counts = new Set([0, 1, 2]);
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) return v.forEach(walk);
    if (!v || typeof v !== "object") return;
    for (const [k, x] of Object.entries(v)) {
      if ((k === "minLength" || k === "maxLength") && typeof x === "number") [x - 1, x, x + 1].forEach((n) => lengths.add(n));
      else if ((k === "minItems" || k === "maxItems") && typeof x === "number") [x - 1, x, x + 1].forEach((n) => counts.add(n));
      else walk(x);
    }
  };
  walk(doc.doc.components.schemas);
  return { lengths: [...lengths].filter((n) => n >= 0).sort((a, b) => a - b), counts: [...counts].filter((n) => n >= 0).sort((a, b) => a - b) };
}

function seedBody(path: string): J {
  const seed = rec.exchanges.find((e) => e.path === path && e.status === 200)?.requestText;
  assert.ok(seed, `a recorded ${path} body`);
  return JSON.parse(seed) as J;
}

function agree(path: keyof typeof ZOD, body: J, what: string): boolean {
  const byZod = ZOD[path].safeParse(body).success;
  const problems = doc.requestValueProblems("post", path, body);
  assert.equal(problems.length === 0, byZod, `${path} ${what}: zod says ${byZod ? "valid" : "invalid"}, the document says ${problems.length === 0 ? "valid" : problems.slice(0, 3).join("; ")}`);
  return byZod;
}

test("request schemas: the document agrees with the server's zod schemas at every bound of real bodies", (t) => {
  const { lengths, counts } = documentBounds();
  for (const path of Object.keys(ZOD) as (keyof typeof ZOD)[]) {
    const original = seedBody(path);
    assert.ok(agree(path, original, "as sent"), `${path}: the real body is valid`);
    let tried = 0;
    let valid = 0;
    const check = (body: J, what: string) => {
      tried++;
      if (agree(path, body, what)) valid++;
    };
    for (const at of allPaths(original)) {
      const v = getAt(original, at);
      const where = at.join(".") || "(body)";
      if (typeof v === "string") {
        // the same characters at every length bound: what changes is only the length
        const ch = v[0] ?? "A";
        for (const n of lengths) check(setAt(structuredClone(original), at, () => ch.repeat(n)), `${where} of length ${n}`);
      } else if (Array.isArray(v) && v.length > 0) {
        for (const n of counts) check(setAt(structuredClone(original), at, () => Array.from({ length: n }, (_, i) => structuredClone(v[i % v.length] as J))), `${where} with ${n} items`);
      } else if (v && typeof v === "object") {
        for (const k of Object.keys(v)) check(setAt(structuredClone(original), [...at, k], () => undefined), `${where} without ${k}`);
        check(setAt(structuredClone(original), at, (o) => ({ ...(o as Record<string, J>), unexpected: 1 })), `${where} with an unknown property`);
      }
      if (at.length > 0) for (const x of [null, 0, -1, 24, 1.5, true, "", [], {}] as J[]) check(setAt(structuredClone(original), at, () => structuredClone(x)), `${where} = ${JSON.stringify(x)}`);
    }
    assert.ok(valid > 0 && valid < tried, `${path}: both valid (${valid}) and invalid (${tried - valid}) bodies among ${tried}`);
    t.diagnostic(`${path}: ${tried} bodies, ${valid} valid, ${tried - valid} invalid; zod and the document agree on each`);
  }
});

const CHARS = ["A", "a", "0", "f", "F", "=", "+", "/", ":", "-", "é", " ", "g", "_"];
const value = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -3, max: 30 }),
  fc.double({ noNaN: true, noDefaultInfinity: true, min: -10, max: 30 }),
  fc.string({ maxLength: 70, unit: fc.constantFrom(...CHARS) }),
  fc.constantFrom<J>([], {}, "intake", "provision", "sha256", "sha3", "aa:bb:cc:dd:ee:ff", "AA:BB:CC:DD:EE:0F", "aa-bb-cc-dd-ee-ff", "4C4C4544-0058-4B10-8032-B7C04F4D3332", "0".repeat(40), "0".repeat(129), "AAAA", "AAA=", "AA==", "A==="),
);
const mutation = fc.oneof(
  fc.record({ kind: fc.constant("delete" as const), at: fc.nat() }),
  fc.record({ kind: fc.constant("set" as const), at: fc.nat(), value }),
  fc.record({ kind: fc.constant("extra" as const), at: fc.nat(), key: fc.constantFrom("extra", "Claims", "mode", "public", "pcr") }),
  fc.record({ kind: fc.constant("text" as const), at: fc.nat(), text: fc.string({ maxLength: 140, unit: fc.constantFrom(...CHARS) }) }),
  fc.record({ kind: fc.constant("items" as const), at: fc.nat(), count: fc.integer({ min: 0, max: 100 }) }),
);
type Mutation = typeof mutation extends fc.Arbitrary<infer M> ? M : never;

function apply(body: J, m: Mutation): J {
  const paths = allPaths(body).filter((p) => {
    const v = getAt(body, p);
    if (m.kind === "text") return typeof v === "string";
    if (m.kind === "items") return Array.isArray(v);
    if (m.kind === "extra") return v !== null && typeof v === "object" && !Array.isArray(v);
    return p.length > 0;
  });
  if (paths.length === 0) return body;
  return setAt(body, paths[m.at % paths.length] as Step, (v) => {
    switch (m.kind) {
      case "delete":
        return undefined;
      case "set":
        return structuredClone(m.value);
      case "extra":
        return { ...(v as Record<string, J>), [m.key]: 1 };
      case "text":
        return m.text;
      case "items": {
        const a = v as J[];
        return a.length > 0 ? Array.from({ length: m.count }, (_, i) => structuredClone(a[i % a.length] as J)) : a;
      }
    }
  });
}

test("request schemas: the document agrees with the server's zod schemas on randomly mutated real bodies (fast-check)", () => {
  for (const path of Object.keys(ZOD) as (keyof typeof ZOD)[]) {
    const original = seedBody(path);
    fc.assert(
      fc.property(fc.array(mutation, { minLength: 1, maxLength: 3 }), (ms) => {
        agree(path, ms.reduce((b, m) => apply(b, m), structuredClone(original)), JSON.stringify(ms).slice(0, 300));
      }),
      { numRuns: RUNS },
    );
  }
});
