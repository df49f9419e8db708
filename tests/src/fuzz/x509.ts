/**
 * Fuzz target: the x509 readers (certificates lenient and strict, PKCS#10 requests, PEM, the Secure Boot
 * certificate summary) on random and mutated inputs. Every input must either parse or fail with a typed
 * ParseError (inside the input's bounds) or CertificateError; the summary never throws.
 */
import { sign } from "node:crypto";
import fc from "fast-check";
import { ParseError } from "@fleetd/verify/codec";
import { certSummary } from "@fleetd/verify/eventlog";
import { der, derOid } from "@fleetd/verify/tpm";
import { CertificateError, parseCertificate, parseCertificationRequest, pemBlocks, toPem } from "@fleetd/verify/x509";
import { basicConstraints, buildCertificate, CN, ecKey, extKeyUsage, keyUsage, nameDer, O, sigAlgDer, tpmSan } from "@fleetd/testkit/x509Builder";
import { byteMutation, type FuzzResult, mutate } from "./tpm.js";

function seeds(): Uint8Array[] {
  const key = ecKey("prime256v1");
  const cert = buildCertificate({
    subject: [[[O, "fleetd"], [CN, "leaf"]]],
    issuer: [[[CN, "ca"]]],
    spki: key.spki,
    signer: key.privateKey,
    sigAlg: "ecdsa-sha256",
    extensions: [basicConstraints(true, 0), keyUsage(0, 5), extKeyUsage("1.3.6.1.5.5.7.3.2"), tpmSan("id:4E544300", "NPCT75x", "id:00070002")],
  });
  const san = der(0x30, der(0x30, derOid("2.5.29.17"), der(0x04, der(0x30, der(0x82, Buffer.from("n1.example")), der(0x87, Uint8Array.of(10, 0, 0, 1))))));
  const info = der(0x30, Uint8Array.of(0x02, 0x01, 0x00), nameDer([[[O, "system:nodes"]], [[CN, "system:node:n1"]]]), key.spki, der(0xa0, der(0x30, derOid("1.2.840.113549.1.9.14"), der(0x31, san))));
  const csr = der(0x30, info, sigAlgDer("ecdsa-sha256"), der(0x03, Uint8Array.of(0), sign("sha256", info, { key: key.privateKey, dsaEncoding: "der" })));
  return [cert, csr];
}

function typed(f: () => unknown, length: number): void {
  try {
    f();
  } catch (e) {
    if (e instanceof CertificateError) return;
    if (e instanceof ParseError && e.offset >= 0 && e.offset <= length) return;
    throw e;
  }
}

function check(b: Uint8Array): void {
  typed(() => parseCertificate(b), b.length);
  typed(() => parseCertificate(b, { strict: true }), b.length);
  typed(() => parseCertificationRequest(b), b.length);
  certSummary(b);
}

function checkPem(text: string): void {
  try {
    pemBlocks(text);
  } catch (e) {
    if (!(e instanceof CertificateError)) throw e;
  }
}

export function fuzzX509(runs: number): FuzzResult {
  const s = seeds();
  const pem = s.map((d, i) => toPem(i === 0 ? "CERTIFICATE" : "CERTIFICATE REQUEST", d)).join("");
  const start = performance.now();
  fc.assert(
    fc.property(
      fc.nat(s.length - 1),
      byteMutation,
      (i, m) => check(mutate(s[i] ?? s[0]!, m)),
    ),
    { numRuns: Math.ceil(runs / 3) },
  );
  fc.assert(fc.property(fc.uint8Array({ maxLength: 700 }), check), { numRuns: Math.floor(runs / 3) });
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 127 })), { maxLength: 4 }), fc.option(fc.nat(), { nil: undefined }), (flips, cut) => {
      const chars = [...pem];
      for (const [pos, c] of flips) chars[pos % chars.length] = String.fromCharCode(c);
      const t = chars.join("");
      checkPem(cut === undefined ? t : t.slice(0, cut % (t.length + 1)));
    }),
    { numRuns: Math.floor(runs / 3) },
  );
  return { target: "x509", runs, ms: performance.now() - start };
}
