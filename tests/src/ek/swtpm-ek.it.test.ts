/**
 * EK identity against a real swtpm: EK certificates read from NV with tpm2-tools, EK public areas read and
 * regenerated with tpm2_createek, chains to the swtpm local CA. Fails (never skips) if swtpm or tpm2-tools
 * are missing.
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { decodeExact, ekBindingFromCertificate, ekPublicFromCertificate, ekPublicMatchesCertificate, ekTemplateForNvIndex, identifyEkTemplate, readCertificate, readEkPublic, TPM2B_PUBLIC, verifyEkCertificate } from "@fleetd/verify";
import { loadCaStore } from "@fleetd/platform/trust";
import { type ManufacturedTpm, type RunningSwtpm, manufactureTpm, startSwtpm } from "../harness/swtpm-ek.js";

let made: ManufacturedTpm;
let tpm: RunningSwtpm;
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const read = (p: string) => new Uint8Array(readFileSync(p));
const out = (name: string) => join(made.dir, name);

before(async () => {
  made = await manufactureTpm();
  tpm = await startSwtpm(made.stateDir);
});
after(async () => {
  await tpm?.stop();
  made?.cleanup();
});

/** NV indices and persistent handles swtpm 0.7.1 uses (found with tpm2_getcap; asserted below). */
const EKS = [
  { alg: "rsa", nvIndex: 0x01c00002, handle: "0x81010001", createekAlg: "rsa", template: "L-1", key: "RSA-2048", certFile: "ek-rsa2048.crt" },
  { alg: "ecc", nvIndex: 0x01c00016, handle: "0x81010016", createekAlg: "ecc384", template: "H-3", key: "ECC P-384", certFile: "ek-secp384r1.crt" },
] as const;

test("swtpm 0.7.1 puts the RSA EK certificate at 0x01C00002 (low range) and the ECC P-384 one at 0x01C00016 (high range H-3)", async () => {
  const nv = await tpm.tpm2("tpm2_getcap", ["handles-nv-index"]);
  const indices = nv.split("\n").map((l) => l.replace(/^- /, "").trim()).filter(Boolean).map((s) => Number.parseInt(s, 16));
  for (const ek of EKS) assert.ok(indices.includes(ek.nvIndex), `NV index 0x${ek.nvIndex.toString(16)} in ${nv}`);
  const persistent = await tpm.tpm2("tpm2_getcap", ["handles-persistent"]);
  for (const ek of EKS) assert.match(persistent, new RegExp(ek.handle, "i"));
});

for (const ek of EKS) {
  test(`${ek.alg.toUpperCase()} EK: certificate binding = TPM2B_PUBLIC binding = PEM binding; template ${ek.template}; chain to the local CA; same Name`, async () => {
    // The certificate, read from NV as a verifier's agent would.
    const nvFile = out(`${ek.alg}.nv`);
    await tpm.tpm2("tpm2_nvread", [`0x${ek.nvIndex.toString(16)}`, "-o", nvFile]);
    const nvBytes = read(nvFile);
    assert.deepEqual(nvBytes, read(join(made.certsDir, ek.certFile)), "NV holds the certificate swtpm_setup issued");
    const { cert } = readCertificate(nvBytes);

    // The EK public area, as the TPM reports it (persistent handle) and as tpm2_createek regenerates it.
    const pubFile = out(`${ek.alg}.readpublic.tpm2b`);
    const nameFile = out(`${ek.alg}.name`);
    await tpm.tpm2("tpm2_readpublic", ["-c", ek.handle, "-o", pubFile, "-n", nameFile]);
    const tssFile = out(`${ek.alg}.createek.tpm2b`);
    const pemFile = out(`${ek.alg}.createek.pem`);
    await tpm.tpm2("tpm2_createek", ["-c", out(`${ek.alg}.ctx`), "-G", ek.createekAlg, "-u", tssFile, "-f", "tss"]);
    await tpm.tpm2("tpm2_flushcontext", ["-t"]);
    await tpm.tpm2("tpm2_createek", ["-c", out(`${ek.alg}-pem.ctx`), "-G", ek.createekAlg, "-u", pemFile, "-f", "pem"]);
    await tpm.tpm2("tpm2_flushcontext", ["-t"]);
    assert.deepEqual(read(tssFile), read(pubFile), "tpm2_createek regenerates the persistent EK");

    const fromCert = ekBindingFromCertificate(cert);
    const tss = readEkPublic(read(tssFile));
    const pem = readEkPublic(read(pemFile));
    assert.equal(tss.form, "tpm2b_public");
    assert.equal(pem.form, "pem");
    assert.equal(tss.binding, fromCert);
    assert.equal(pem.binding, fromCert);

    const pub = decodeExact(TPM2B_PUBLIC, read(pubFile));
    const t = identifyEkTemplate(pub);
    assert.ok(t.ok, t.ok ? "" : t.detail);
    assert.equal(t.template.id, ek.template);
    assert.equal(ekTemplateForNvIndex(ek.nvIndex)?.id, ek.template);
    assert.ok(ekPublicMatchesCertificate(pub, cert).ok);

    const store = loadCaStore(made.caDir);
    assert.equal(store.certs.length, 2, "root and issuer certificate");
    const v = verifyEkCertificate(cert, store);
    assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
    assert.equal(v.key, ek.key);
    assert.equal(v.binding, fromCert);
    assert.deepEqual(v.chain.map((l) => l.subject), ["CN=unknown", "CN=swtpm-localca", "CN=swtpm-localca-rootca"]);
    assert.equal(v.tpm.model, "swtpm");
    assert.equal(v.tpm.manufacturer, "id:00001014");

    // The EK Name without the TPM: template for this NV index + the certificate's key.
    const template = ekTemplateForNvIndex(ek.nvIndex);
    assert.ok(template);
    const built = ekPublicFromCertificate(cert, template);
    assert.equal(hex(built.name), hex(read(nameFile)), "Name from certificate = Name the TPM reports");
    assert.deepEqual(built.bytes, read(pubFile).subarray(2), "rebuilt TPMT_PUBLIC is byte-identical");

    // And the CLI agrees.
    const main = fileURLToPath(new URL("./main.js", import.meta.resolve("@fleetd/cli")));
    const cli = spawnSync(process.execPath, [main, "verify", "ek", "--cert", nvFile, "--roots", made.caDir, "--ek-public", tssFile, "--json"], { encoding: "utf8" });
    assert.equal(cli.status, 0, cli.stdout + cli.stderr);
    const j = JSON.parse(cli.stdout) as { binding: string; verdict: string; ekPublic: { binding: string; template: { id: string; matches: boolean } } };
    assert.equal(j.binding, fromCert);
    assert.equal(j.ekPublic.binding, fromCert);
    assert.deepEqual(j.ekPublic.template, { id: ek.template, matches: true });
    const pemCli = spawnSync(process.execPath, [main, "verify", "ek", "--ek-public", pemFile], { encoding: "utf8" });
    assert.equal(pemCli.status, 0, pemCli.stderr);
    assert.match(pemCli.stdout, new RegExp(`^EK binding: ${fromCert}$`, "m"));
  });
}

test("a certificate from this swtpm does not chain to another swtpm's local CA", async () => {
  const other = await manufactureTpm();
  try {
    const { cert } = readCertificate(read(join(made.certsDir, "ek-rsa2048.crt")));
    const v = verifyEkCertificate(cert, loadCaStore(other.caDir));
    assert.equal(v.verdict, "fail");
    assert.deepEqual([...new Set(v.reasons.map((r) => r.check))], ["signature"], JSON.stringify(v.reasons));
  } finally {
    other.cleanup();
  }
});
