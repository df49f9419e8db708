/**
 * Benchmark: SPIRE's own floor for node entries, against a real spire-server v1.13.3 (the shipped server.conf,
 * SQLite) on loopback — what any entry sync pays at least. 10,000 node entries (the shape fleetd's sync writes:
 * `spiffe://<td>/node/<name>`, parent `spiffe://<td>/spire/server`, a CN and a CA-fingerprint selector) sent as raw
 * `BatchCreateEntry` batches of 50, one after another, into an empty datastore; then the same entries read back
 * as a paged list (pages of 500; what a sync that changes nothing costs); then all deleted in batches of 200.
 *   pnpm -s build && node tests/dist/bench/spire.js [--entries N] [--batch B]
 * FLEETD_BENCH_SPIRE_ENTRIES and FLEETD_BENCH_SPIRE_BATCH set N and B inside `pnpm bench` (default 10,000 and 50). The research note measured 42.7 s for
 * the create on SQLite here (../shared/research/spire.md §8, batches of 1,000).
 */
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serverId, type EntrySpec, type SpireServerClient } from "@fleetd/platform/spire";
import { makeCa } from "@fleetd/testkit/pki";
import { startSpireServer } from "../harness/spire.js";
import { printRows, type BenchRow } from "./measure.js";

const DELETE_BATCH = 200;
const PAGE = 500;

/**
 * SPIRE's floor for creating `entries`: raw BatchCreateEntry batches of `batch`, one after another, each item
 * required OK. Returns the seconds taken and the IDs SPIRE holds them under. (The entry-sync bench, spireSync.ts,
 * measures its floor with this too.)
 */
export async function createFloor(spire: Pick<SpireServerClient, "batchCreateEntry">, entries: readonly EntrySpec[], batch: number): Promise<{ seconds: number; ids: string[] }> {
  const t0 = process.hrtime.bigint();
  const ids: string[] = [];
  for (let i = 0; i < entries.length; i += batch) {
    const results = await spire.batchCreateEntry(entries.slice(i, i + batch));
    for (const r of results) {
      if (r.status.code !== 0 || !r.entry) throw new Error(`BatchCreateEntry item: ${r.status.codeName} ${r.status.message}`);
      ids.push(r.entry.id);
    }
  }
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, ids };
}

export async function benchSpire(
  entries = Number(process.env["FLEETD_BENCH_SPIRE_ENTRIES"] ?? 10_000),
  createBatch = Number(process.env["FLEETD_BENCH_SPIRE_BATCH"] ?? 50),
): Promise<BenchRow[]> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-bench-spire-"));
  try {
    await makeCa(dir, "ca", "bench CA");
    const server = await startSpireServer({ devidCaPath: join(dir, "ca.crt"), endorsementCaPath: join(dir, "ca.crt") });
    let rpcs = 0;
    const spire = server.client({ onRpc: () => void rpcs++ });
    try {
      const td = server.trustDomain;
      const root = createHash("sha1").update("bench root").digest("hex");
      const all: EntrySpec[] = Array.from({ length: entries }, (_, i) => {
        const name = `bench-${String(i).padStart(5, "0")}`;
        return {
          spiffeId: `spiffe://${td}/node/${name}`,
          parentId: serverId(td),
          selectors: [
            { type: "tpm_devid", value: `subject:cn:${name}.g1` },
            { type: "tpm_devid", value: `ca:fingerprint:${root}` },
          ],
        };
      });

      rpcs = 0;
      const { seconds: createS, ids } = await createFloor(spire, all, createBatch);
      const createRpcs = rpcs;
      let t0: bigint;

      rpcs = 0;
      t0 = process.hrtime.bigint();
      const listed = await spire.listEntries({}, PAGE);
      const listS = Number(process.hrtime.bigint() - t0) / 1e9;
      if (listed.length !== entries) throw new Error(`listed ${listed.length} entries, created ${entries}`);
      const listRpcs = rpcs;

      rpcs = 0;
      t0 = process.hrtime.bigint();
      for (let i = 0; i < ids.length; i += DELETE_BATCH) {
        const results = await spire.batchDeleteEntry(ids.slice(i, i + DELETE_BATCH));
        const bad = results.find((r) => r.status.code !== 0);
        if (bad) throw new Error(`BatchDeleteEntry item ${bad.id}: ${bad.status.codeName} ${bad.status.message}`);
      }
      const deleteS = Number(process.hrtime.bigint() - t0) / 1e9;
      const deleteRpcs = rpcs;

      const n = entries.toLocaleString("en");
      return [
        { name: `create ${n} node entries into an empty datastore (${createRpcs} BatchCreateEntry of ${createBatch})`, value: createS, unit: "s" },
        { name: "  the same, per entry", value: entries / createS, unit: "entries/s" },
        { name: `list ${n} entries (${listRpcs} ListEntries, pages of ${PAGE})`, value: listS, unit: "s" },
        { name: `delete ${n} entries (${deleteRpcs} BatchDeleteEntry of ${DELETE_BATCH})`, value: deleteS, unit: "s" },
      ];
    } finally {
      spire.close();
      await server.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (name: string) => (process.argv.includes(name) ? Number(process.argv[process.argv.indexOf(name) + 1]) : undefined);
  const rows = await benchSpire(arg("--entries"), arg("--batch"));
  printRows("SPIRE's own floor: spire-server v1.13.3, SQLite, admin socket on loopback", rows);
}
