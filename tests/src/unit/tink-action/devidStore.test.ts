import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, unlinkSync, writeFileSync, readdirSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import {
  CURRENT_LINK, DEVID_FILES, DevidStoreError, ensureSeeded, type InstallStep, installGeneration, readCurrent, readSeed, renewedSet, SEEDED_RECORD, setFiles,
  type DevidSet,
} from "@fleetd/tink-action/devidStore";
import { makeKeys, makeSet, writeSeed } from "./renewFixture.js";

const root = mkdtempSync(join(tmpdir(), "fleetd-devid-"));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const dirs = () => {
  const d = join(root, `case-${n++}`);
  return { seed: join(d, "seed"), devid: join(d, "devid") };
};
const keys = makeKeys();
const g1 = makeSet(keys, "worker-1", 1);
const g2 = makeSet(keys, "worker-1", 2);

/** The bytes spire-agent and the agent read, through the fixed links. */
function visible(devid: string): Record<string, string> {
  return Object.fromEntries(DEVID_FILES.map((f) => [f, readFileSync(join(devid, f)).toString("hex")]));
}
const expected = (s: DevidSet) => Object.fromEntries(Object.entries(setFiles(s)).map(([k, v]) => [k, Buffer.from(v).toString("hex")]));
const storeError = (code: string, pattern?: RegExp) => (e: unknown) => e instanceof DevidStoreError && e.code === code && (!pattern || pattern.test(e.message));

test("the seed is copied once: files at the paths agent.conf names, 0700/0600, a seeded record; a second start copies nothing", () => {
  const d = dirs();
  writeSeed(d.seed, g1);
  const r = ensureSeeded(d.seed, d.devid, new Date("2026-12-01T00:00:00Z"));
  assert.equal(r.action, "seeded");
  assert.equal(r.current.generation, 1);
  assert.deepEqual(visible(d.devid), expected(g1));
  assert.equal(readlinkSync(join(d.devid, CURRENT_LINK)), "g1");
  assert.equal(readlinkSync(join(d.devid, "ldevid.crt")), "current/ldevid.crt");
  assert.equal(statSync(d.devid).mode & 0o777, 0o700);
  for (const f of DEVID_FILES) assert.equal(statSync(join(d.devid, "g1", f)).mode & 0o777, 0o600, f);
  const record = JSON.parse(readFileSync(join(d.devid, SEEDED_RECORD), "utf8"));
  assert.equal(record.generation, 1);
  assert.equal(record.seededAt, "2026-12-01T00:00:00.000Z");
  // ldevid.crt: the leaf, then the CA bundle (what SPIRE's devid_cert_path wants)
  assert.equal((readFileSync(join(d.devid, "ldevid.crt"), "utf8").match(/BEGIN CERTIFICATE/g) ?? []).length, 2);
  const inode = statSync(join(d.devid, "g1", "ldevid.crt")).ino;
  const again = ensureSeeded(d.seed, d.devid);
  assert.equal(again.action, "kept");
  assert.equal(statSync(join(d.devid, "g1", "ldevid.crt")).ino, inode, "not rewritten");
  assert.equal(JSON.parse(readFileSync(join(d.devid, SEEDED_RECORD), "utf8")).seededAt, "2026-12-01T00:00:00.000Z", "the record is not rewritten");
});

test("a renewed (newer) generation is never replaced by the older seed Talos writes again at the next boot", () => {
  const d = dirs();
  writeSeed(d.seed, g1);
  ensureSeeded(d.seed, d.devid);
  installGeneration(d.devid, renewedSet(readCurrent(d.devid) as DevidSet, g2));
  writeSeed(d.seed, g1); // the boot rewrites machine.files
  const r = ensureSeeded(d.seed, d.devid);
  assert.equal(r.action, "kept");
  assert.equal(r.current.generation, 2);
  assert.equal(r.action === "kept" ? r.seedGeneration : undefined, 1);
  assert.deepEqual(visible(d.devid), expected(g2));
  assert.deepEqual(readdirSync(d.devid).filter((e) => /^g\d+$/.test(e)).sort(), ["g1", "g2"], "the previous generation is kept, one step back");
});

test("a strictly newer seed of the same node (a re-provision) is adopted; a seed for another node is an error", () => {
  const d = dirs();
  writeSeed(d.seed, g1);
  ensureSeeded(d.seed, d.devid);
  const k2 = makeKeys();
  const g5 = makeSet(k2, "worker-1", 5);
  writeSeed(d.seed, g5);
  const r = ensureSeeded(d.seed, d.devid);
  assert.equal(r.action, "adopted");
  assert.deepEqual(visible(d.devid), expected(g5));
  writeSeed(d.seed, makeSet(k2, "worker-2", 9));
  assert.throws(() => ensureSeeded(d.seed, d.devid), storeError("devid-other-node", /worker-1.*worker-2/));
  assert.deepEqual(visible(d.devid), expected(g5), "nothing changed");
});

test("a corrupt devid directory is an error naming the problem, never a silent re-seed", () => {
  const cases: [string, (devid: string) => void, RegExp][] = [
    ["a file of the current generation is gone", (dv) => unlinkSync(join(dv, "g1", "lak.crt")), /lak\.crt: missing/],
    ["a certificate does not parse", (dv) => writeFileSync(join(dv, "g1", "ldevid.crt"), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), /ldevid/i],
    ["a public blob is not a TPMT_PUBLIC", (dv) => writeFileSync(join(dv, "g1", "ldevid.pub"), Uint8Array.of(1, 2, 3)), /ldevid\.pub is not a TPMT_PUBLIC/],
    ["current names a missing generation", (dv) => { unlinkSync(join(dv, CURRENT_LINK)); symlinkSync("g7", join(dv, CURRENT_LINK)); }, /g7.*missing/],
    ["current is gone but the seed was copied", (dv) => unlinkSync(join(dv, CURRENT_LINK)), /seeded\.json says the seed was copied/],
    ["the generation directory holds another generation", (dv) => { rmSync(join(dv, "g1"), { recursive: true }); installGeneration(dv, g2); unlinkSync(join(dv, CURRENT_LINK)); symlinkSync("g1", join(dv, CURRENT_LINK)); /* g1 gone */ }, /missing|holds generation/],
  ];
  for (const [what, damage, pattern] of cases) {
    const d = dirs();
    writeSeed(d.seed, g1);
    ensureSeeded(d.seed, d.devid);
    damage(d.devid);
    const before = readdirSync(d.devid).sort();
    assert.throws(() => ensureSeeded(d.seed, d.devid), storeError("devid-corrupt", pattern), what);
    assert.deepEqual(readdirSync(d.devid).sort(), before, `${what}: nothing was written`);
  }
});

test("the seed: each file is required and checked; the LAK certificate (lak-cert.pem.b64) is part of it", () => {
  const d = dirs();
  writeSeed(d.seed, g1, { withoutLakCert: true });
  assert.throws(() => readSeed(d.seed), storeError("seed-missing", /lak-cert\.pem\.b64: missing/));
  assert.throws(() => ensureSeeded(d.seed, d.devid), storeError("seed-missing"));
  assert.equal(readCurrent(d.devid), undefined, "nothing installed");
  writeSeed(d.seed, g1);
  writeFileSync(join(d.seed, "ldevid.priv.b64"), "not base64 !");
  assert.throws(() => readSeed(d.seed), storeError("seed-invalid", /ldevid\.priv\.b64: not base64/));
  writeSeed(d.seed, { ...g1, lakCertificate: makeSet(keys, "worker-1", 2).lakCertificate });
  assert.throws(() => readSeed(d.seed), storeError("seed-invalid", /not of one generation/));
  // with a generation installed, a damaged seed changes nothing and is reported
  writeSeed(d.seed, g1);
  ensureSeeded(d.seed, d.devid);
  rmSync(d.seed, { recursive: true });
  const r = ensureSeeded(d.seed, d.devid);
  assert.equal(r.action, "kept");
  assert.match(r.action === "kept" ? (r.seedProblem ?? "") : "", /missing/);
});

test("the swap is atomic: a crash at any step leaves the old set or the new set, never a mix, and the next swap completes", () => {
  const steps: InstallStep[] = ["write-files", "sync-generation", "rename-generation", "link-current", "swap-current", "sync-dir", "links", "prune"];
  for (const [i, step] of steps.entries()) {
    const d = dirs();
    writeSeed(d.seed, g1);
    ensureSeeded(d.seed, d.devid);
    const next = renewedSet(g1, g2);
    assert.throws(
      () => installGeneration(d.devid, next, { beforeStep: (s) => { if (s === step) throw new Error(`crash at ${s}`); } }),
      /crash at/,
    );
    const seen = visible(d.devid);
    const current = readCurrent(d.devid);
    const swapped = i > steps.indexOf("swap-current");
    assert.deepEqual(seen, expected(swapped ? g2 : g1), `crash before ${step}: ${swapped ? "the new" : "the old"} set, complete`);
    assert.equal(current?.generation, swapped ? 2 : 1, step);
    // the agent's next start: the seed rule keeps what is current; a renewal of the same generation completes
    assert.equal(ensureSeeded(d.seed, d.devid).current.generation, swapped ? 2 : 1);
    if (!swapped) installGeneration(d.devid, next);
    assert.deepEqual(visible(d.devid), expected(g2), `${step}: completes afterwards`);
    assert.deepEqual(readdirSync(d.devid).filter((e) => e.endsWith(".tmp")), [], "no temporary leftovers after a complete swap");
  }
});

test("renewed certificates are taken only for the same keys, the same node and a newer generation", () => {
  assert.equal(renewedSet(g1, g2).generation, 2);
  assert.deepEqual(renewedSet(g1, g2).ldevidPrivate, g1.ldevidPrivate, "the key blobs stay");
  const other = makeSet(makeKeys(), "worker-1", 2);
  assert.throws(() => renewedSet(g1, other), storeError("devid-io", /another key/));
  assert.throws(() => renewedSet(g2, g1), storeError("devid-io", /not newer/));
  assert.throws(() => renewedSet(g1, makeSet(keys, "worker-9", 2)), storeError("devid-io", /worker-9/));
});
