/** The `fleetd verify quote` CLI on a real signed quote (GCE COS-85), with exit codes and JSON reasons. */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";
import { fromHex } from "@fleetd/verify/crypto";
import { conformance } from "@fleetd/testkit/conformance";

const cli = resolve(fileURLToPath(import.meta.url), "../main.js");
const dir = mkdtempSync(join(tmpdir(), "fleetd-cli-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const cos = JSON.parse(readFileSync(conformance("quotes/go-tpm-tools_gce-cos-85-nonce9009.json"), "utf8")) as {
  ak_pub_tpmt_public_hex: string;
  quotes: { quote_tpms_attest_hex: string; raw_sig_tpmt_signature_hex: string; pcrs: { pcrs: Record<string, string> } }[];
};
const q = cos.quotes[1];
assert.ok(q);
const ak = fromHex(cos.ak_pub_tpmt_public_hex);
const akFile = join(dir, "ak.pub");
// tpm2_createak -u writes a TPM2B_PUBLIC: size-prefixed.
writeFileSync(akFile, Buffer.concat([Buffer.from([ak.length >> 8, ak.length & 0xff]), ak]));
writeFileSync(join(dir, "q.msg"), fromHex(q.quote_tpms_attest_hex));
writeFileSync(join(dir, "q.sig"), fromHex(q.raw_sig_tpmt_signature_hex));
const values = Object.keys(q.pcrs.pcrs)
  .map(Number)
  .sort((a, b) => a - b)
  .map((k) => fromHex(q.pcrs.pcrs[String(k)] ?? ""));
writeFileSync(join(dir, "q.pcrs"), Buffer.concat(values));

function run(...args: string[]) {
  const r = spawnSync(process.execPath, [cli, "verify", "quote", ...args], { encoding: "utf8" });
  return { code: r.status, out: r.stdout, err: r.stderr };
}
const base = ["--ak-public", akFile, "--message", join(dir, "q.msg"), "--signature", join(dir, "q.sig"), "--pcrs", join(dir, "q.pcrs")];

test("a real quote verifies: exit 0", () => {
  const r = run(...base, "--nonce", "9009");
  assert.equal(r.code, 0, r.out + r.err);
  assert.match(r.out, /PASS/);
});

test("another nonce: exit 1 and the JSON names quote.extraData", () => {
  const r = run(...base, "--nonce", "9008", "--json");
  assert.equal(r.code, 1);
  const out = JSON.parse(r.out) as { verdict: string; reasons: { check: string }[] };
  assert.equal(out.verdict, "fail");
  assert.deepEqual(out.reasons.map((x) => x.check), ["quote.extraData"]);
});

test("a flipped PCR value byte: exit 1, quote.pcrDigest", () => {
  const bad = Buffer.concat(values);
  bad[40] = (bad[40] ?? 0) ^ 1;
  writeFileSync(join(dir, "bad.pcrs"), bad);
  const r = run(...base.slice(0, 6), "--pcrs", join(dir, "bad.pcrs"), "--nonce", "9009", "--json");
  assert.equal(r.code, 1);
  assert.match(r.out, /quote\.pcrDigest/);
});

test("a truncated quote message: exit 1 with a typed parse reason naming the field", () => {
  writeFileSync(join(dir, "short.msg"), fromHex(q.quote_tpms_attest_hex).subarray(0, 50));
  const r = run("--ak-public", akFile, "--message", join(dir, "short.msg"), "--signature", join(dir, "q.sig"), "--pcrs", join(dir, "q.pcrs"), "--nonce", "9009", "--json");
  assert.equal(r.code, 1);
  assert.match(r.out, /TPMS_ATTEST\.clockInfo/);
});

test("usage errors exit 2", () => {
  assert.equal(run(...base).code, 2);
  assert.equal(run(...base, "--nonce", "zz").code, 2);
  assert.equal(run(...base, "--nonce", "9009", "--bogus").code, 2);
});
