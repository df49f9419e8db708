/** Parser robustness: typed errors with offsets, format detection, header checks, property tests. */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { encode, ParseError } from "@fleetd/verify/codec";
import { TPM_ALG } from "@fleetd/verify/tcg";
import {
  EV, parseEventLog, replayLog, SPEC_ID_EVENT03, TCG_EfiSpecIDEvent, TCG_PCR_EVENT, parseDevicePath,
  parseSignatureLists, parseVariableData, GUID,
} from "@fleetd/verify/eventlog";
import { EventLogWriter, signatureList, variableData } from "@fleetd/testkit/eventlogWriter";

function header(algs: { algorithmId: number; digestSize: number }[], patch: Partial<{ major: number; uintn: number }> = {}): Uint8Array {
  const spec = encode(
    TCG_EfiSpecIDEvent,
    { signature: SPEC_ID_EVENT03, platformClass: 0, specVersionMinor: 0, specVersionMajor: patch.major ?? 2, specErrata: 0, uintnSize: patch.uintn ?? 2, digestSizes: algs, vendorInfo: new Uint8Array() },
    "le",
  );
  return encode(TCG_PCR_EVENT, { pcrIndex: 0, eventType: EV.NO_ACTION, digest: new Uint8Array(20), event: spec }, "le");
}

function expectParseError(bytes: Uint8Array, code: ParseError["code"], match: RegExp): ParseError {
  const e = assert.throws(() => parseEventLog(bytes), ParseError) as unknown;
  void e;
  try {
    parseEventLog(bytes);
  } catch (err) {
    assert.ok(err instanceof ParseError);
    assert.equal(err.code, code, err.message);
    assert.match(err.message, match);
    return err;
  }
  throw new Error("unreachable");
}

test("empty, truncated and oversized logs are typed errors with offsets", () => {
  expectParseError(new Uint8Array(), "truncated", /empty/);
  const log = new EventLogWriter("crypto-agile", [TPM_ALG.SHA256]).separator(7).efiAction(5, "Exit Boot Services Invocation").bytes();
  const e = expectParseError(log.subarray(0, log.length - 3), "truncated", /event 2\.TCG_PCR_EVENT2\.event\.data: need/);
  assert.ok(e.offset > 0);
  // An eventSize larger than the rest of the log.
  const big = new Uint8Array(log);
  new DataView(big.buffer).setUint32(big.length - 29 - 4, 0x7fffffff, true);
  assert.throws(() => parseEventLog(big), ParseError);
});

test("Spec ID header: version, uintnSize, duplicate and mis-sized algorithms are refused", () => {
  expectParseError(header([{ algorithmId: TPM_ALG.SHA256, digestSize: 32 }], { major: 1 }), "invalid-value", /version 1\.0/);
  expectParseError(header([{ algorithmId: TPM_ALG.SHA256, digestSize: 32 }], { uintn: 3 }), "invalid-value", /uintnSize 3/);
  expectParseError(header([]), "invalid-value", /no digest algorithm/);
  expectParseError(header([{ algorithmId: TPM_ALG.SHA256, digestSize: 32 }, { algorithmId: TPM_ALG.SHA256, digestSize: 32 }]), "invalid-value", /declared twice/);
  expectParseError(header([{ algorithmId: TPM_ALG.SHA256, digestSize: 20 }]), "invalid-value", /SHA256 digest size 20 \(must be 32\)/);
  // A huge algorithm count is refused before anything is allocated.
  const h = header([{ algorithmId: TPM_ALG.SHA256, digestSize: 32 }]);
  new DataView(h.buffer).setUint32(32 + 24, 0xffffffff, true);
  expectParseError(h, "oversized", /count 4294967295 exceeds maximum 64/);
});

test("an event with a digest for an undeclared algorithm is refused; unknown declared ones are skipped", () => {
  const h = header([{ algorithmId: 0x0012, digestSize: 32 }, { algorithmId: TPM_ALG.SHA256, digestSize: 32 }]);
  const ev = (alg: number) => Buffer.concat([Buffer.from([7, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, alg, 0]), Buffer.alloc(32), Buffer.from([4, 0, 0, 0, 0, 0, 0, 0])]);
  const log = parseEventLog(Buffer.concat([h, ev(0x12), ev(0x0b)]));
  assert.equal(log.events.length, 3);
  assert.deepEqual(log.banks.map((b) => b.computable), [false, true]);
  expectParseError(Buffer.concat([h, ev(0x0c)]), "unknown-enum", /0x000c is not declared/);
});

test("UEFI structures: bounds-checked signature lists, variable data, device paths", () => {
  const cert = new Uint8Array(40).fill(1);
  const list = signatureList(GUID.EFI_CERT_X509, GUID.EFI_GLOBAL_VARIABLE, [cert]);
  assert.equal(parseSignatureLists(list)[0]!.entries[0]!.data.length, 40);
  const bad = new Uint8Array(list);
  new DataView(bad.buffer).setUint32(16, 0xfffffff0, true); // SignatureListSize
  assert.throws(() => parseSignatureLists(bad), (e: unknown) => e instanceof ParseError && /runs past the data/.test(e.message));
  new DataView(bad.buffer).setUint32(16, list.length, true);
  new DataView(bad.buffer).setUint32(24, 7, true); // SignatureSize < 16
  assert.throws(() => parseSignatureLists(bad), (e: unknown) => e instanceof ParseError && /cannot hold an owner GUID/.test(e.message));
  new DataView(bad.buffer).setUint32(24, 50, true); // not a multiple
  assert.throws(() => parseSignatureLists(bad), (e: unknown) => e instanceof ParseError && /not a multiple/.test(e.message));
  const v = variableData(GUID.EFI_GLOBAL_VARIABLE, "SecureBoot", new Uint8Array([1]));
  assert.deepEqual(parseVariableData(v), { guid: GUID.EFI_GLOBAL_VARIABLE, name: "SecureBoot", data: new Uint8Array([1]) });
  const huge = new Uint8Array(v);
  new DataView(huge.buffer).setBigUint64(24, 0xffffffffffffn, true); // VariableDataLength
  assert.throws(() => parseVariableData(huge), ParseError);
  assert.throws(() => parseDevicePath(new Uint8Array([4, 4, 2, 0])), (e: unknown) => e instanceof ParseError && /length 2/.test(e.message));
});

test("property: any byte string either parses or throws ParseError (never another error)", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 300 }), (b) => {
      try {
        replayLog(parseEventLog(b));
      } catch (e) {
        if (!(e instanceof ParseError)) throw e;
      }
    }),
    { numRuns: 500 },
  );
});

test("property: writer → parser round trip reproduces events and PCRs", () => {
  const event = fc.record({
    pcr: fc.integer({ min: 0, max: 23 }),
    type: fc.constantFrom(EV.SEPARATOR, EV.EFI_ACTION, EV.IPL, EV.EFI_VARIABLE_DRIVER_CONFIG, EV.POST_CODE),
    data: fc.uint8Array({ maxLength: 64 }),
  });
  fc.assert(
    fc.property(fc.array(event, { maxLength: 20 }), fc.boolean(), (events, agile) => {
      fc.pre(agile || events.length > 0); // an empty SHA-1 format log is an empty file
      const w = new EventLogWriter(agile ? "crypto-agile" : "sha1", [TPM_ALG.SHA1, TPM_ALG.SHA256, TPM_ALG.SHA384]);
      for (const e of events) w.add(e.pcr, e.type, e.data);
      const log = parseEventLog(w.bytes());
      const offset = agile ? 1 : 0;
      assert.equal(log.events.length, events.length + offset);
      events.forEach((e, i) => {
        assert.equal(log.events[i + offset]!.pcr, e.pcr);
        assert.deepEqual(log.events[i + offset]!.data, e.data);
      });
      const replay = replayLog(log);
      for (const [alg, pcrs] of w.expectedPcrs()) assert.deepEqual(replay.banks.get(alg)!.pcrs, pcrs);
    }),
    { numRuns: 200 },
  );
});
