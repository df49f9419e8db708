/**
 * Secure Boot certificate summaries (eventlog/certs.ts) are read by the x509 parser and print names the way
 * OpenSSL does; policy profiles and reports match on those strings. Every certificate in the event-log corpus
 * and the EK CA stores, and certificates with awkward names, must summarise exactly as node's
 * X509Certificate (OpenSSL) shows them.
 */
import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { test } from "node:test";
import { certSummary } from "@fleetd/verify/eventlog";
import { der, derOid } from "@fleetd/verify/tpm";
import { loadCaStore } from "@fleetd/platform/trust";
import { conformance } from "@fleetd/testkit/conformance";
import { corpusLogs } from "@fleetd/testkit/eventlogCorpus";
import { ecKey, sigAlgDer } from "@fleetd/testkit/x509Builder";
import { sign } from "node:crypto";

function nodeSummary(der: Uint8Array) {
  const x = new X509Certificate(Buffer.from(der));
  const oneLine = (dn: string) => dn.split("\n").filter((s) => s.length > 0).join(", ");
  const cn = (dn: string) => dn.split("\n").find((l) => l.startsWith("CN="))?.slice(3);
  return {
    sha256: x.fingerprint256.replaceAll(":", "").toLowerCase(),
    subject: oneLine(x.subject),
    issuer: oneLine(x.issuer),
    commonName: cn(x.subject) ?? oneLine(x.subject),
    serialNumber: x.serialNumber.toLowerCase(),
  };
}

function same(der: Uint8Array, what: string): void {
  const s = certSummary(der);
  assert.ok(s, `${what}: summarised`);
  const { der: _der, ...mine } = s;
  assert.deepEqual(mine, nodeSummary(der), what);
}

/** Certificates embedded in a log: every `30 82 LL LL` run that OpenSSL reads as a certificate. */
function embeddedCertificates(bytes: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i + 4 < bytes.length; i++) {
    if (bytes[i] !== 0x30 || bytes[i + 1] !== 0x82) continue;
    const len = ((bytes[i + 2] ?? 0) << 8) + (bytes[i + 3] ?? 0) + 4;
    if (len < 200 || i + len > bytes.length) continue;
    const der = bytes.subarray(i, i + len);
    try {
      new X509Certificate(Buffer.from(der));
    } catch {
      continue;
    }
    out.push(der);
    i += len - 1;
  }
  return out;
}

test("every certificate in the event-log corpus summarises as OpenSSL prints it", () => {
  const seen = new Set<string>();
  for (const log of corpusLogs()) {
    for (const der of embeddedCertificates(log.bytes)) {
      const key = Buffer.from(der).toString("base64");
      if (seen.has(key)) continue;
      seen.add(key);
      same(der, log.rel);
    }
  }
  assert.ok(seen.size >= 10, `found ${seen.size} distinct certificates`);
});

test("every certificate of the EK CA stores summarises as OpenSSL prints it (multi-valued, unsorted Nuvoton RDNs included)", () => {
  let n = 0;
  for (const dir of ["ca/keylime-tpm_cert_store", "ca/tpm-ca-certificates", "ca/gce"]) {
    for (const { cert, source } of loadCaStore(conformance(dir)).certs) {
      same(cert.der, `${dir}/${source}`);
      n++;
    }
  }
  assert.equal(n, 45 + 169 + 5);
});

test("awkward names and serials print as OpenSSL prints them", () => {
  const key = ecKey("prime256v1");
  const str = (tag: number, b: Uint8Array | string) => der(tag, typeof b === "string" ? Buffer.from(b, "latin1") : b);
  const atv = (oid: string, value: Uint8Array) => der(0x30, derOid(oid), value);
  const rdn = (...atvs: Uint8Array[]) => der(0x31, ...atvs);
  const bmp = (s: string) => Buffer.from(s, "utf16le").swap16();
  const universal = (s: string) => Buffer.concat([...s].map((ch) => { const b = Buffer.alloc(4); b.writeUInt32BE(ch.codePointAt(0) ?? 0); return b; }));
  const names: Uint8Array[] = [
    der(0x30, rdn(atv("2.5.4.6", str(0x13, "DE"))), rdn(atv("2.5.4.10", str(0x0c, Buffer.from("Müller, \"Söhne\" + Co; <x>\\y", "utf8")))), rdn(atv("2.5.4.3", str(0x0c, "#lead and trail ")))),
    der(0x30, rdn(atv("2.5.4.3", str(0x14, "Teletex caf\xe9 \x01ctl\x7f")), atv("2.5.4.11", str(0x16, "ia5"))), rdn(atv("1.2.840.113549.1.9.1", str(0x16, "a@b.example")))),
    der(0x30, rdn(atv("2.5.4.3", str(0x1e, bmp("BMP \u20ac ok")))), rdn(atv("2.5.4.10", str(0x1c, universal("Uni \u{1F600} x")))), rdn(atv("2.23.133.2.1", str(0x0c, "id:4E544300")))),
    der(0x30, rdn(atv("0.9.2342.19200300.100.1.25", str(0x16, "example")), atv("2.5.4.5", str(0x13, "1234"))), rdn(atv("2.5.4.7", str(0x0c, " "))), rdn(atv("2.5.4.8", str(0x0c, "")))),
    der(0x30),
  ];
  const serials = [Uint8Array.of(0x00), Uint8Array.of(0x05), Uint8Array.of(0x00, 0x80), Uint8Array.of(0xff, 0x7f), Uint8Array.of(0x80), Uint8Array.of(0x0a, 0x00, 0x01)];
  for (const [i, name] of names.entries()) {
    for (const serial of serials) {
      const tbs = der(
        0x30,
        der(0xa0, Uint8Array.of(0x02, 0x01, 0x02)),
        der(0x02, serial),
        sigAlgDer("ecdsa-sha256"),
        names[(i + 1) % names.length] as Uint8Array,
        der(0x30, str(0x17, "200101000000Z"), str(0x17, "300101000000Z")),
        name,
        key.spki,
      );
      const sig = sign("sha256", tbs, { key: key.privateKey, dsaEncoding: "der" });
      same(der(0x30, tbs, sigAlgDer("ecdsa-sha256"), der(0x03, Uint8Array.of(0), sig)), `name ${i}, serial ${Buffer.from(serial).toString("hex")}`);
    }
  }
});
