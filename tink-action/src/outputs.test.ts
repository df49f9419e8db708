import { strict as assert } from "node:assert";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import type { AttestResult } from "@fleetd/platform/protocol/client";
import { clearOutputs, nodeFromLdevid, OUTPUT_FILES, writeFailure, writeSuccess } from "./outputs.js";
import { selfSigned } from "./testing/selfSigned.js";

const dir = mkdtempSync(join(tmpdir(), "fleetd-out-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const ldevid = selfSigned("worker-1.g2");
const lak = selfSigned("worker-1.g2.lak");
const ca = selfSigned("fleetd lab CA");
const code = "ab".repeat(32);
type Blobs = NonNullable<AttestResult["issued"]>["ldevid"]["blobs"];
const result = (installCode?: string): AttestResult => ({
  mode: installCode ? "provision" : "attest",
  issued: {
    ldevid: { certificate: ldevid.der, blobs: { publicBytes: new Uint8Array([0, 1, 2]), private: new Uint8Array([3, 4]) } as Blobs },
    lak: { certificate: lak.der, blobs: { publicBytes: new Uint8Array([5]), private: new Uint8Array([6, 7, 8]) } as Blobs },
    caBundle: ca.cert,
  },
  ...(installCode ? { installCode } : {}),
});
const info = { workflow: "wf-1", claims: { serial: "7XK2LM4", uuid: "4c4c4544-0058-4b10-8032-b7c04f4d3332", macs: ["b0:7b:25:00:00:21"], lldp: null, mode: "provision" as const, workflow: "wf-1" }, attempts: 2, tpm: "/dev/tpmrm0" };

test("provision: every file, raw blobs, the chain with the bundle, the code 0600 and nowhere else", () => {
  const out = join(dir, "p");
  const report = writeSuccess(out, result(code), info);
  assert.equal(readFileSync(join(out, "install-code"), "utf8"), code);
  assert.equal(statSync(join(out, "install-code")).mode & 0o777, 0o600);
  assert.deepEqual(new Uint8Array(readFileSync(join(out, "ldevid.pub"))), new Uint8Array([0, 1, 2]));
  assert.deepEqual(new Uint8Array(readFileSync(join(out, "lak.priv"))), new Uint8Array([6, 7, 8]));
  const chain = readFileSync(join(out, "ldevid.crt"), "utf8");
  assert.equal(chain.match(/BEGIN CERTIFICATE/g)?.length, 2, "LDevID then the bundle");
  assert.ok(chain.endsWith(ca.cert.trim() + "\n"));
  assert.equal(readFileSync(join(out, "ca-bundle.pem"), "utf8"), ca.cert.trim() + "\n");
  assert.equal(report.node, "worker-1");
  assert.equal(report.generation, 2);
  assert.equal(report.installCode, true);
  const json = readFileSync(join(out, "result.json"), "utf8");
  assert.ok(!json.includes(code), "result.json never holds the code");
  assert.deepEqual(JSON.parse(json).claims, { serial: "7XK2LM4", uuid: "4c4c4544-0058-4b10-8032-b7c04f4d3332", macs: ["b0:7b:25:00:00:21"], lldp: null });
});

test("clearOutputs removes an earlier run's files (a refused run leaves no install code); a failure writes only result.json", () => {
  const out = join(dir, "r");
  writeSuccess(out, result(code), info);
  writeFileSync(join(out, "unrelated.txt"), "kept");
  clearOutputs(out);
  for (const f of OUTPUT_FILES) assert.ok(!existsSync(join(out, f)), `${f} removed`);
  assert.ok(existsSync(join(out, "unrelated.txt")));
  writeFailure(out, { mode: "provision", verdict: "fail", workflow: "wf-1", step: "evidence", error: "refused", reasons: [{ check: "claims.serial", detail: "x" }], attempts: 1 });
  assert.equal(JSON.parse(readFileSync(join(out, "result.json"), "utf8")).verdict, "fail");
  assert.ok(!existsSync(join(out, "install-code")));
});

test("node and generation from the LDevID subject; another subject gives none", () => {
  assert.deepEqual(nodeFromLdevid(ldevid.der), { node: "worker-1", generation: 2 });
  assert.equal(nodeFromLdevid(ca.der), undefined);
});
