/**
 * EK certificates and EK templates from NV on an swtpm manufactured by swtpm_setup with a private
 * swtpm-localca: the RSA certificate at 0x01C00002 certifies exactly the key createEk("rsa") recreates from the
 * default template; the ECC one sits in the high range (swtpm_setup makes a P-384 EK, 0x01C00016). NV templates
 * (0x01C00004 + nonce 0x01C00003) are written with tpm2-tools through swtpm's TCTI.
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { encode } from "@fleetd/verify/codec";
import { EK_NV, TPM_RH } from "@fleetd/verify/tcg";
import { keyObjectFromTpmPublic, TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { ekTemplate } from "@fleetd/verify/ek";
import { makeCredential } from "@fleetd/verify/credential";
import { activateCredential, createAk, createEk, createSrk, load, readEkCertificates, readNvIndex, TcpTransport, TpmClient } from "@fleetd/platform/tpmclient";
import { startRawSwtpm, type RawSwtpm } from "../harness/swtpm-raw.js";

let swtpm: RawSwtpm;
before(async () => {
  swtpm = await startRawSwtpm({ ekCerts: true });
});
after(async () => {
  await swtpm?.stop();
});

/** tpm2-tools on the same swtpm (only while no client of ours holds the connection: swtpm serves one at a time). */
function tpm2(tool: string, ...args: string[]): string {
  return execFileSync(`tpm2_${tool}`, args, { env: { ...process.env, TPM2TOOLS_TCTI: swtpm.tcti }, cwd: swtpm.dir, encoding: "utf8" });
}

async function withTpm<T>(fn: (tpm: TpmClient) => Promise<T>): Promise<T> {
  const tpm = new TpmClient(new TcpTransport(swtpm.host, swtpm.port));
  try {
    return await fn(tpm);
  } finally {
    await tpm.close();
  }
}

test("EK certificates are read whole from NV (RSA low range, ECC P-384 high range) and certify the recreated EK", async () => {
  await withTpm(async (tpm) => {
    const certs = await readEkCertificates(tpm);
    assert.deepEqual(certs.map((c) => c.index), [EK_NV.RSA2048_CERT, EK_NV.ECC_P384_H_CERT]);
    const rsa = certs[0];
    assert.ok(rsa);
    const cert = new X509Certificate(rsa.bytes);
    const issuer = new X509Certificate(readFileSync(join(swtpm.caDir ?? "", "issuercert.pem")));
    assert.ok(cert.verify(issuer.publicKey), "the EK certificate is signed by the local CA");
    const ek = await createEk(tpm, "rsa");
    assert.ok(keyObjectFromTpmPublic(ek.public).equals(cert.publicKey), "the certificate's key is the default-template RSA EK");
    // ... and not the ECC EK's, which is the high-range H-3 (P-384) EK.
    const ecc = new X509Certificate(certs[1]?.bytes ?? new Uint8Array());
    assert.ok(!keyObjectFromTpmPublic(ek.public).equals(ecc.publicKey));
    assert.ok(ecc.verify(issuer.publicKey));
    await tpm.flushContext(ek.handle);
    const h3 = await createEk(tpm, "H-3");
    assert.ok(keyObjectFromTpmPublic(h3.public).equals(ecc.publicKey), "the ECC certificate's key is the H-3 EK");
    await tpm.flushContext(h3.handle);
    assert.equal(rsa.bytes.length, (await tpm.nvReadPublic(EK_NV.RSA2048_CERT)).nvPublic.dataSize);
    // Read in NV_Read chunks smaller than the certificate, the pieces join to the same bytes.
    assert.deepEqual((await readNvIndex(tpm, EK_NV.RSA2048_CERT, { chunk: 100 }))?.data, rsa.bytes);
  });
});

test("createEk from an NV template: the template is used, and its nonce fills the start of the unique field", async () => {
  const tmpl = encode(TPMT_PUBLIC, ekTemplate("L-1").public);
  const nonce = Buffer.alloc(16, 0xab);
  writeFileSync(join(swtpm.dir, "tmpl.bin"), tmpl);
  writeFileSync(join(swtpm.dir, "nonce.bin"), nonce);
  tpm2("nvdefine", "0x01c00004", "-C", "o", "-s", String(tmpl.length), "-a", "ownerread|ownerwrite|authread|no_da");
  tpm2("nvwrite", "0x01c00004", "-C", "o", "-i", "tmpl.bin");
  const [withoutNonce, defaultEk] = await withTpm(async (tpm) => {
    const nv = await createEk(tpm, "rsa", { nvTemplate: true });
    await tpm.flushContext(nv.handle);
    const def = await createEk(tpm, "rsa");
    await tpm.flushContext(def.handle);
    assert.equal(nv.template, "nv");
    assert.equal(def.template, "default");
    return [nv, def];
  });
  assert.deepEqual(withoutNonce.name, defaultEk.name, "the default template stored in NV gives the default EK");

  tpm2("nvdefine", "0x01c00003", "-C", "o", "-s", String(nonce.length), "-a", "ownerread|ownerwrite|authread|no_da");
  tpm2("nvwrite", "0x01c00003", "-C", "o", "-i", "nonce.bin");
  await withTpm(async (tpm) => {
    assert.deepEqual((await readNvIndex(tpm, EK_NV.RSA2048_NONCE))?.data, new Uint8Array(nonce));
    const nv = await createEk(tpm, "rsa", { nvTemplate: true });
    await tpm.flushContext(nv.handle);
    assert.notDeepEqual(nv.name, defaultEk.name);
    const n = new Uint8Array(256);
    n.set(nonce);
    const explicit = await tpm.createPrimary(TPM_RH.ENDORSEMENT, { ...ekTemplate("L-1").public, unique: { kind: "rsa", n } });
    await tpm.flushContext(explicit.handle);
    assert.deepEqual(nv.name, explicit.name);
  });
});

test("activation with the high-range H-3 EK (P-384, SHA-384 nameAlg, userWithAuth: password, not PolicySecret)", async () => {
  await withTpm(async (tpm) => {
    const ek = await createEk(tpm, "H-3");
    const srk = await createSrk(tpm, "ecc");
    const ak = await load(tpm, srk, await createAk(tpm, srk, "ecc"));
    await tpm.flushContext(srk.handle);
    const secret = new Uint8Array(48).fill(0x5a); // up to the EK nameAlg's digest size
    const cred = makeCredential(ek.public, ak.name, secret);
    assert.deepEqual(await activateCredential(tpm, ak, ek, cred.idObject, cred.encryptedSecret), secret);
    await tpm.flushContext(ak.handle);
    await tpm.flushContext(ek.handle);
  });
});
