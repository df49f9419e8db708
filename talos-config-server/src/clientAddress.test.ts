import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Request } from "express";
import { clientAddress, trustedProxies } from "./clientAddress.js";

const req = (socket: string, xff?: string): Request => ({ socket: { remoteAddress: socket }, headers: xff === undefined ? {} : { "x-forwarded-for": xff } }) as unknown as Request;
const proxies = trustedProxies(["10.0.0.0/8", "fd00::/8", "192.0.2.1"]);

test("without trusted proxies the socket address is the client, whatever X-Forwarded-For says", () => {
  assert.equal(clientAddress(req("198.51.100.7", "203.0.113.9"), undefined), "198.51.100.7");
  assert.equal(clientAddress(req("::ffff:198.51.100.7"), undefined), "198.51.100.7");
});

test("behind a trusted proxy the right-most untrusted hop is the client; a client's own left-most entries are ignored", () => {
  assert.equal(clientAddress(req("10.1.2.3", "203.0.113.9"), proxies), "203.0.113.9");
  assert.equal(clientAddress(req("10.1.2.3", "1.1.1.1, 203.0.113.9, 10.4.4.4"), proxies), "203.0.113.9", "spoofed 1.1.1.1 is not believed");
  assert.equal(clientAddress(req("192.0.2.1", "fd00::5, 2001:db8::1"), proxies), "2001:db8::1");
});

test("an untrusted peer's X-Forwarded-For is ignored; garbage in the chain leaves the proxy as the client", () => {
  assert.equal(clientAddress(req("198.51.100.7", "10.0.0.1"), proxies), "198.51.100.7");
  assert.equal(clientAddress(req("10.1.2.3", "not-an-ip"), proxies), "10.1.2.3");
  assert.equal(clientAddress(req("10.1.2.3", "10.9.9.9"), proxies), "10.1.2.3", "every hop trusted: the socket");
});

test("a bad trusted-proxy entry is refused at configuration", () => {
  assert.throws(() => trustedProxies(["10.0.0.0/33"]), /prefix length/);
  assert.throws(() => trustedProxies(["proxy.example"]), /not an IP address or CIDR/);
});
