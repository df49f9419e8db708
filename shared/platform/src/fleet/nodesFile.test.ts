import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import fc from "fast-check";
import { stringify } from "yaml";
import { INHERITED_NAMES } from "@fleetd/verify/text";
import { MAX_NODES, MAX_NODES_FILE_ENTRIES, MAX_NODES_FILE_ISSUES, nodeEntry, NodesFileError, parseNodesFile } from "./nodesFile.js";

const example = readFileSync(join(resolve(fileURLToPath(import.meta.url), "../../../../.."), "tests/examples/nodes.yaml"), "utf8");

function issues(text: string): string {
  try {
    parseNodesFile(text, "n.yaml");
    return "ok";
  } catch (e) {
    assert.ok(e instanceof NodesFileError, String(e));
    return e.message;
  }
}

test("the example nodes file parses, with defaults filled in", () => {
  const f = parseNodesFile(example);
  assert.deepEqual(Object.keys(f.nodes), ["cp-1", "worker-1", "edge-1"]);
  assert.equal(f.nodes["edge-1"]?.interface, "eth0");
  assert.equal(f.nodes["edge-1"]?.ek?.[0]?.chain, false);
  assert.equal(f.nodes["worker-1"]?.ek?.[0]?.chain, true);
  assert.equal(f.roles.worker.slug, "fleetd-worker");
});

test("errors name the YAML line and the path", () => {
  const m = issues(example.replace("10.20.0.21/24", "10.20.0.21/31"));
  assert.match(m, /^n\.yaml:37: nodes\.worker-1\.address\.cidr: prefix length must be 1\.\.30$/m);
  assert.match(issues(example.replace("serial: 7XK2LM4", "serial: 7XK2LM3")), /n\.yaml:\d+: nodes\.worker-1\.serial: serial 7XK2LM3 is also used by nodes\.cp-1/);
  assert.match(issues(example.replace("port: ethernet1/1/2", "port: ethernet1/1/1")), /switch port tor-a1\/ethernet1\/1\/1 is also used by nodes\.cp-1/);
  assert.match(issues(example.replace("10.20.0.31/24", "10.20.0.11/24")), /address 10\.20\.0\.11 is also used by nodes\.cp-1/);
  assert.match(issues(example.replace("model: nuc13\n", "model: nuc14\n")), /nodes\.edge-1\.model: model nuc14 is not in models/);
  assert.match(issues(example.replace("{ alg: ecc, sha256: 9a4e", "{ alg: rsa, sha256: 9a4e")), /two rsa bindings/);
  assert.match(issues(example.replace("type: redfish, address: 10.20.1.11", "type: idrac, address: 10.20.1.11")), /nodes\.cp-1\.bmc/);
  assert.match(issues("a: &a [1]\nb: *a\n"), /version|Unrecognized key/);
});

test("aliases cannot blow up (billion laughs) and size is bounded", () => {
  const laughs = ["a: &a [x,x,x,x,x,x,x,x,x,x]"];
  for (let i = 1; i < 12; i++) laughs.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10).fill("*" + String.fromCharCode(96 + i)).join(",")}]`);
  assert.notEqual(issues(laughs.join("\n")), "ok");
  assert.match(issues("#".repeat(1024 * 1024 + 1)), /larger than/);
});

test("property: any YAML value or text gives a NodesFileError or a valid file, nothing else", () => {
  fc.assert(
    fc.property(fc.oneof(fc.string({ maxLength: 300 }), fc.jsonValue({ maxDepth: 4 }).map((v) => stringify(v))), (text) => {
      issues(text);
    }),
    { numRuns: 300 },
  );
  // mutations of the example: every one parses or is refused with a line
  fc.assert(
    fc.property(fc.integer({ min: 0, max: example.length - 1 }), fc.string({ maxLength: 4 }), (at, ins) => {
      issues(example.slice(0, at) + ins + example.slice(at + 1));
    }),
    { numRuns: 300 },
  );
});

test("names that every JavaScript object inherits are not nodes, models or switches", () => {
  const f = parseNodesFile(example);
  for (const n of INHERITED_NAMES) assert.equal(nodeEntry(f, n), undefined, n);
  assert.equal(nodeEntry(f, "edge-1")?.serial, "G6NUC13-00417");
  // model and switch references that only an inherited property would answer are refused
  assert.match(issues(example.replace("model: nuc13\n", "model: constructor\n")), /nodes\.edge-1\.model: model constructor is not in models/);
  assert.match(issues(example.replace("switch: { device: tor-a1, port: ethernet1/1/3 }", "switch: { device: constructor, port: ethernet1/1/3 }")), /nodes\.edge-1\.switch\.device: switch constructor is not in switches/);
  assert.match(issues(example.replace("tor-a1: { model: s5248 }", "tor-a1: { model: s5248 }\n  sw-2: { model: constructor }")), /switches\.sw-2\.model: model constructor is not in models/);
  // a node that is really called so is found as itself
  const named = parseNodesFile(example.replace("  edge-1:\n", "  constructor:\n"));
  assert.equal(nodeEntry(named, "constructor")?.serial, "G6NUC13-00417");
  for (const bad of ["__proto__", "toString", "hasOwnProperty"]) assert.match(issues(example.replace("  edge-1:\n", `  ${bad}:\n`)), /is not a valid name/, bad);
});

test("caps: a 700 KB file of 60,000 keys, a list of 150,000 items and thousands of bad nodes are refused with a clear error (keys unique by a set; issues capped)", () => {
  const refused = (text: string): NodesFileError => {
    try {
      parseNodesFile(text, "big.yaml");
    } catch (e) {
      assert.ok(e instanceof NodesFileError, String(e));
      return e;
    }
    assert.fail("parsed");
  };
  const keys = example + Array.from({ length: 60_000 }, (_, i) => `  n${String(i).padStart(5, "0")}: {}\n`).join("");
  assert.ok(keys.length > 700_000 && keys.length < 1024 * 1024);
  const k = refused(keys);
  assert.deepEqual(k.issues, [{ path: "nodes", line: 15, message: `60003 entries: at most ${MAX_NODES}` }]);

  const items = "version: 1\nx: [" + Array(150_000).fill("1").join(",") + "]\n";
  assert.equal(refused(items).message, `big.yaml: more than ${MAX_NODES_FILE_ENTRIES} entries (mapping pairs and list items): not a nodes file fleetd reads`);

  const bad = refused(example + Array.from({ length: 4000 }, (_, i) => `  n${String(i).padStart(5, "0")}: { serial: x }\n`).join(""));
  assert.equal(bad.issues.length, MAX_NODES_FILE_ISSUES + 1);
  assert.match(bad.issues.at(-1)?.message ?? "", /^… and \d+ more problems \(the first 50 are listed\)$/);

  // 60,000 unknown top-level keys: one issue, its line clipped
  const root = refused(example + Array.from({ length: 60_000 }, (_, i) => `k${String(i).padStart(6, "0")}: 1\n`).join(""));
  assert.ok(root.message.length < 1000 && /Unrecognized keys/.test(root.message), root.message.slice(0, 200));

  // duplicates are still found, by a set per mapping, with their line
  assert.match(issues(example.replace("  edge-1:", "  worker-1:")), /^n\.yaml:\d+: Map keys must be unique: worker-1 repeats$/m);
  assert.match(issues("version: 1\nversion: 1\n"), /^n\.yaml:2: Map keys must be unique: version repeats$/m);
  assert.match(issues("version: 1\n? [a]\n: 1\n"), /mapping keys must be plain names/);
});

test("addresses are checked by the one IPv4 validator (ipv4.ts): leading zeros, 256, prefix 33 and spaces are refused", () => {
  const cidr = /nodes\.worker-1\.address\.cidr: must be an IPv4 address with a prefix length, e\.g\. 10\.0\.10\.11\/24/;
  for (const bad of ["10.20.0.021/24", "10.20.0.21/024", "10.20.256.21/24", "10.20.0.21/33", "10.20.0.21 /24"]) {
    assert.match(issues(example.replace("10.20.0.21/24", bad)), cidr, bad);
  }
  assert.match(issues(example.replace("10.20.0.21/24", "10.20.0.21/0")), /nodes\.worker-1\.address\.cidr: prefix length must be 1\.\.30/);
});
