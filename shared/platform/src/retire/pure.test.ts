/** The retirement steps' pure parts: label selectors as PDBs use them, drain's skip rule, CSR subjects. */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import fc from "fast-check";
import { ParseError } from "@fleetd/verify/codec";
import { csrCommonNames } from "./csrSubject.js";
import { skipReason } from "./evict.js";
import { selects } from "./labelSelector.js";

test("label selectors: matchLabels and every matchExpressions operator; a missing selector selects nothing", () => {
  const l = { app: "web", tier: "front" };
  assert.equal(selects(undefined, l), false);
  assert.equal(selects({}, l), true);
  assert.equal(selects({ matchLabels: { app: "web" } }, l), true);
  assert.equal(selects({ matchLabels: { app: "db" } }, l), false);
  assert.equal(selects({ matchExpressions: [{ key: "tier", operator: "In", values: ["front", "back"] }] }, l), true);
  assert.equal(selects({ matchExpressions: [{ key: "tier", operator: "NotIn", values: ["front"] }] }, l), false);
  assert.equal(selects({ matchExpressions: [{ key: "zone", operator: "NotIn", values: ["a"] }] }, l), true);
  assert.equal(selects({ matchExpressions: [{ key: "app", operator: "Exists" }] }, l), true);
  assert.equal(selects({ matchExpressions: [{ key: "app", operator: "DoesNotExist" }] }, l), false);
  assert.equal(selects({ matchExpressions: [{ key: "app", operator: "Gt", values: ["1"] }] }, l), false, "unknown operators select nothing");
});

test("drain's skip rule: DaemonSet-controlled and mirror pods are left; a DaemonSet owner that is not the controller is not", () => {
  assert.equal(skipReason({ metadata: { annotations: { "kubernetes.io/config.mirror": "abc" } } }), "mirror pod");
  assert.equal(skipReason({ metadata: { ownerReferences: [{ apiVersion: "apps/v1", kind: "DaemonSet", name: "agent", uid: "u", controller: true }] } }), "DaemonSet agent");
  assert.equal(skipReason({ metadata: { ownerReferences: [{ apiVersion: "apps/v1", kind: "DaemonSet", name: "agent", uid: "u" }] } }), undefined);
  assert.equal(skipReason({ metadata: { ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: "web", uid: "u", controller: true }] } }), undefined);
});

test("CSR subject: the CN of an openssl-made PKCS#10 request; garbage is a ParseError, never a RangeError", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-csr-"));
  try {
    execFileSync("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", join(dir, "k")]);
    const pem = execFileSync("openssl", ["req", "-new", "-key", join(dir, "k"), "-subj", "/O=system:nodes/CN=system:node:worker-1"], { encoding: "utf8" });
    assert.deepEqual(csrCommonNames(pem), ["system:node:worker-1"]);
    assert.deepEqual(csrCommonNames("not a pem"), []);
    const der = Buffer.from(pem.replace(/-----[^-]+-----/g, "").replace(/\s+/g, ""), "base64");
    fc.assert(fc.property(fc.integer({ min: 0, max: der.length - 1 }), fc.uint8Array({ minLength: 0, maxLength: 8 }), (cut, junk) => {
      const bad = Buffer.concat([der.subarray(0, cut), junk]);
      const p = `-----BEGIN CERTIFICATE REQUEST-----\n${bad.toString("base64")}\n-----END CERTIFICATE REQUEST-----\n`;
      try {
        csrCommonNames(p);
      } catch (e) {
        assert.ok(e instanceof ParseError, `expected ParseError, got ${String(e)}`);
      }
    }), { numRuns: 300 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
