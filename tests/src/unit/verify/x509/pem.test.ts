/** The one PEM codec (RFC 7468, strict base64, no headers) and its certificate helpers. */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import {
  CertificateError, certificatesFromPem, certificateToPem, looksLikePem, pemBlocks, pemBlocksOnly, toPem,
} from "@fleetd/verify/x509";

const code = (f: () => unknown): string => {
  try {
    f();
    return "ok";
  } catch (e) {
    assert.ok(e instanceof CertificateError, `not a CertificateError: ${String(e)}`);
    return e.code;
  }
};

test("toPem → pemBlocks round-trips any bytes and label, with text around and between blocks", () => {
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.constantFrom("CERTIFICATE", "PUBLIC KEY", "X509 CERTIFICATE", "CERTIFICATE REQUEST"), fc.uint8Array({ minLength: 1, maxLength: 300 })), { minLength: 1, maxLength: 4 }), (items) => {
      const text = "# bundle\n" + items.map(([l, d]) => `comment line\n${toPem(l, d)}`).join("\r\n");
      const blocks = pemBlocks(text);
      assert.deepEqual(blocks.map((b) => [b.label, Buffer.from(b.der).toString("hex")]), items.map(([l, d]) => [l, Buffer.from(d).toString("hex")]));
      assert.deepEqual(blocks.map((b) => b.index), items.map((_, i) => i));
      for (const b of blocks) assert.match(text.slice(b.start, b.end), /^-----BEGIN [A-Z0-9 ]+-----[\s\S]*-----END [A-Z0-9 ]+-----$/);
      assert.ok(looksLikePem(new TextEncoder().encode(text)));
    }),
    { numRuns: 100 },
  );
  assert.equal(certificateToPem(Uint8Array.of(1, 2, 3)), "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n");
  const long = toPem("CERTIFICATE", new Uint8Array(100));
  assert.ok(long.split("\n").every((l) => l.length <= 64), "64-column lines");
});

test("malformed PEM is a CertificateError bad-pem: no END, headers, bad base64, empty body", () => {
  assert.equal(code(() => pemBlocks("-----BEGIN CERTIFICATE-----\nAQID\n")), "bad-pem");
  assert.equal(code(() => pemBlocks("-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\nAQID\n-----END CERTIFICATE-----\n")), "bad-pem");
  assert.equal(code(() => pemBlocks("-----BEGIN CERTIFICATE-----\nAQI!\n-----END CERTIFICATE-----\n")), "bad-pem");
  assert.equal(code(() => pemBlocks("-----BEGIN CERTIFICATE-----\nAQI\n-----END CERTIFICATE-----\n")), "bad-pem", "length not a multiple of 4");
  assert.equal(code(() => pemBlocks("-----BEGIN CERTIFICATE-----\nAQ==AQ==\n-----END CERTIFICATE-----\n")), "bad-pem", "padding inside");
  assert.equal(code(() => pemBlocks("-----BEGIN CERTIFICATE-----\n\n-----END CERTIFICATE-----\n")), "bad-pem");
  assert.equal(code(() => pemBlocks("-----BEGIN CERTIFICATE-----\nAQID\n-----END PUBLIC KEY-----\n")), "bad-pem", "END of another label");
  assert.deepEqual(pemBlocks("no pem here"), []);
});

test("garbage and truncated PEM text: blocks or a CertificateError, nothing else", () => {
  const good = toPem("CERTIFICATE", new Uint8Array(200).map((_, i) => i)) + toPem("PUBLIC KEY", Uint8Array.of(9, 9, 9));
  fc.assert(
    fc.property(fc.integer({ min: 0, max: good.length }), (n) => {
      const c = code(() => pemBlocks(good.slice(0, n)));
      if (n < good.indexOf("-----END CERTIFICATE-----") + "-----END CERTIFICATE-----".length) assert.ok(c !== "ok" || pemBlocks(good.slice(0, n)).length === 0, `prefix ${n}`);
    }),
    { numRuns: 300 },
  );
  fc.assert(fc.property(fc.string({ maxLength: 400 }), (s) => void code(() => pemBlocks(s))), { numRuns: 300 });
  fc.assert(fc.property(fc.string({ maxLength: 200 }), (s) => void code(() => pemBlocks(`-----BEGIN CERTIFICATE-----\n${s}\n-----END CERTIFICATE-----\n`))), { numRuns: 300 });
  fc.assert(
    fc.property(fc.integer({ min: 0, max: good.length - 1 }), fc.integer({ min: 0, max: 127 }), (at, ch) => {
      void code(() => pemBlocks(good.slice(0, at) + String.fromCharCode(ch) + good.slice(at + 1)));
    }),
    { numRuns: 300 },
  );
});

test("certificatesFromPem: CERTIFICATE blocks only (other blocks refused, or ignored on request); none is not-a-certificate", () => {
  const cert = toPem("CERTIFICATE", Uint8Array.of(0x30, 0));
  const key = toPem("PRIVATE KEY", Uint8Array.of(1));
  assert.equal(certificatesFromPem(cert + cert).length, 2);
  assert.equal(certificatesFromPem(toPem("X509 CERTIFICATE", Uint8Array.of(1))).length, 1);
  assert.equal(code(() => certificatesFromPem(cert + key)), "bad-pem");
  assert.equal(certificatesFromPem(cert + key, { otherBlocks: "ignore" }).length, 1);
  assert.equal(code(() => certificatesFromPem(key, { otherBlocks: "ignore" })), "not-a-certificate");
  assert.equal(code(() => certificatesFromPem("")), "not-a-certificate");
});

test("pemBlocksOnly: whitespace around blocks is fine; any other text is refused", () => {
  const cert = toPem("CERTIFICATE", Uint8Array.of(1, 2, 3));
  assert.equal(pemBlocksOnly(`\n  ${cert}\n${cert}  \n`).length, 2);
  assert.equal(code(() => pemBlocksOnly(`junk\n${cert}`)), "bad-pem");
  assert.equal(code(() => pemBlocksOnly(`${cert}junk`)), "bad-pem");
  assert.equal(code(() => pemBlocksOnly(`${cert}x${cert}`)), "bad-pem");
  assert.deepEqual(pemBlocksOnly("  \n"), []);
});
