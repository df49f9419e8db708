import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { test } from "node:test";
import { conformance } from "@fleetd/testkit/conformance";
import {
  C,
  CN,
  O,
  basicConstraints,
  buildCertificate,
  ecKey,
  extKeyUsage,
  keyUsage,
  relabelRsaAsOaep,
  rsaKey,
  tpmSan,
  type SigAlg,
  type TestKey,
} from "@fleetd/testkit/x509Builder";
import { readCertificate, isSelfIssued, verifyCertificateChain, caStoreFrom, type CaStore, verifyEkCertificate } from "@fleetd/verify/ek";
import { type Certificate, parseCertificate, OID, canonicalKey, verifyCertificateSignature } from "@fleetd/verify/x509";
import { loadCaStore } from "@fleetd/platform/trust";

const cert = (rel: string) => readCertificate(new Uint8Array(readFileSync(conformance(rel)))).cert;
const keylime = loadCaStore(conformance("ca/keylime-tpm_cert_store"));
const bundles = loadCaStore(conformance("ca/tpm-ca-certificates"));
const gce = loadCaStore(conformance("ca/gce"));
const AT = new Date("2026-06-01T00:00:00Z");
const checks = (v: { reasons: { check: string }[] }) => v.reasons.map((r) => r.check);

test("STMicro RSA EK (padded and trimmed) chains STM_RSA_05I → STM_RSA_RT → GS_TPM_RT in keylime's store", () => {
  for (const f of ["ek/certs/stm_st33htph_rsa_ek_nvread_padded.bin", "ek/certs/stm_st33htph_rsa_ek.der"]) {
    const v = verifyEkCertificate(cert(f), keylime, { at: AT });
    assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
    assert.deepEqual(
      v.chain.map((l) => l.source),
      ["input", "STM_RSA_05I.pem", "STM_RSA_RT.pem", "GS_TPM_RT.pem"],
    );
    assert.equal(v.chain[3]?.subject, v.chain[3]?.issuer);
    assert.equal(v.binding, "de6a6ba0564fc32ed137b2e2c97b39c741e87a3fbbb80bc9092b75b6dc8a2aab");
    assert.equal(v.key, "RSA-2048");
    assert.equal(v.tpm.model, "ST33HTPHAHB4");
    assert.deepEqual(v.warnings, []);
  }
});

test("STMicro RSA and ECC EKs chain to the tpm-ca-certificates bundles; ECC fails on keylime's store (no GlobalSign ECC root)", () => {
  const rsa = verifyEkCertificate(cert("ek/certs/stm_st33htph_rsa_ek.der"), bundles, { at: AT });
  assert.equal(rsa.verdict, "pass", JSON.stringify(rsa.reasons));
  const ecc = verifyEkCertificate(cert("ek/certs/stm_st33htph_ecc_ek.der"), bundles, { at: AT });
  assert.equal(ecc.verdict, "pass", JSON.stringify(ecc.reasons));
  assert.equal(ecc.chain.length, 4);
  assert.match(ecc.chain[3]?.subject ?? "", /GlobalSign Trusted Platform Module ECC Root CA/);
  assert.equal(ecc.key, "ECC P-256");
  const partial = verifyEkCertificate(cert("ek/certs/stm_st33htph_ecc_ek.der"), keylime, { at: AT });
  assert.equal(partial.verdict, "fail");
  assert.deepEqual(checks(partial), ["chain"]);
  assert.match(partial.reasons[0]?.detail ?? "", /GlobalSign Trusted Platform Module ECC Root CA/);
  assert.equal(partial.chain.length, 3, "the path found so far is reported");
});

test("all eight GCE EK/AK certificates chain to ca/gce", () => {
  const files = readdirSync(conformance("ek/certs")).filter((f) => f.startsWith("gce_"));
  assert.equal(files.length, 8);
  for (const f of files) {
    const v = verifyEkCertificate(cert(`ek/certs/${f}`), gce, { at: AT });
    assert.equal(v.verdict, "pass", `${f}: ${JSON.stringify(v.reasons)}`);
    assert.equal(v.chain.length, 3, f);
    const expectRoot = f.startsWith("gce_pca") ? "EK/AK CA Root" : "tpm_ek_v1_cloud_host_root-signer";
    assert.match(v.chain[2]?.subject ?? "", new RegExp(expectRoot), f);
  }
});

test("a flipped signature byte, a wrong store and an empty store are refused with named checks", () => {
  const good = cert("ek/certs/stm_st33htph_rsa_ek.der");
  const flipped = new Uint8Array(good.der);
  flipped[flipped.length - 10] = (flipped[flipped.length - 10] ?? 0) ^ 0x01;
  const bad = verifyEkCertificate(parseCertificate(flipped), keylime, { at: AT });
  assert.equal(bad.verdict, "fail");
  assert.deepEqual(checks(bad), ["signature"]);
  assert.match(bad.reasons[0]?.detail ?? "", /does not verify with the key of "C=CH, O=STMicroelectronics NV, CN=STM TPM EK Intermediate CA 05"/);

  // A changed tbsCertificate byte (the notAfter year) also breaks the signature.
  const tampered = new Uint8Array(good.der);
  const at = Buffer.from(tampered).indexOf(Buffer.from("280711000000Z"));
  assert.ok(at > 0);
  tampered[at + 1] = 0x39; // 2028 → 2098
  assert.deepEqual(checks(verifyEkCertificate(parseCertificate(tampered), keylime, { at: AT })), ["signature"]);

  const wrong = verifyEkCertificate(good, gce, { at: AT });
  assert.equal(wrong.verdict, "fail");
  assert.deepEqual(checks(wrong), ["chain"]);
  const empty = verifyEkCertificate(good, caStoreFrom([]), { at: AT });
  assert.deepEqual(checks(empty), ["chain"]);
});

test("expiry is enforced by default and can be allowed explicitly; notBefore is always enforced", () => {
  const stm = cert("ek/certs/stm_st33htph_rsa_ek.der");
  const later = new Date("2030-01-01T00:00:00Z");
  const v = verifyEkCertificate(stm, keylime, { at: later });
  assert.equal(v.verdict, "fail");
  assert.deepEqual(checks(v), ["validity"]);
  assert.match(v.reasons[0]?.detail ?? "", /expired 2028-07-11/);
  const allowed = verifyEkCertificate(stm, keylime, { at: later, allowExpired: true });
  assert.equal(allowed.verdict, "pass");
  assert.deepEqual(allowed.warnings.map((w) => w.check), ["validity"]);
  const early = verifyEkCertificate(stm, keylime, { at: new Date("2018-01-01T00:00:00Z"), allowExpired: true });
  assert.equal(early.verdict, "fail");
  assert.ok(checks(early).every((c) => c === "validity"));
  assert.match(early.reasons[0]?.detail ?? "", /not valid before 2018-07-11/);
});

test("every self-signed root in the stores verifies its own signature over the original tbsCertificate (Nuvoton included), as OpenSSL agrees", () => {
  let roots = 0;
  for (const store of [keylime, bundles, gce]) {
    for (const { cert: c, source } of store.certs) {
      if (!isSelfIssued(c)) continue;
      const node = new X509Certificate(Buffer.from(c.der));
      const mine = verifyCertificateSignature(c, canonicalKey(c.spki));
      assert.equal(mine.ok, node.verify(node.publicKey), source);
      assert.ok(mine.ok, `${source}: ${mine.ok ? "" : mine.detail}`);
      roots++;
    }
  }
  assert.ok(roots >= 30, `found ${roots} roots`);
  const nuvo = keylime.certs.find((c) => c.source === "NUVO_2110.pem");
  assert.ok(nuvo);
  const v = verifyCertificateChain(nuvo.cert, keylime, { at: AT });
  assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
  assert.equal(v.chain.length, 1);
});

test("every issuer/subject pair in the bundles verifies with our code exactly when OpenSSL's checkIssued+verify says so", () => {
  const all = [...bundles.certs];
  const byName = new Map<string, typeof all>();
  for (const e of all) {
    const k = new X509Certificate(Buffer.from(e.cert.der)).subject;
    byName.set(k, [...(byName.get(k) ?? []), e]);
  }
  let pairs = 0;
  for (const child of all) {
    const nc = new X509Certificate(Buffer.from(child.cert.der));
    for (const parent of byName.get(nc.issuer) ?? []) {
      const np = new X509Certificate(Buffer.from(parent.cert.der));
      const mine = verifyCertificateSignature(child.cert, canonicalKey(parent.cert.spki)).ok;
      assert.equal(mine, nc.verify(np.publicKey), `${child.source} by ${parent.source}`);
      pairs++;
    }
  }
  assert.ok(pairs > 150, `${pairs} pairs`);
});

// ---- synthetic chains: algorithms and defects the conformance data lacks ----

interface Ca {
  key: TestKey;
  name: [string, string][][];
  der: Uint8Array;
}

function root(key: TestKey, cn: string, alg: SigAlg, extra: Partial<Parameters<typeof buildCertificate>[0]> = {}): Ca {
  const name: [string, string][][] = [[[C, "XX"]], [[O, "fleetd test"]], [[CN, cn]]];
  const der = buildCertificate({
    subject: name,
    issuer: name,
    spki: key.spki,
    signer: key.privateKey,
    sigAlg: alg,
    extensions: [basicConstraints(true), keyUsage(5, 6)],
    ...extra,
  });
  return { key, name, der };
}

function sub(parent: Ca, key: TestKey, cn: string, alg: SigAlg, extra: Partial<Parameters<typeof buildCertificate>[0]> = {}): Ca {
  const name: [string, string][][] = [[[C, "XX"]], [[O, "fleetd test"]], [[CN, cn]]];
  const der = buildCertificate({
    subject: name,
    issuer: parent.name,
    serial: 7,
    spki: key.spki,
    signer: parent.key.privateKey,
    sigAlg: alg,
    extensions: [basicConstraints(true, 0), keyUsage(5)],
    ...extra,
  });
  return { key, name, der };
}

function ekCert(issuer: Ca, spki: Uint8Array, alg: SigAlg, extensions = [tpmSan("id:464C4544", "fleetd-test", "id:00010002"), basicConstraints(false), extKeyUsage(OID.tcgKpEkCertificate), keyUsage(2)], extra: Partial<Parameters<typeof buildCertificate>[0]> = {}): Certificate {
  return parseCertificate(
    buildCertificate({ subject: [], issuer: issuer.name, serial: 0x1234, spki, signer: issuer.key.privateKey, sigAlg: alg, extensions, ...extra }),
  );
}

const store = (...cas: Ca[]): CaStore => caStoreFrom(cas.map((c, i) => ({ cert: parseCertificate(c.der), source: `ca${i}` })));

// RSA key generation is slow: a few keys, reused where distinct keys do not matter.
const R = [rsaKey(), rsaKey(), rsaKey(), rsaKey()] as const;
const leafKey = R[3];
const rsaRoot = root(R[0], "RSA Root", "sha256WithRSA");
const pssInt = sub(rsaRoot, R[1], "PSS Intermediate", "pss-sha384");
const ecRoot = root(ecKey("secp384r1"), "P-384 Root", "ecdsa-sha384");
const ecInt = sub(ecRoot, ecKey("secp521r1"), "P-521 Intermediate", "ecdsa-sha512");

test("RSA-PSS, ECDSA P-384/SHA-384 and P-521/SHA-512 signatures; id-RSAES-OAEP EK keys; critical TPM SAN", () => {
  const ekRsa = leafKey;
  const oaep = relabelRsaAsOaep(ekRsa.spki);
  const leaf = ekCert(pssInt, oaep, "pss-sha256");
  assert.equal(leaf.spki.algorithm.oid, OID.rsaesOaep);
  const v = verifyEkCertificate(leaf, store(rsaRoot, pssInt));
  assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
  assert.equal(v.chain.length, 3);
  assert.equal(v.tpm.manufacturerId, "FLED");
  // The binding of the OAEP-labelled key equals the rsaEncryption form of the same key.
  assert.equal(v.binding, canonicalKeyBinding(ekRsa.spki));

  const ekEc = ecKey("prime256v1");
  const v2 = verifyEkCertificate(ekCert(ecInt, ekEc.spki, "ecdsa-sha512"), store(ecRoot, ecInt));
  assert.equal(v2.verdict, "pass", JSON.stringify(v2.reasons));
  assert.equal(v2.key, "ECC P-256");
});

function canonicalKeyBinding(spki: Uint8Array): string {
  return verifyEkCertificate(ekCert(rsaRoot, spki, "sha256WithRSA"), store(rsaRoot)).binding ?? "";
}

test("CA flags, keyCertSign, path length, unknown critical extensions, EKU and signature-algorithm mismatch are named", () => {
  const k = R[2];
  const notCa = sub(rsaRoot, k, "Not a CA", "sha256WithRSA", { extensions: [basicConstraints(false), keyUsage(5)] });
  assert.deepEqual(checks(verifyEkCertificate(ekCert(notCa, leafKey.spki, "sha256WithRSA"), store(rsaRoot, notCa))), ["ca"]);

  const noBc = sub(rsaRoot, k, "No basicConstraints", "sha256WithRSA", { extensions: [keyUsage(5)] });
  assert.deepEqual(checks(verifyEkCertificate(ekCert(noBc, leafKey.spki, "sha256WithRSA"), store(rsaRoot, noBc))), ["ca"]);

  const noSign = sub(rsaRoot, k, "No keyCertSign", "sha256WithRSA", { extensions: [basicConstraints(true), keyUsage(0)] });
  assert.deepEqual(checks(verifyEkCertificate(ekCert(noSign, leafKey.spki, "sha256WithRSA"), store(rsaRoot, noSign))), ["key-usage"]);

  // pathLen 0 on the first intermediate forbids a second intermediate below it.
  const i1 = sub(rsaRoot, R[1], "I1", "sha256WithRSA");
  const i2 = sub(i1, R[2], "I2", "sha256WithRSA", { extensions: [basicConstraints(true), keyUsage(5)] });
  assert.deepEqual(checks(verifyEkCertificate(ekCert(i2, leafKey.spki, "sha256WithRSA"), store(rsaRoot, i1, i2))), ["path-length"]);

  const weird = ekCert(pssInt, leafKey.spki, "sha256WithRSA", [tpmSan("id:00000000", "x", "y"), { oid: "1.2.3.4.5", critical: true, value: Uint8Array.of(0x05, 0x00) }]);
  assert.deepEqual(checks(verifyEkCertificate(weird, store(rsaRoot, pssInt))), ["critical-extension"]);

  const serverAuth = ekCert(pssInt, leafKey.spki, "sha256WithRSA", [extKeyUsage("1.3.6.1.5.5.7.3.1")]);
  assert.deepEqual(checks(verifyEkCertificate(serverAuth, store(rsaRoot, pssInt))), ["ek-eku"]);

  const caLeaf = ekCert(pssInt, leafKey.spki, "sha256WithRSA", [basicConstraints(true)]);
  assert.deepEqual(checks(verifyEkCertificate(caLeaf, store(rsaRoot, pssInt))), ["ek-ca"]);

  const mismatch = ekCert(pssInt, leafKey.spki, "sha256WithRSA", undefined, { tbsSigAlgOverride: "sha384WithRSA" });
  assert.deepEqual(checks(verifyEkCertificate(mismatch, store(rsaRoot, pssInt))), ["signature-algorithm"]);
});

test("an expired intermediate fails by default and passes with allowExpired (with a warning); SHA-1 is a warning unless rejected", () => {
  const old = sub(rsaRoot, R[2], "Expired Intermediate", "sha1WithRSA", { notAfter: new Date("2025-10-20T13:47:43Z") });
  const leaf = ekCert(old, leafKey.spki, "sha256WithRSA");
  const s = store(rsaRoot, old);
  const at = new Date("2026-06-01T00:00:00Z");
  const strict = verifyEkCertificate(leaf, s, { at });
  assert.deepEqual(checks(strict), ["validity"]);
  assert.match(strict.reasons[0]?.detail ?? "", /"C=XX, O=fleetd test, CN=Expired Intermediate" expired 2025-10-20T13:47:43/);
  const lax = verifyEkCertificate(leaf, s, { at, allowExpired: true });
  assert.equal(lax.verdict, "pass");
  assert.deepEqual(lax.warnings.map((w) => w.check).sort(), ["sha1", "validity"]);
  const noSha1 = verifyEkCertificate(leaf, s, { at, allowExpired: true, rejectSha1: true });
  assert.deepEqual(checks(noSha1), ["sha1"]);
});

test("cross-signed loops without a root terminate with a chain failure; untrusted intermediates from the input are used", () => {
  const a = R[1];
  const b = R[2];
  const nameA: [string, string][][] = [[[CN, "Loop A"]]];
  const nameB: [string, string][][] = [[[CN, "Loop B"]]];
  const aByB = buildCertificate({ subject: nameA, issuer: nameB, spki: a.spki, signer: b.privateKey, sigAlg: "sha256WithRSA", extensions: [basicConstraints(true)] });
  const bByA = buildCertificate({ subject: nameB, issuer: nameA, spki: b.spki, signer: a.privateKey, sigAlg: "sha256WithRSA", extensions: [basicConstraints(true)] });
  const caA: Ca = { key: a, name: nameA, der: aByB };
  const loop = caStoreFrom([
    { cert: parseCertificate(aByB), source: "aByB" },
    { cert: parseCertificate(bByA), source: "bByA" },
  ]);
  const v = verifyEkCertificate(ekCert(caA, leafKey.spki, "sha256WithRSA"), loop);
  assert.equal(v.verdict, "fail");
  assert.deepEqual([...new Set(checks(v))], ["chain"]);

  // The intermediate is not in the store but handed over with the EK certificate.
  const leaf = ekCert(pssInt, leafKey.spki, "sha256WithRSA");
  assert.deepEqual(checks(verifyEkCertificate(leaf, store(rsaRoot))), ["chain"]);
  const withInt = verifyEkCertificate(leaf, store(rsaRoot), { intermediates: [parseCertificate(pssInt.der)] });
  assert.equal(withInt.verdict, "pass", JSON.stringify(withInt.reasons));
  assert.equal(withInt.chain[1]?.source, "input#1");
  // partialChain lets a trusted intermediate end the path.
  assert.equal(verifyEkCertificate(leaf, store(pssInt)).verdict, "fail");
  assert.equal(verifyEkCertificate(leaf, store(pssInt), { partialChain: true }).verdict, "pass");
});

test("an issuer with the right name but another key is skipped in favour of the right one", () => {
  const impostor = root(R[2], "RSA Root", "sha256WithRSA");
  const leaf = ekCert(rsaRoot, leafKey.spki, "sha256WithRSA");
  const v = verifyEkCertificate(leaf, store(impostor, rsaRoot));
  assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
  assert.equal(v.chain[1]?.source, "ca1");
  const onlyImpostor = verifyEkCertificate(leaf, store(impostor));
  assert.deepEqual(checks(onlyImpostor), ["signature"]);
});

test("the path search is bounded: a signature budget that is too small stops with a chain failure", () => {
  const stm = cert("ek/certs/stm_st33htph_rsa_ek.der");
  const v = verifyEkCertificate(stm, keylime, { at: AT, maxSignatureChecks: 2 });
  assert.equal(v.verdict, "fail");
  assert.match(v.reasons.map((r) => r.detail).join("\n"), /stopped after 2 signature checks/);
  assert.equal(verifyEkCertificate(stm, keylime, { at: AT, maxSignatureChecks: 3 }).verdict, "pass");
});
