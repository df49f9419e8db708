import { strict as assert } from "node:assert";
import { test } from "node:test";
import { crc32 } from "@fleetd/verify/crypto";
import {
  ADV_LENGTH, marshalAdvCopy, parseAdvCopy, sha256, memoryDisk, MetaError, readGpt, readAdvCopies, setMetaKey,
  findMetaPartition, META_PARTITION_SIZE,
} from "@fleetd/platform/talos/meta";
import { buildGptImage, talosLayout } from "@fleetd/testkit/talosMeta";

function errorOf(f: () => unknown): MetaError {
  try {
    f();
  } catch (e) {
    if (e instanceof MetaError) return e;
    throw new Error(`expected a MetaError, got ${String(e)}`);
  }
  throw new Error("expected a MetaError, got none");
}

test("crc32 matches the IEEE check value", () => {
  assert.equal(crc32(new TextEncoder().encode("123456789")), 0xcbf43926);
  assert.equal(crc32(new Uint8Array(0)), 0);
});

for (const ss of [512, 4096]) {
  test(`reads a GPT with ${ss}-byte sectors and finds META (sector size probed)`, () => {
    const img = buildGptImage({ sectorSize: ss });
    const table = readGpt(memoryDisk(img.bytes));
    assert.equal(table.sectorSize, ss);
    assert.equal(table.source, "primary");
    assert.deepEqual(table.partitions.map((p) => p.name), ["EFI", "BIOS", "BOOT", "META", "STATE"]);
    const meta = findMetaPartition(table);
    assert.equal(meta.number, 4);
    assert.equal(meta.offset, 6 << 20);
    assert.equal(meta.size, META_PARTITION_SIZE);
    assert.equal(meta.typeGUID, "0fc63daf-8483-4772-8e79-3d69d8477de4");
  });

  test(`${ss}: a bad primary header CRC falls back to the backup header`, () => {
    const img = buildGptImage({ sectorSize: ss });
    img.bytes[img.primaryHeader + 40] = img.bytes[img.primaryHeader + 40]! ^ 0xff; // FirstUsableLBA
    const table = readGpt(memoryDisk(img.bytes));
    assert.equal(table.source, "backup");
    assert.equal(table.primaryRefused?.code, "header-crc");
    assert.equal(findMetaPartition(table).offset, 6 << 20);
  });

  test(`${ss}: a bad primary entry array CRC falls back to the backup array`, () => {
    const img = buildGptImage({ sectorSize: ss });
    img.bytes[img.primaryEntries + 3 * 128 + 56] = 0x58; // 'X' into META's name in the primary array
    const table = readGpt(memoryDisk(img.bytes));
    assert.equal(table.source, "backup");
    assert.equal(table.primaryRefused?.code, "entry-array-crc");
    assert.equal(findMetaPartition(table).number, 4);
  });

  test(`${ss}: a zeroed primary header falls back to the backup`, () => {
    const img = buildGptImage({ sectorSize: ss });
    img.bytes.fill(0, img.primaryHeader, img.primaryHeader + ss);
    const table = readGpt(memoryDisk(img.bytes));
    assert.equal(table.source, "backup");
    assert.equal(table.primaryRefused?.code, "header-signature");
  });

  test(`${ss}: both headers bad is gpt-invalid naming both`, () => {
    const img = buildGptImage({ sectorSize: ss });
    img.bytes[img.primaryHeader + 40] = img.bytes[img.primaryHeader + 40]! ^ 1;
    img.bytes[img.backupHeader + 40] = img.bytes[img.backupHeader + 40]! ^ 1;
    const e = errorOf(() => readGpt(memoryDisk(img.bytes)));
    assert.equal(e.code, "gpt-invalid");
    assert.deepEqual(e.causes.map((c) => c.code), ["header-crc", "header-crc"]);
    assert.match(e.message, /primary header at LBA 1: HeaderCRC32 0x[0-9a-f]{8} does not match the computed 0x[0-9a-f]{8}/);
  });
}

test("a disk grown after the image was written (backup not at the end) reads from the primary", () => {
  const img = buildGptImage({ sectorSize: 512 });
  const grown = new Uint8Array(img.bytes.length + (4 << 20));
  grown.set(img.bytes);
  const table = readGpt(memoryDisk(grown));
  assert.equal(table.source, "primary");
  assert.equal(findMetaPartition(table).offset, 6 << 20);
});

test("the sector size can be forced; a wrong one finds no GPT", () => {
  const img = buildGptImage({ sectorSize: 4096 });
  assert.equal(readGpt(memoryDisk(img.bytes), { sectorSize: 4096 }).sectorSize, 4096);
  assert.equal(errorOf(() => readGpt(memoryDisk(img.bytes), { sectorSize: 512 })).code, "gpt-not-found");
  assert.equal(readGpt(memoryDisk(img.bytes, "dev", 4096)).sectorSize, 4096, "a reported sector size is used");
});

test("no GPT, no protective MBR, too small", () => {
  assert.equal(errorOf(() => readGpt(memoryDisk(new Uint8Array(1 << 20)))).code, "gpt-not-found");
  assert.equal(errorOf(() => readGpt(memoryDisk(buildGptImage({ protectiveMbr: false }).bytes))).code, "gpt-no-protective-mbr");
  assert.equal(errorOf(() => readGpt(memoryDisk(new Uint8Array(1000)))).code, "disk-too-small");
});

test("META missing, duplicated, the wrong size, or out of range", () => {
  const layout = talosLayout(512);
  const without = buildGptImage({ partitions: layout.filter((p) => p.name !== "META") });
  const e1 = errorOf(() => findMetaPartition(readGpt(memoryDisk(without.bytes))));
  assert.equal(e1.code, "meta-not-found");
  assert.match(e1.message, /"EFI", "BIOS", "BOOT", "STATE"/);
  const twice = buildGptImage({ partitions: [...layout, { name: "META", firstLBA: 8 * 2048, sizeBytes: 1 << 20 }] });
  assert.equal(errorOf(() => findMetaPartition(readGpt(memoryDisk(twice.bytes)))).code, "meta-ambiguous");
  const big = buildGptImage({ partitions: layout.map((p) => (p.name === "META" ? { ...p, sizeBytes: 512 << 10 } : p)) });
  assert.equal(errorOf(() => findMetaPartition(readGpt(memoryDisk(big.bytes)))).code, "meta-size");
  const outside = buildGptImage({ partitions: [{ name: "META", firstLBA: 10 * 2048 - 100, sizeBytes: 1 << 20 }] });
  assert.equal(errorOf(() => findMetaPartition(readGpt(memoryDisk(outside.bytes)))).code, "meta-out-of-range");
  // "META" is matched exactly (case and length)
  const lower = buildGptImage({ partitions: layout.map((p) => (p.name === "META" ? { ...p, name: "meta" } : p)) });
  assert.equal(errorOf(() => findMetaPartition(readGpt(memoryDisk(lower.bytes)))).code, "meta-not-found");
});

test("setMetaKey on an all-zero META writes both copies; on a corrupt one changes nothing", () => {
  const img = buildGptImage({});
  const disk = memoryDisk(img.bytes);
  const meta = findMetaPartition(readGpt(disk));
  const res = setMetaKey(disk, meta, 0x0b, new TextEncoder().encode("abc"));
  assert.equal(res.source, "empty");
  assert.deepEqual(res.before, ["zero", "zero"]);
  // byte-exact: the two-copy region is talos.md's vector
  assert.equal(Buffer.from(sha256(img.bytes.subarray(meta.offset, meta.offset + 2 * ADV_LENGTH))).toString("hex"), "0745e41da39df268584c1b245978ab0d55a60dfee34e80c3873a27beefa0f330");
  assert.ok(img.bytes.subarray(meta.offset + 2 * ADV_LENGTH, meta.offset + meta.size).every((b) => b === 0), "the rest of META is untouched");

  const junk = buildGptImage({});
  const jd = memoryDisk(junk.bytes);
  const jm = findMetaPartition(readGpt(jd));
  junk.bytes.fill(0x41, jm.offset + 100, jm.offset + 200);
  junk.bytes.fill(0x41, jm.offset + ADV_LENGTH + 100, jm.offset + ADV_LENGTH + 200);
  const before = sha256(junk.bytes);
  assert.equal(errorOf(() => setMetaKey(jd, jm, 0x0b, new TextEncoder().encode("abc"))).code, "adv-corrupt");
  assert.deepEqual(sha256(junk.bytes), before);
  const res2 = setMetaKey(jd, jm, 0x0b, new TextEncoder().encode("abc"), { init: true });
  assert.equal(res2.source, "init");
  assert.deepEqual(readAdvCopies(jd, jm).map((c) => c.state), ["valid", "valid"]);
});

test("setMetaKey repairs a damaged copy from the valid one, keeping keys", () => {
  const img = buildGptImage({});
  const disk = memoryDisk(img.bytes);
  const meta = findMetaPartition(readGpt(disk));
  const copy = marshalAdvCopy([{ tag: 0x11, value: new TextEncoder().encode("dual-boot") }]);
  img.bytes.set(copy, meta.offset + ADV_LENGTH); // only copy 2 present
  const res = setMetaKey(disk, meta, 0x0b, new TextEncoder().encode("c0de"));
  assert.equal(res.source, "copy2");
  assert.deepEqual(res.keys, [{ key: "0x11", tag: 0x11, length: 9 }, { key: "0x0b", tag: 0x0b, length: 4 }]);
  for (const c of readAdvCopies(disk, meta)) {
    assert.equal(c.state, "valid");
    assert.deepEqual(c.state === "valid" && c.records.map((r) => [r.tag, Buffer.from(r.value).toString()]), [[0x11, "dual-boot"], [0x0b, "c0de"]]);
  }
  assert.equal(parseAdvCopy(img.bytes.slice(meta.offset, meta.offset + ADV_LENGTH)).state, "valid");
});

test("setMetaKey refuses to overflow the ADV and leaves it unchanged", () => {
  const img = buildGptImage({});
  const disk = memoryDisk(img.bytes);
  const meta = findMetaPartition(readGpt(disk));
  const full = marshalAdvCopy([{ tag: 0x0a, value: new Uint8Array(262104 - 8 - 8 - 10) }]);
  img.bytes.set(full, meta.offset);
  img.bytes.set(full, meta.offset + ADV_LENGTH);
  const before = sha256(img.bytes);
  const e = errorOf(() => setMetaKey(disk, meta, 0x0b, new Uint8Array(64)));
  assert.equal(e.code, "adv-overflow");
  assert.deepEqual(sha256(img.bytes), before);
});
