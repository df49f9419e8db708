import { strict as assert } from "node:assert";
import { createHash } from "node:crypto";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import { outageOf } from "../outage/outage.js";
import { fromServiceError, SpireApiError } from "./errors.js";
import { serverApi, workloadApi } from "./proto.js";
import { SpireServerClient } from "./server.js";
import { formatSpiffeId, parseSpiffeId, serverId, SpiffeIdError, tpmDevidAgentId } from "./spiffeId.js";
import { entryFromWire, entryMask, entryToWire, EntryWire, readAnswer } from "./wire.js";
import { splitDerCertificates } from "./workload.js";

const method = (pkg: ReturnType<typeof serverApi>, service: string, name: string) => (pkg[service] as Record<string, MethodDefinition<object, unknown>>)[name] as MethodDefinition<object, unknown>;
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

test("SPIFFE IDs: the forms SPIRE accepts parse, the others are refused with the reason", () => {
  assert.deepEqual(parseSpiffeId("spiffe://lab.test/node/worker-1"), { trustDomain: "lab.test", path: "/node/worker-1" });
  assert.deepEqual(parseSpiffeId("spiffe://lab.test"), { trustDomain: "lab.test", path: "" });
  assert.equal(formatSpiffeId({ trustDomain: "lab.test", path: "/spire/server" }), "spiffe://lab.test/spire/server");
  assert.equal(serverId("lab.test"), "spiffe://lab.test/spire/server");
  const refused: [string, RegExp][] = [
    ["https://lab.test/x", /must start with spiffe:\/\//],
    ["spiffe:///x", /trust domain is empty/],
    ["spiffe://Lab.test/x", /lowercase/],
    ["spiffe://lab.test:8443/x", /lowercase letters, digits/],
    ["spiffe://lab.test/x/", /empty segment/],
    ["spiffe://lab.test//x", /empty segment/],
    ["spiffe://lab.test/x/../y", /'\.' or '\.\.'/],
    ["spiffe://lab.test/x?y=1", /segment "x\?y=1"/],
    ["spiffe://lab.test/node/worker 1", /may hold only/],
    [`spiffe://lab.test/${"a".repeat(2048)}`, /longer than 2048/],
  ];
  for (const [input, why] of refused) assert.throws(() => parseSpiffeId(input), (e: unknown) => e instanceof SpiffeIdError && why.test(e.message), input);
});

test("tpm_devid agent ID: SHA-1 of the LDevID leaf's DER, lowercase hex, under /spire/agent/tpm_devid", () => {
  const der = new Uint8Array([0x30, 0x03, 0x02, 0x01, 0x01]);
  assert.equal(tpmDevidAgentId("lab.test", der), `spiffe://lab.test/spire/agent/tpm_devid/${createHash("sha1").update(der).digest("hex")}`);
});

test("the proto subset encodes SPIRE's field numbers (bytes checked by hand against spire-api-sdk)", () => {
  const create = method(serverApi(), "spire.api.server.entry.v1.Entry", "BatchCreateEntry");
  assert.equal(create.path, "/spire.api.server.entry.v1.Entry/BatchCreateEntry");
  // Entry{ id=1 "e", spiffe_id=2 {trust_domain=1 "t", path=2 "/a"}, selectors=4 [{type=1 "u", value=2 "v"}], x509_svid_ttl=5 60 }
  const bytes = create.requestSerialize({ entries: [{ id: "e", spiffe_id: { trust_domain: "t", path: "/a" }, selectors: [{ type: "u", value: "v" }], x509_svid_ttl: 60 }] });
  const entry = "0a0165" + "1207" + "0a0174" + "12022f61" + "2206" + "0a0175" + "120176" + "283c";
  assert.equal(hex(bytes), "0a" + (entry.length / 2).toString(16).padStart(2, "0") + entry);
  // BatchUpdateEntryRequest.input_mask = 2, EntryMask.selectors = 4, hint = 14
  const update = method(serverApi(), "spire.api.server.entry.v1.Entry", "BatchUpdateEntry");
  assert.equal(hex(update.requestSerialize({ input_mask: { selectors: true, hint: true } })), "1204" + "2001" + "7001");
  // ListEntriesRequest{ filter=1 { by_parent_id=2 {…} }, page_size=3 500, page_token=4 "7" }
  const list = method(serverApi(), "spire.api.server.entry.v1.Entry", "ListEntries");
  assert.equal(hex(list.requestSerialize({ filter: { by_parent_id: { trust_domain: "t", path: "/a" } }, page_size: 500, page_token: "7" })), "0a09" + "1207" + "0a0174" + "12022f61" + "18f403" + "220137");
  // BanAgentRequest{ id=1 SPIFFEID }
  const ban = method(serverApi(), "spire.api.server.agent.v1.Agent", "BanAgent");
  assert.equal(ban.path, "/spire.api.server.agent.v1.Agent/BanAgent");
  assert.equal(hex(ban.requestSerialize({ id: { trust_domain: "t", path: "/a" } })), "0a07" + "0a0174" + "12022f61");
  const fetch = method(workloadApi(), "SpiffeWorkloadAPI", "FetchX509SVID");
  assert.equal(fetch.path, "/SpiffeWorkloadAPI/FetchX509SVID");
});

test("answers decode to one shape: int64 as decimal strings, absent fields as defaults, then zod", () => {
  const list = method(serverApi(), "spire.api.server.entry.v1.Entry", "ListEntries");
  // A hand-built ListEntriesResponse: entries=1 [{ id "e", spiffe_id t/a, parent_id=3 t/b, selectors, revision_number=11 2 }], no next_page_token
  const entry = "0a0165" + "1207" + "0a0174" + "12022f61" + "1a07" + "0a0174" + "12022f62" + "2206" + "0a0175" + "120176" + "5802";
  const decoded = list.responseDeserialize(Buffer.from("0a" + (entry.length / 2).toString(16) + entry, "hex")) as { entries: unknown[]; next_page_token: string };
  assert.equal(decoded.next_page_token, "");
  const e = entryFromWire("Entry/ListEntries", readAnswer("Entry/ListEntries", EntryWire, decoded.entries[0]));
  assert.deepEqual(
    { id: e.id, spiffeId: e.spiffeId, parentId: e.parentId, selectors: e.selectors, revision: e.revisionNumber, hint: e.hint, ttl: e.x509SvidTtl },
    { id: "e", spiffeId: "spiffe://t/a", parentId: "spiffe://t/b", selectors: [{ type: "u", value: "v" }], revision: 2, hint: "", ttl: 0 },
  );
  assert.throws(
    () => readAnswer("Entry/ListEntries", EntryWire, { ...(decoded.entries[0] as object), spiffe_id: null }),
    (x: unknown) => x instanceof SpireApiError && x.code === "spire-bad-response" && /spiffe_id/.test(x.message),
  );
  assert.throws(
    () => entryFromWire("Entry/ListEntries", readAnswer("Entry/ListEntries", EntryWire, { ...(decoded.entries[0] as object), parent_id: { trust_domain: "T", path: "/x" } })),
    (x: unknown) => x instanceof SpireApiError && x.code === "spire-bad-response" && /parent_id/.test(x.message),
  );
});

test("bad input is refused before any RPC, naming the entry and the field", () => {
  const ok = { spiffeId: "spiffe://lab.test/node/a", parentId: "spiffe://lab.test/spire/server", selectors: [{ type: "tpm_devid", value: "subject:cn:a.g1" }] };
  assert.deepEqual(entryToWire("r", { ...ok, id: "fleetd.node.a", hint: "fleetd" }, 0), {
    id: "fleetd.node.a",
    spiffe_id: { trust_domain: "lab.test", path: "/node/a" },
    parent_id: { trust_domain: "lab.test", path: "/spire/server" },
    selectors: [{ type: "tpm_devid", value: "subject:cn:a.g1" }],
    hint: "fleetd",
  });
  const bad: [object, RegExp][] = [
    [{ ...ok, id: "a/b" }, /entry 3 \(a\/b\): an entry ID/],
    [{ ...ok, id: "x".repeat(256) }, /an entry ID is 1 to 255/],
    [{ ...ok, selectors: [] }, /at least one selector/],
    [{ ...ok, selectors: [{ type: "tpm_devid:subject", value: "x" }] }, /without ':'/],
    [{ ...ok, selectors: [{ type: "unix", value: "" }] }, /empty value/],
    [{ ...ok, spiffeId: "spiffe://lab.test/node/a b" }, /entry 3 spiffeId: not a SPIFFE ID/],
    [{ ...ok, parentId: "node/a" }, /parentId/],
    [{ ...ok, x509SvidTtl: -1 }, /x509SvidTtl/],
    [{ ...ok, hint: "h".repeat(1025) }, /hint longer/],
    [{ ...ok, federatesWith: ["Other.Domain"] }, /lowercase/],
  ];
  for (const [e, why] of bad) {
    assert.throws(() => entryToWire("Entry/BatchCreateEntry", e as typeof ok, 3), (x: unknown) => x instanceof SpireApiError && x.code === "spire-bad-request" && why.test(x.message), why.source);
  }
  assert.deepEqual(entryMask("r", ["selectors", "hint"]), { selectors: true, hint: true });
  assert.throws(() => entryMask("r", []), /must name the fields/);
});

test("outage or answer: gRPC codes that mean SPIRE could not answer are outages; refusals are not", () => {
  const err = (code: number) => Object.assign(new Error("x"), { code, details: "d" });
  for (const c of [grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED, grpc.status.INTERNAL, grpc.status.UNKNOWN, grpc.status.ABORTED]) {
    const e = fromServiceError("Entry/ListEntries", err(c));
    assert.equal(e.code, "spire-unavailable");
    assert.equal(outageOf(e)?.reason, "spire-unavailable");
  }
  for (const c of [grpc.status.PERMISSION_DENIED, grpc.status.INVALID_ARGUMENT, grpc.status.NOT_FOUND, grpc.status.ALREADY_EXISTS, grpc.status.UNIMPLEMENTED, grpc.status.UNAUTHENTICATED, grpc.status.RESOURCE_EXHAUSTED, grpc.status.FAILED_PRECONDITION]) {
    const e = fromServiceError("Agent/BanAgent", err(c));
    assert.equal(e.code, "spire-refused");
    assert.equal(outageOf(e), undefined);
  }
  assert.equal(outageOf(fromServiceError("x", new Error("no status"))), undefined, "a failure inside this process is no outage");
  assert.equal(outageOf(new SpireApiError("spire-bad-response", "x", undefined, "y")), undefined);
});

test("an unreachable admin socket is an outage, at once (no wait for ready)", async () => {
  const c = new SpireServerClient({ socketPath: "/nonexistent/fleetd-test/api.sock", timeoutMs: 20_000 });
  try {
    await assert.rejects(c.countEntries(), (e: unknown) => e instanceof SpireApiError && e.grpcCode === grpc.status.UNAVAILABLE && outageOf(e)?.reason === "spire-unavailable");
  } finally {
    c.close();
  }
  assert.throws(() => new SpireServerClient({ socketPath: "relative/api.sock" }), /must be absolute/);
});

test("concatenated DER certificates split one by one; trailing junk is an error", () => {
  const a = Buffer.from("300302010a", "hex");
  const b = Buffer.from("3081800201" + "0b" + "04" + "7b" + "00".repeat(0x7b), "hex");
  assert.deepEqual(splitDerCertificates(Buffer.concat([a, b]), "bundle").map(hex), [hex(a), hex(b)]);
  assert.deepEqual(splitDerCertificates(new Uint8Array(0), "bundle"), []);
  assert.throws(() => splitDerCertificates(Buffer.concat([a, Buffer.from("3005", "hex")]), "bundle"), /bundle/);
});
