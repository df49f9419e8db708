import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { ParseError } from "@fleetd/verify/codec";
import { conformance } from "@fleetd/testkit/conformance";
import { readCertificate, tpmInfoFromCertificate } from "@fleetd/verify/ek";
import { parseCertificate, serialHex, CertificateError, formatName, OID, toPem } from "@fleetd/verify/x509";
import { loadCaStore } from "@fleetd/platform/trust";

const bytes = (rel: string) => new Uint8Array(readFileSync(conformance(rel)));
const STM_RSA_PADDED = "ek/certs/stm_st33htph_rsa_ek_nvread_padded.bin";
const STM_RSA = "ek/certs/stm_st33htph_rsa_ek.der";

test("STMicro RSA EK: NV-padded and trimmed inputs give the same certificate", () => {
  const padded = readCertificate(bytes(STM_RSA_PADDED));
  const trimmed = readCertificate(bytes(STM_RSA));
  assert.equal(padded.form, "der+padding");
  assert.equal(padded.padding, 431);
  assert.equal(trimmed.form, "der");
  assert.equal(trimmed.padding, 0);
  assert.deepEqual(padded.cert.der, trimmed.cert.der);
  assert.equal(padded.cert.der.length, 1169);
  assert.equal(padded.cert.fingerprint, trimmed.cert.fingerprint);
});

test("STMicro RSA EK: fields, empty subject, critical TPM SAN, EKU, as node/OpenSSL reads them", () => {
  const { cert } = readCertificate(bytes(STM_RSA));
  const node = new X509Certificate(Buffer.from(cert.der));
  assert.equal(cert.fingerprint, node.fingerprint256.replaceAll(":", "").toLowerCase());
  assert.equal(serialHex(cert).toUpperCase(), node.serialNumber.toUpperCase());
  assert.equal(cert.version, 3);
  assert.equal(cert.subject.rdns.length, 0);
  assert.equal(formatName(cert.issuer), "C=CH, O=STMicroelectronics NV, CN=STM TPM EK Intermediate CA 05");
  assert.equal(cert.notBefore.toISOString(), new Date(node.validFrom).toISOString());
  assert.equal(cert.notAfter.toISOString(), new Date(node.validTo).toISOString());
  assert.equal(cert.spki.algorithm.oid, OID.rsaEncryption);
  assert.deepEqual(cert.ext.extKeyUsage, [OID.tcgKpEkCertificate]);
  assert.deepEqual(cert.ext.keyUsage, ["keyEncipherment"]);
  assert.deepEqual(cert.ext.basicConstraints, { cA: false });
  const san = cert.extensions.find((e) => e.oid === OID.subjectAltName);
  assert.equal(san?.critical, true);
  assert.deepEqual(tpmInfoFromCertificate(cert), {
    manufacturer: "id:53544D20",
    manufacturerId: "STM",
    model: "ST33HTPHAHB4",
    version: "id:00490004",
    source: "subjectAltName",
  });
  // tbsCertificate is the original bytes: the DER right after the outer header (30 82 04 8d).
  assert.deepEqual(cert.tbs, cert.der.subarray(4, 4 + cert.tbs.length));
});

test("the TCG NV wrapper 10 01 00 ‖ u16 length ‖ DER, PEM, and PEM bundles", () => {
  const der = bytes(STM_RSA);
  const wrapped = new Uint8Array([0x10, 0x01, 0x00, der.length >> 8, der.length & 0xff, ...der, 0xff, 0xff]);
  const w = readCertificate(wrapped);
  assert.equal(w.form, "tcg-nv-wrapper");
  assert.equal(w.padding, 2);
  assert.deepEqual(w.cert.der, der);
  const pem = new TextEncoder().encode("# comment\n" + toPem("CERTIFICATE", der));
  const p = readCertificate(pem);
  assert.equal(p.form, "pem");
  assert.deepEqual(p.cert.der, der);
  const ecc = bytes("ek/certs/stm_st33htph_ecc_ek.der");
  const bundle = readCertificate(new TextEncoder().encode(toPem("CERTIFICATE", der) + toPem("CERTIFICATE", ecc)));
  assert.equal(bundle.extra.length, 1);
  assert.deepEqual(bundle.extra[0]?.der, ecc);
  // A wrapper whose length runs past the data is truncated, with the field named.
  const short = wrapped.subarray(0, 100);
  assert.throws(() => readCertificate(short), (err: unknown) => err instanceof ParseError && err.code === "truncated" && /TCG NV certificate wrapper/.test(err.message));
});

test("trailing bytes that are not NV padding, garbage, truncation and empty input are typed errors", () => {
  const der = bytes(STM_RSA);
  const isCode = (code: string) => (e: unknown) => (e instanceof CertificateError || e instanceof ParseError) && e.code === code;
  assert.throws(() => readCertificate(new Uint8Array([...der, 0xff, 0x00])), isCode("trailing-bytes"));
  assert.throws(() => readCertificate(new Uint8Array([...der, 0x30, 0x00])), isCode("trailing-bytes"));
  assert.throws(() => readCertificate(new Uint8Array(0)), isCode("not-a-certificate"));
  assert.throws(() => readCertificate(new TextEncoder().encode("hello world")), isCode("not-a-certificate"));
  for (const cut of [1, 2, 4, 100, 500, der.length - 1]) {
    assert.throws(() => readCertificate(der.subarray(0, cut)), isCode("truncated"), `cut at ${cut}`);
  }
  assert.throws(() => readCertificate(new TextEncoder().encode("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n")), isCode("bad-pem"));
  assert.throws(() => readCertificate(new TextEncoder().encode("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")), isCode("not-a-certificate"));
  // A truncated inner field names its path.
  const broken = new Uint8Array(der);
  broken[4 + 4] = 0x7f; // tbsCertificate.version [0] length byte → runs past its contents
  assert.throws(() => readCertificate(broken), (e: unknown) => e instanceof ParseError && e.message.includes("tbsCertificate"));
});

test("every certificate in the three CA stores parses and agrees with node's X509Certificate", () => {
  let n = 0;
  for (const dir of ["ca/keylime-tpm_cert_store", "ca/tpm-ca-certificates", "ca/gce"]) {
    const store = loadCaStore(conformance(dir));
    assert.deepEqual(store.skipped, [], `${dir}: nothing skipped`);
    for (const { cert, source } of store.certs) {
      const node = new X509Certificate(Buffer.from(cert.der));
      assert.equal(cert.fingerprint, node.fingerprint256.replaceAll(":", "").toLowerCase(), source);
      assert.equal(cert.notAfter.getTime(), new Date(node.validTo).getTime(), source);
      assert.equal(cert.notBefore.getTime(), new Date(node.validFrom).getTime(), source);
      n++;
    }
  }
  assert.equal(n, 45 + 169 + 5);
});

test("Nuvoton roots with non-DER-sorted multi-valued RDNs parse; the SET keeps its original order", () => {
  const store = loadCaStore(conformance("ca/keylime-tpm_cert_store"));
  const nuvo = store.certs.filter((c) => c.source.startsWith("NUVO_") || c.source.startsWith("NTC"));
  assert.equal(nuvo.length, 7);
  const n2110 = store.certs.find((c) => c.source === "NUVO_2110.pem");
  assert.ok(n2110);
  const rdn = n2110.cert.subject.rdns[0] ?? [];
  assert.equal(rdn.length, 3, "one multi-valued RDN");
  assert.deepEqual(
    rdn.map((a) => a.type),
    ["2.5.4.3", "2.5.4.10", "2.5.4.6"],
    "CN, O, C as encoded (DER would sort them by encoding: C first)",
  );
  // The raw subject is reproduced byte for byte (never re-encoded).
  const tbs = Buffer.from(n2110.cert.tbs);
  assert.ok(tbs.includes(Buffer.from(n2110.cert.subject.der)));
});

test("parseCertificate rejects trailing bytes inside and after the outer SEQUENCE", () => {
  const der = bytes(STM_RSA);
  assert.throws(() => parseCertificate(new Uint8Array([...der, 0])), (e: unknown) => e instanceof ParseError && e.code === "trailing-bytes");
});
