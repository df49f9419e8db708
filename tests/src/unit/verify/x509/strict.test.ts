/**
 * Strict reading (certificates fleetd issues): what the old re-encode-and-compare check refused is refused as
 * ParseError "not-der"; the lenient reading (EK certificates) still accepts it, over the same bytes.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { ParseError } from "@fleetd/verify/codec";
import { der, derOid } from "@fleetd/verify/tpm";
import { CN, ecKey, nameDer, sigAlgDer } from "@fleetd/testkit/x509Builder";
import { parseCertificate } from "@fleetd/verify/x509";

const key = ecKey("prime256v1");
const BOOL_TRUE = Uint8Array.of(0x01, 0x01, 0xff);
const BOOL_FALSE = Uint8Array.of(0x01, 0x01, 0x00);

/** A certificate with the given raw Extension SEQUENCEs (not signed: parsing does not verify). */
function cert(extensions: Uint8Array[], opts: { version?: Uint8Array; serial?: Uint8Array } = {}): Uint8Array {
  const tbs = der(
    0x30,
    opts.version ?? der(0xa0, Uint8Array.of(0x02, 0x01, 0x02)),
    opts.serial ?? Uint8Array.of(0x02, 0x01, 0x01),
    sigAlgDer("ecdsa-sha256"),
    nameDer([[[CN, "ca"]]]),
    der(0x30, der(0x17, Buffer.from("200101000000Z")), der(0x17, Buffer.from("300101000000Z"))),
    nameDer([[[CN, "leaf"]]]),
    key.spki,
    ...(extensions.length > 0 ? [der(0xa3, der(0x30, ...extensions))] : []),
  );
  return der(0x30, tbs, sigAlgDer("ecdsa-sha256"), der(0x03, Uint8Array.of(0), Uint8Array.of(0x30, 0x00)));
}
const ext = (oid: string, value: Uint8Array, critical?: Uint8Array) => der(0x30, derOid(oid), ...(critical ? [critical] : []), der(0x04, value));
const bc = (...inner: Uint8Array[]) => ext("2.5.29.19", der(0x30, ...inner), BOOL_TRUE);

function strictCode(b: Uint8Array): string {
  try {
    parseCertificate(b, { strict: true });
    return "ok";
  } catch (e) {
    assert.ok(e instanceof ParseError, String(e));
    return e.code;
  }
}

test("a DER certificate reads the same strictly and leniently", () => {
  const c = cert([bc(BOOL_TRUE, Uint8Array.of(0x02, 0x01, 0x00))]);
  assert.equal(strictCode(c), "ok");
  assert.deepEqual(parseCertificate(c, { strict: true }).ext, parseCertificate(c).ext);
  assert.deepEqual(parseCertificate(c).ext.basicConstraints, { cA: true, pathLenConstraint: 0 });
});

test("strict: long-form lengths, DEFAULTs written out, padded INTEGERs, BOOLEAN 01 and trailing bytes are not DER; lenient reads them", () => {
  const good = cert([]);
  const n = good[1]! & 0x7f;
  const cases: [string, Uint8Array][] = [
    ["outer length with a leading zero byte", Buffer.concat([Uint8Array.of(0x30, 0x80 | (n + 1), 0x00), good.subarray(2)])],
    ["critical FALSE written out", cert([ext("2.5.29.14", der(0x04, Uint8Array.of(1, 2)), BOOL_FALSE)])],
    ["cA FALSE written out", cert([bc(BOOL_FALSE)])],
    ["BOOLEAN 01", cert([bc(Uint8Array.of(0x01, 0x01, 0x01))])],
    ["pathLen 00 01", cert([bc(BOOL_TRUE, Uint8Array.of(0x02, 0x02, 0x00, 0x01))])],
    ["serial 00 01", cert([], { serial: Uint8Array.of(0x02, 0x02, 0x00, 0x01) })],
    ["version v1 written out", cert([], { version: der(0xa0, Uint8Array.of(0x02, 0x01, 0x00)) })],
    ["short length in long form", cert([ext("2.5.29.14", Uint8Array.of(0x04, 0x81, 0x02, 1, 2))])],
  ];
  for (const [what, c] of cases) {
    assert.equal(strictCode(c), "not-der", what);
    assert.doesNotThrow(() => parseCertificate(c), what);
  }
  assert.equal(strictCode(Buffer.concat([good, Uint8Array.of(0)])), "trailing-bytes");
});
