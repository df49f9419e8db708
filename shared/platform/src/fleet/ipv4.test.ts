import { strict as assert } from "node:assert";
import { isIPv4 } from "node:net";
import { test } from "node:test";
import fc from "fast-check";
import { ipv4CidrSchema, ipv4InSubnet, ipv4Mask, ipv4Schema, ipv4ToInt, isIpv4, isIpv4Cidr, parseIpv4Cidr } from "./ipv4.js";

const octet = fc.integer({ min: 0, max: 255 });
const quad = fc.tuple(octet, octet, octet, octet);
const dotted = (q: readonly number[]) => q.join(".");

test("isIpv4 / parseIpv4Cidr: examples at the edges", () => {
  for (const ok of ["0.0.0.0", "10.0.10.1", "255.255.255.255", "192.168.1.10"]) assert.ok(isIpv4(ok), ok);
  for (const bad of ["", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.256", "01.2.3.4", "1.2.3.04", "1.2.3.00", " 1.2.3.4", "1.2.3.4 ", "1.2.3.4\n", "1..3.4", "1.2.3.-4", "+1.2.3.4", "0x1.2.3.4", "1.2.3.4/24", "::1", "::ffff:1.2.3.4", "1.2.3.4%eth0", "१.२.३.४"]) {
    assert.ok(!isIpv4(bad), JSON.stringify(bad));
  }
  assert.deepEqual(parseIpv4Cidr("10.0.10.11/24"), { address: "10.0.10.11", prefix: 24 });
  assert.deepEqual(parseIpv4Cidr("0.0.0.0/0"), { address: "0.0.0.0", prefix: 0 });
  assert.deepEqual(parseIpv4Cidr("1.2.3.4/32"), { address: "1.2.3.4", prefix: 32 });
  for (const bad of ["1.2.3.4", "1.2.3.4/", "1.2.3.4/33", "1.2.3.4/024", "1.2.3.4/08", "1.2.3.4/-1", "1.2.3.4/ 24", "1.2.3.4 /24", "1.2.3.4/24/8", "256.0.0.0/8", "01.0.0.0/8", "2001:db8::1/64", "1.2.3.4/24 ", "/24"]) {
    assert.equal(parseIpv4Cidr(bad), undefined, JSON.stringify(bad));
    assert.ok(!isIpv4Cidr(bad), JSON.stringify(bad));
  }
});

test("property: every canonical dotted quad is valid, agrees with node:net, and round-trips through ipv4ToInt", () => {
  fc.assert(
    fc.property(quad, (q) => {
      const s = dotted(q);
      assert.ok(isIpv4(s));
      assert.ok(isIPv4(s));
      const n = ipv4ToInt(s);
      assert.ok(n >= 0 && n <= 0xffffffff);
      assert.equal(dotted([24, 16, 8, 0].map((b) => Math.floor(n / 2 ** b) % 256)), s);
    }),
  );
});

test("property: garbage strings are never accepted unless node:net also reads a canonical dotted quad", () => {
  fc.assert(
    fc.property(fc.oneof(fc.string(), fc.stringMatching(/^[0-9./ x:a-f]{0,20}$/)), (s) => {
      if (isIpv4(s)) assert.ok(isIPv4(s) && s.split(".").every((o) => String(Number(o)) === o), s);
      const c = parseIpv4Cidr(s);
      if (c) assert.equal(`${c.address}/${c.prefix}`, s, "only the canonical form parses");
    }),
  );
});

test("property: a leading zero, an octet over 255, a prefix over 32, spaces and IPv6 are refused", () => {
  fc.assert(
    fc.property(quad, fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 32 }), (q, i, p) => {
      const zeroed = q.map((o, j) => (j === i ? `0${o}` : String(o)));
      assert.ok(!isIpv4(zeroed.join(".")), `leading zero: ${zeroed.join(".")}`);
      const big = q.map((o, j) => (j === i ? o + 256 : o));
      assert.ok(!isIpv4(dotted(big)), `over 255: ${dotted(big)}`);
      assert.ok(isIpv4Cidr(`${dotted(q)}/${p}`));
      assert.ok(!isIpv4Cidr(`${dotted(q)}/${p + 33}`), "prefix over 32");
      assert.ok(!isIpv4Cidr(`${dotted(q)}/0${p}`), "leading zero in the prefix");
      assert.ok(!isIpv4(` ${dotted(q)}`) && !isIpv4(`${dotted(q)} `) && !isIpv4Cidr(`${dotted(q)} /${p}`) && !isIpv4Cidr(`${dotted(q)}/ ${p}`), "spaces");
      assert.ok(!isIpv4(`::ffff:${dotted(q)}`) && !isIpv4Cidr(`::ffff:${dotted(q)}/${p}`), "IPv4-mapped IPv6");
    }),
  );
  fc.assert(
    fc.property(fc.ipV6(), fc.integer({ min: 0, max: 128 }), (a, p) => {
      assert.ok(!isIpv4(a) && !isIpv4Cidr(`${a}/${p}`), a);
    }),
  );
});

test("property: ipv4InSubnet is the mask comparison; every address is in its own subnet", () => {
  fc.assert(
    fc.property(quad, quad, fc.integer({ min: 0, max: 32 }), (a, b, p) => {
      const c = { address: dotted(a), prefix: p };
      assert.ok(ipv4InSubnet(c, dotted(a)));
      const m = ipv4Mask(p);
      assert.equal(ipv4InSubnet(c, dotted(b)), ((ipv4ToInt(dotted(a)) & m) >>> 0) === ((ipv4ToInt(dotted(b)) & m) >>> 0));
    }),
  );
  assert.equal(ipv4Mask(0), 0);
  assert.equal(ipv4Mask(24), 0xffffff00);
  assert.equal(ipv4Mask(32), 0xffffffff);
});

test("zod forms: the same answers, with the caller's message", () => {
  assert.ok(ipv4Schema().safeParse("10.0.0.1").success);
  const r = ipv4Schema("must be an IPv4 address").safeParse("10.0.0.01");
  assert.ok(!r.success && r.error.issues[0]?.message === "must be an IPv4 address");
  assert.ok(ipv4CidrSchema().safeParse("10.0.0.1/24").success);
  assert.ok(!ipv4CidrSchema().safeParse("10.0.0.1/33").success);
  assert.ok(!ipv4CidrSchema().safeParse(24).success, "not a string");
});
