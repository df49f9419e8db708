/** Runs the built CLI (`node shared/dist/cli/main.js verify ek …`) as scripts do. */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { createPublicKey } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { conformance } from "@fleetd/testkit/conformance";

const MAIN = fileURLToPath(new URL("./main.js", import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), "fleetd-verify-ek-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

function fleetd(...args: string[]): { code: number; out: string; err: string } {
  const r = spawnSync(process.execPath, [MAIN, "verify", "ek", ...args], { encoding: "utf8" });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

const C = (rel: string) => conformance(rel);
const STM_RSA_PADDED = C("ek/certs/stm_st33htph_rsa_ek_nvread_padded.bin");
const KEYLIME = C("ca/keylime-tpm_cert_store");
const BINDING = "de6a6ba0564fc32ed137b2e2c97b39c741e87a3fbbb80bc9092b75b6dc8a2aab";

test("pass: prints binding, TPM, chain and verdict; exit 0", () => {
  const r = fleetd("--cert", STM_RSA_PADDED, "--roots", KEYLIME, "--at", "2026-06-01T00:00:00Z");
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, new RegExp(`^EK binding: ${BINDING}$`, "m"));
  assert.match(r.out, /manufacturer id:53544D20 \(STM\), model ST33HTPHAHB4, version id:00490004/);
  assert.match(r.out, /from STM_RSA_05I\.pem/);
  assert.match(r.out, /from GS_TPM_RT\.pem/);
  assert.match(r.out, /^verdict: pass$/m);
});

test("--json: the verdict as data", () => {
  const r = fleetd("--cert", STM_RSA_PADDED, "--roots", KEYLIME, "--json", "--at", "2026-06-01T00:00:00Z");
  assert.equal(r.code, 0, r.err);
  const j = JSON.parse(r.out) as {
    binding: string;
    verdict: string;
    chain: { source: string; subject: string; issuer: string; serial: string; fingerprint: string }[];
    reasons: unknown[];
    tpm: { model: string };
    input: { form: string; padding: number };
  };
  assert.equal(j.binding, BINDING);
  assert.equal(j.verdict, "pass");
  assert.deepEqual(j.reasons, []);
  assert.deepEqual(j.chain.map((l) => l.source), ["input", "STM_RSA_05I.pem", "STM_RSA_RT.pem", "GS_TPM_RT.pem"]);
  assert.match(j.chain[0]?.fingerprint ?? "", /^[0-9a-f]{64}$/);
  assert.equal(j.tpm.model, "ST33HTPHAHB4");
  assert.deepEqual(j.input, { form: "der+padding", padding: 431, extraCertificates: 0 });
});

test("a failed check: exit 1 and the check is printed", () => {
  const flipped = new Uint8Array(readFileSync(C("ek/certs/stm_st33htph_rsa_ek.der")));
  flipped[flipped.length - 5] = (flipped[flipped.length - 5] ?? 0) ^ 0x40;
  const f = join(tmp, "flipped.der");
  writeFileSync(f, flipped);
  const r = fleetd("--cert", f, "--roots", KEYLIME);
  assert.equal(r.code, 1);
  assert.match(r.out, /^verdict: fail$/m);
  assert.match(r.out, /- \[signature\] .*does not verify/);
  const wrong = fleetd("--cert", STM_RSA_PADDED, "--roots", C("ca/gce"), "--json");
  assert.equal(wrong.code, 1);
  assert.equal((JSON.parse(wrong.out) as { reasons: { check: string }[] }).reasons[0]?.check, "chain");
  const expired = fleetd("--cert", STM_RSA_PADDED, "--roots", KEYLIME, "--at", "2031-01-01");
  assert.equal(expired.code, 1);
  assert.match(expired.out, /\[validity\] .*expired 2028-07-11/);
  const allowed = fleetd("--cert", STM_RSA_PADDED, "--roots", KEYLIME, "--at", "2031-01-01", "--allow-expired");
  assert.equal(allowed.code, 0, allowed.out);
  assert.match(allowed.out, /^warnings:\n {2}- \[validity\]/m);
});

test("usage errors and malformed input: exit 2", () => {
  const garbage = join(tmp, "garbage.bin");
  writeFileSync(garbage, Buffer.from("30820400deadbeef", "hex"));
  for (const args of [
    [],
    ["--cert", STM_RSA_PADDED],
    ["--cert", STM_RSA_PADDED, "--roots", join(tmp, "no-such-dir")],
    ["--cert", join(tmp, "missing.der"), "--roots", KEYLIME],
    ["--cert", garbage, "--roots", KEYLIME],
    ["--cert", STM_RSA_PADDED, "--roots", KEYLIME, "--at", "yesterday-ish"],
    ["--ek-public", garbage],
    ["--ek-public", STM_RSA_PADDED, "--roots", KEYLIME],
    ["--bogus"],
  ]) {
    const r = fleetd(...args);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.out} ${r.err}`);
    assert.ok(r.err.length > 0, args.join(" "));
  }
  assert.match(fleetd("--cert", garbage, "--roots", KEYLIME).err, /malformed input \(truncated\)/);
});

test("--ek-public: binding of a TPM2B_PUBLIC and of a PEM public key of the same EK agree", () => {
  const tpm2b = C("ek/public/intel_ptt_rsa_ek.tpm2b_public.bin");
  const r = fleetd("--ek-public", tpm2b, "--json");
  assert.equal(r.code, 0, r.err);
  const j = JSON.parse(r.out) as { binding: string; form: string; name: string; template: { id: string; matches: boolean } };
  assert.equal(j.form, "tpm2b_public");
  assert.equal(j.name, "000bde890d2df97a20ef5dc72aa1c05998e5f90508df940688774b68d8d00daae0f8");
  assert.deepEqual(j.template, { id: "L-1", matches: true });
  // The STMicro certificate's key as a PEM public key, as `tpm2_createek -f pem` writes one.
  const pem = join(tmp, "ek.pem");
  const der = readFileSync(C("ek/certs/stm_st33htph_rsa_ek.der"));
  const certPem = `-----BEGIN CERTIFICATE-----\n${der.toString("base64").replace(/.{64}/g, "$&\n")}\n-----END CERTIFICATE-----\n`;
  writeFileSync(pem, createPublicKey(certPem).export({ type: "spki", format: "pem" }));
  const p = fleetd("--ek-public", pem);
  assert.equal(p.code, 0, p.err);
  assert.match(p.out, new RegExp(`^EK binding: ${BINDING}$`, "m"));
  // --cert with a matching --ek-public passes; with another TPM's public area it fails on ek-public-key.
  const both = fleetd("--cert", STM_RSA_PADDED, "--roots", KEYLIME, "--ek-public", pem, "--at", "2026-06-01T00:00:00Z");
  assert.equal(both.code, 0, both.out);
  const other = fleetd("--cert", STM_RSA_PADDED, "--roots", KEYLIME, "--ek-public", tpm2b, "--json");
  assert.equal(other.code, 1);
  assert.ok((JSON.parse(other.out) as { reasons: { check: string }[] }).reasons.some((x) => x.check === "ek-public-key"));
});
