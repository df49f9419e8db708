/**
 * Property tests for the GPT and ADV parsers: garbage and mutated disks give a typed MetaError (or a
 * result), never a RangeError or a hang; whatever the writer refuses leaves the disk unchanged; whatever
 * it accepts leaves two valid copies holding the key.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import {
  ADV_CHECKSUM_OFFSET, ADV_LENGTH, type AdvRecord, marshalAdvCopy, parseAdvCopy, sha256, memoryDisk, MetaError,
  readGpt, readAdvCopies, setMetaKey, findMetaPartition,
} from "@fleetd/platform/talos/meta";
import { buildGptImage, type TestImage } from "@fleetd/testkit/talosMeta";
import { onlyErrorsOf } from "../../../typedErrors.js";

const RUNS = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 300);

const typedOnly = (f: () => unknown): void => onlyErrorsOf(MetaError, f);

/** A 3 MiB disk: META at 1 MiB. Small enough to copy on every run. */
function smallImage(ss: number): TestImage {
  return buildGptImage({ sectorSize: ss, sizeBytes: 3 << 20, partitions: [{ name: "META", firstLBA: (1 << 20) / ss, sizeBytes: 1 << 20 }] });
}
const base = { 512: smallImage(512), 4096: smallImage(4096) };

const records = fc.uniqueArray(
  fc.record({ tag: fc.integer({ min: 1, max: 255 }), value: fc.uint8Array({ maxLength: 300 }) }),
  { selector: (r) => r.tag, maxLength: 12 },
);

test("ADV: marshal then parse gives the same records, in order", () => {
  fc.assert(
    fc.property(records, (generated: AdvRecord[]) => {
      const recs = generated.map((r) => ({ tag: r.tag, value: r.value }));
      const p = parseAdvCopy(marshalAdvCopy(recs));
      assert.equal(p.state, "valid");
      assert.deepEqual(p.state === "valid" ? p.records : null, recs);
    }),
    { numRuns: RUNS },
  );
});

test("ADV: any bytes are judged without throwing; a checksummed copy is valid or malformed", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 2048 }), fc.boolean(), fc.boolean(), (head, magics, sum) => {
      const b = new Uint8Array(ADV_LENGTH);
      b.set(head, 0);
      if (magics) {
        new DataView(b.buffer).setUint32(0, 0x5a4b3c2d);
        new DataView(b.buffer).setUint32(ADV_LENGTH - 4, 0xa5b4c3d2);
      }
      if (sum) b.set(sha256(b.fill(0, ADV_CHECKSUM_OFFSET, ADV_LENGTH - 4)), ADV_CHECKSUM_OFFSET);
      const p = parseAdvCopy(b);
      if (magics && sum) assert.ok(p.state === "valid" || p.state === "malformed", p.state);
    }),
    { numRuns: RUNS },
  );
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 600 }), (b) => {
      assert.equal(parseAdvCopy(b).state, "invalid"); // wrong length
    }),
    { numRuns: RUNS },
  );
});

test("GPT: random bytes give a typed error or a table, never a crash", () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 0, maxLength: 70000 }), (b) => {
      typedOnly(() => findMetaPartition(readGpt(memoryDisk(b))));
    }),
    { numRuns: RUNS },
  );
});

const mutation = fc.record({
  ss: fc.constantFrom(512 as const, 4096 as const),
  edits: fc.array(
    fc.record({ where: fc.constantFrom("lba0", "head", "tail"), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
    { minLength: 1, maxLength: 8 },
  ),
});

function mutate(img: TestImage, edits: { where: string; at: number; value: number }[]): Uint8Array {
  const b = img.bytes.slice();
  const ss = img.sectorSize;
  for (const e of edits) {
    const span = e.where === "lba0" ? 512 : ss * 34;
    const start = e.where === "tail" ? b.length - span : 0;
    b[start + (e.at % span)] = e.value;
  }
  return b;
}

test("GPT: mutated headers, arrays and MBR give a typed error or a META inside the disk", () => {
  fc.assert(
    fc.property(mutation, ({ ss, edits }) => {
      const b = mutate(base[ss], edits);
      typedOnly(() => {
        const table = readGpt(memoryDisk(b));
        const meta = findMetaPartition(table);
        assert.ok(meta.offset >= 0 && meta.offset + meta.size <= b.length);
      });
    }),
    { numRuns: RUNS },
  );
});

test("write: refused writes change nothing; accepted ones leave two valid copies with the key", () => {
  const adv = fc.oneof(
    fc.constant("zero" as const),
    fc.constant("valid" as const),
    fc.record({ copy: fc.constantFrom(0, 1), at: fc.nat(ADV_LENGTH - 1), value: fc.integer({ min: 0, max: 255 }) }),
  );
  fc.assert(
    fc.property(fc.constantFrom(512 as const, 4096 as const), fc.array(adv, { minLength: 1, maxLength: 3 }), fc.boolean(), (ss, steps, init) => {
      const b = base[ss].bytes.slice();
      const metaOffset = 1 << 20;
      for (const s of steps) {
        if (s === "zero") b.fill(0, metaOffset, metaOffset + 2 * ADV_LENGTH);
        else if (s === "valid") {
          const c = marshalAdvCopy([{ tag: 0x11, value: new TextEncoder().encode("dual-boot") }]);
          b.set(c, metaOffset);
          b.set(c, metaOffset + ADV_LENGTH);
        } else b[metaOffset + s.copy * ADV_LENGTH + s.at] = s.value;
      }
      const disk = memoryDisk(b);
      const meta = findMetaPartition(readGpt(disk));
      const before = sha256(b);
      const code = new TextEncoder().encode("f".repeat(64));
      try {
        setMetaKey(disk, meta, 0x0b, code, { init });
      } catch (e) {
        if (!(e instanceof MetaError)) throw e;
        assert.deepEqual(sha256(b), before, `refused (${e.code}) but the disk changed`);
        return;
      }
      for (const c of readAdvCopies(disk, meta)) {
        assert.equal(c.state, "valid");
        assert.deepEqual(c.state === "valid" && c.records.find((r) => r.tag === 0x0b)?.value, code);
      }
    }),
    { numRuns: Math.min(RUNS, 150) },
  );
});
