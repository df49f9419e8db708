/**
 * The one PKCS#10 reader: what openssl writes parses (subject, key, requested extensions, other attributes), the
 * self-signature verifies over the exact certificationRequestInfo bytes, and bad input is only ever a ParseError
 * (structure, "not-der" for BER) or a CertificateError.
 */
import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import { createPublicKey } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import fc from "fast-check";
import { ParseError } from "@fleetd/verify/codec";
import {
  CertificateError, formatName, OID_EXTENSION_REQUEST, parseCertificationRequest, pemBlocks, verifyRequestSignature,
  type CertificationRequest,
} from "@fleetd/verify/x509";

const dir = mkdtempSync(join(tmpdir(), "fleetd-x509-csr-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function opensslCsr(keyAlg: string[], extra: string[] = []): Uint8Array {
  const key = join(dir, `k${Math.random().toString(36).slice(2)}`);
  execFileSync("openssl", ["genpkey", ...keyAlg, "-out", key]);
  const cnf = join(dir, "req.cnf");
  writeFileSync(cnf, "[req]\nprompt=no\ndistinguished_name=dn\nattributes=attrs\n[dn]\nO=system:nodes\nCN=system:node:n1\n[attrs]\nchallengePassword=sesame\n[ext]\nsubjectAltName=DNS:n1.example,IP:10.0.0.7,IP:2001:db8::1,email:a@b.example\nkeyUsage=critical,digitalSignature\n");
  const pem = execFileSync("openssl", ["req", "-new", "-config", cnf, "-key", key, ...extra], { encoding: "utf8" });
  const [block] = pemBlocks(pem);
  assert.equal(block?.label, "CERTIFICATE REQUEST");
  return block.der;
}

const keyOf = (r: CertificationRequest) => createPublicKey({ key: Buffer.from(r.spki.der), format: "der", type: "spki" });

test("openssl requests (EC, RSA, Ed25519) parse: subject, extensions, attributes, and the signature verifies", () => {
  for (const alg of [["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"], ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], ["-algorithm", "ED25519"]]) {
    const der = opensslCsr(alg, ["-reqexts", "ext"]);
    const r = parseCertificationRequest(der);
    assert.equal(r.version, 0);
    assert.equal(formatName(r.subject), "O=system:nodes, CN=system:node:n1");
    assert.deepEqual(r.ext.subjectAltName, [
      { kind: "dNSName", value: "n1.example" },
      { kind: "iPAddress", value: "10.0.0.7", bytes: Uint8Array.of(10, 0, 0, 7) },
      { kind: "iPAddress", value: "2001:db8:0:0:0:0:0:1", bytes: Uint8Array.from(Buffer.from("20010db8000000000000000000000001", "hex")) },
      { kind: "rfc822Name", value: "a@b.example" },
    ]);
    assert.deepEqual(r.ext.keyUsage, ["digitalSignature"]);
    assert.deepEqual(r.extensions.map((e) => [e.oid, e.critical]), [["2.5.29.17", false], ["2.5.29.15", true]]);
    assert.deepEqual(r.attributes.map((a) => a.type), ["1.2.840.113549.1.9.7"], "challengePassword; extensionRequest is read into extensions");
    assert.ok(!r.attributes.some((a) => a.type === OID_EXTENSION_REQUEST));
    assert.ok(Buffer.from(der).includes(Buffer.from(r.info)), "info is a view of the received bytes");
    assert.equal(verifyRequestSignature(r, keyOf(r)), true, alg.join(" "));
    const tampered = Uint8Array.from(r.signature);
    tampered[tampered.length - 1]! ^= 1;
    assert.equal(verifyRequestSignature({ ...r, signature: tampered }, keyOf(r)), false);
  }
});

test("strict DER: trailing bytes and non-minimal lengths are refused", () => {
  const der = opensslCsr(["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]);
  const e = (b: Uint8Array) => {
    try {
      parseCertificationRequest(b);
      return "ok";
    } catch (x) {
      assert.ok(x instanceof ParseError, String(x));
      return x.code;
    }
  };
  assert.equal(e(der), "ok");
  assert.equal(e(Buffer.concat([der, Uint8Array.of(0)])), "trailing-bytes");
  // the outer length re-encoded with one length byte too many (a leading zero)
  const n = der[1]! & 0x7f;
  const long = Buffer.concat([Uint8Array.of(0x30, 0x80 | (n + 1), 0x00), der.subarray(2)]);
  assert.equal(e(long), "not-der");
});

test("random, truncated and mutated requests: a ParseError or CertificateError, never anything else", () => {
  const der = opensslCsr(["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"], ["-reqexts", "ext"]);
  const typed = (b: Uint8Array) => {
    try {
      parseCertificationRequest(b);
    } catch (x) {
      assert.ok(x instanceof ParseError || x instanceof CertificateError, String(x));
    }
  };
  fc.assert(fc.property(fc.uint8Array({ maxLength: 600 }), typed), { numRuns: 300 });
  fc.assert(fc.property(fc.integer({ min: 0, max: der.length - 1 }), (n) => typed(der.subarray(0, n))), { numRuns: 200 });
  fc.assert(
    fc.property(fc.integer({ min: 0, max: der.length - 1 }), fc.integer({ min: 0, max: 255 }), (at, v) => {
      const b = Uint8Array.from(der);
      b[at] = v;
      typed(b);
    }),
    { numRuns: 400 },
  );
});
