/** namesHost decides as node's X509Certificate.checkHost / checkIP (OpenSSL) do, for the names TLS peers check. */
import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { test } from "node:test";
import { der } from "@fleetd/verify/tpm";
import { buildCertificate, CN, ecKey } from "@fleetd/testkit/x509Builder";
import { ipAddressBytes, namesHost, parseCertificate } from "@fleetd/verify/x509";

const key = ecKey("prime256v1");
const san = (...names: Uint8Array[]) => ({ oid: "2.5.29.17", value: der(0x30, ...names) });
const dns = (s: string) => der(0x82, Buffer.from(s, "latin1"));
const ip = (s: string) => der(0x87, ipAddressBytes(s) ?? new Uint8Array());
const make = (cn: string, extensions: { oid: string; value: Uint8Array }[]) =>
  buildCertificate({ subject: [[[CN, cn]]], issuer: [[[CN, "ca"]]], spki: key.spki, signer: key.privateKey, sigAlg: "ecdsa-sha256", extensions });

test("ipAddressBytes reads IPv4 and IPv6 (with :: and an IPv4 tail) and refuses the rest", () => {
  assert.deepEqual(ipAddressBytes("10.0.3.17"), Uint8Array.of(10, 0, 3, 17));
  assert.deepEqual(ipAddressBytes("::1"), Uint8Array.of(...new Array<number>(15).fill(0), 1));
  assert.deepEqual(ipAddressBytes("2001:db8::8:800:200c:417a"), Uint8Array.from(Buffer.from("20010db8000000000008080020 0c417a".replace(" ", ""), "hex")));
  assert.deepEqual(ipAddressBytes("::ffff:1.2.3.4"), Uint8Array.from(Buffer.from("00000000000000000000ffff01020304", "hex")));
  for (const bad of ["", "1.2.3", "1.2.3.256", "01.2.3.4", "1::2::3", "1:2:3:4:5:6:7:8:9", "g::1", "host.example", "1:2:3:4:5:6:7::8"]) {
    assert.equal(ipAddressBytes(bad), undefined, bad);
  }
});

test("namesHost agrees with OpenSSL's checkHost / checkIP", () => {
  const certs = [
    make("replica", [san(ip("127.0.0.1"))]),
    make("replica-0.fleetd.svc", []),
    make("ignored.example", [san(dns("replica-0.fleetd.svc"), dns("*.fleetd.svc"), ip("2001:db8::1"))]),
    make("x", [san(dns("w*.example.com"), dns("*x.example.org"), dns("*.com"), dns("a.*.example.net"), dns("Upper.Example"))]),
  ];
  const hosts = [
    "127.0.0.1", "127.0.0.2", "replica", "replica-0.fleetd.svc", "REPLICA-0.FLEETD.SVC", "replica-1.fleetd.svc", "a.b.fleetd.svc",
    "fleetd.svc", "ignored.example", "2001:db8::1", "2001:db8:0:0:0:0:0:1", "2001:db8::2", "www.example.com", "w.example.com",
    "x.example.org", "abx.example.org", "example.com", "foo.com", "a.b.example.net", "upper.example",
  ];
  for (const [i, der] of certs.entries()) {
    const node = new X509Certificate(Buffer.from(der));
    const c = parseCertificate(der);
    for (const h of hosts) {
      const want = (isIP(h) ? node.checkIP(h) : node.checkHost(h)) !== undefined;
      assert.equal(namesHost(c, h), want, `certificate ${i}, host ${h}`);
    }
  }
});
