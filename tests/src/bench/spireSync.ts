/**
 * Benchmark: spire-plugin's entry sync against a real spire-server v1.13.3, next to SPIRE's own floor measured in
 * the same run, with SPIRE's SQLite datastore (the shipped server.conf) and its PostgreSQL one (the NetBox
 * harness's PostgreSQL, a database of its own):
 *  - floor: the same N node entries sent as raw BatchCreateEntry batches of 200 into an empty datastore;
 *  - the sync's first pass over N nodes (a fresh server): time and write RPCs (target: at most 1 + N/200 batches,
 *    within 1.2x of the floor);
 *  - a no-change pass over the N (target: <= 2 s, 0 writes);
 *  - one node decommissioned among the N: the pass's time until its entry is removed (target: <= 1 s).
 * The sync is spire-plugin's own loop (`EntrySync.pass`: list read and validated, the engine, the status write).
 *   pnpm -s build && node tests/dist/bench/spireSync.js [--nodes N]
 * FLEETD_BENCH_SPIRE_SYNC_NODES sets N inside `pnpm bench` (default 10,000); FLEETD_BENCH_SPIRE_SYNC_DATASTORES
 * picks datastores (default "sqlite3,postgres").
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { X509Certificate } from "node:crypto";
import pino from "pino";
import { nodeEntries, rootFingerprints, serializeNodeList, type DocumentStore, type NodeList } from "@fleetd/platform/spire";
import { createSyncMetrics, EntrySync } from "@fleetd/spire-plugin";
import { makeCa } from "@fleetd/testkit/pki";
import { startPostgres, type Postgres } from "../harness/netbox.js";
import { startSpireServer, type SpireServer } from "../harness/spire.js";
import { eligibleNode, listOf, nodeNames } from "../spire/listFixture.js";
import { printRows, type BenchRow } from "./measure.js";
import { createFloor } from "./spire.js";

const BATCH = 200;
const WRITES = new Set(["Entry/BatchCreateEntry", "Entry/BatchUpdateEntry", "Entry/BatchDeleteEntry", "Agent/BanAgent"]);

function memoryStore(name: string): DocumentStore & { set(b: Uint8Array): void } {
  let bytes: Uint8Array | undefined;
  let v = 0;
  return {
    describe: `memory ${name}`,
    set(b) {
      bytes = b;
      v++;
    },
    async read() {
      return bytes ? { bytes, version: String(v) } : undefined;
    },
    async write(b) {
      bytes = b;
      v++;
      return true;
    },
    watch: () => () => undefined,
  };
}

const secs = (t0: bigint) => Number(process.hrtime.bigint() - t0) / 1e9;

async function onDatastore(kind: "sqlite3" | "postgres", n: number, dir: string, pg: Postgres | undefined): Promise<BenchRow[]> {
  const caPath = join(dir, "ca.crt");
  const root = rootFingerprints([new X509Certificate(readFileSync(caPath)).raw])[0] as string;
  let db = 0;
  const server = async (): Promise<SpireServer> => {
    if (kind === "sqlite3") return startSpireServer({ devidCaPath: caPath, endorsementCaPath: caPath });
    const name = `spire_bench_${process.pid}_${++db}`;
    pg?.createDatabase(name);
    return startSpireServer({ devidCaPath: caPath, endorsementCaPath: caPath, datastore: { type: "postgres", connectionString: (pg as Postgres).connectionString(name) } });
  };
  const td = "fleet.example.org";
  const nodes = nodeNames(n, "bench").map((x) => eligibleNode(x));
  const list: NodeList = listOf(td, [root], nodes);
  const rows: BenchRow[] = [];
  const label = kind === "sqlite3" ? "SQLite" : "PostgreSQL";

  // SPIRE's floor: the same entries, raw BatchCreateEntry batches of 200, into an empty datastore.
  {
    const s = await server();
    const spire = s.client();
    try {
      const { seconds } = await createFloor(spire, nodeEntries(list), BATCH);
      rows.push({ name: `${label}: floor — ${n.toLocaleString("en")} node entries as raw BatchCreateEntry (${Math.ceil(n / BATCH)} batches of ${BATCH})`, value: seconds, unit: "s" });
    } finally {
      spire.close();
      await s.stop();
    }
  }

  // The sync, on a fresh server.
  const s = await server();
  let writes: string[] = [];
  let deletedAt: bigint | undefined;
  const spire = s.client({
    timeoutMs: 300_000,
    onRpc: (rpc) => {
      if (WRITES.has(rpc)) writes.push(rpc);
      if (rpc === "Entry/BatchDeleteEntry") deletedAt ??= process.hrtime.bigint();
    },
  });
  const listStore = memoryStore("list");
  const sync = new EntrySync({
    client: spire, trustDomain: td, trustedRoots: () => [root], list: listStore, status: memoryStore("status"), log: pino({ level: "silent" }), metrics: createSyncMetrics(),
    intervalMs: 3_600_000, maxListBytes: 32 * 1024 * 1024, batchSize: BATCH, pageSize: 500,
  });
  try {
    const floor = rows[0]?.value ?? Number.NaN;
    listStore.set(Buffer.from(serializeNodeList(list)));
    writes = [];
    let t0 = process.hrtime.bigint();
    const first = await sync.pass(false);
    const firstS = secs(t0);
    if (first.outcome !== "converged" || first.creates !== n) throw new Error(`first sync: ${JSON.stringify({ ...first, plan: undefined })}`);
    const maxBatches = 1 + Math.floor(n / BATCH);
    rows.push({ name: `${label}: first sync of ${n.toLocaleString("en")} nodes (${writes.length} write RPCs; at most ${maxBatches}); ratio to the floor ${(firstS / floor).toFixed(2)} (target <= 1.2)`, value: firstS, unit: "s" });
    if (writes.length > maxBatches) throw new Error(`first sync made ${writes.length} write RPCs, more than ${maxBatches}`);

    writes = [];
    t0 = process.hrtime.bigint();
    const again = await sync.pass(false);
    const againS = secs(t0);
    if (again.outcome !== "converged" || again.unchanged !== n) throw new Error(`no-change sync: ${JSON.stringify(again)}`);
    rows.push({ name: `${label}: no-change sync of ${n.toLocaleString("en")} nodes (${writes.length} write RPCs; target <= 2 s, 0 writes)`, value: againS, unit: "s" });

    const gone = nodes[Math.floor(n / 2)]?.name as string;
    listStore.set(Buffer.from(serializeNodeList(listOf(td, [root], nodes.filter((x) => x.name !== gone)))));
    writes = [];
    deletedAt = undefined;
    t0 = process.hrtime.bigint();
    const one = await sync.pass(false);
    const passS = secs(t0);
    if (deletedAt === undefined) throw new Error("no BatchDeleteEntry answered");
    const oneS = Number(deletedAt - t0) / 1e9;
    if (one.outcome !== "converged" || one.deletes !== 1) throw new Error(`one removal: ${JSON.stringify(one)}`);
    rows.push({ name: `${label}: one node decommissioned among ${n.toLocaleString("en")}: list changed to its entry removed (${writes.join(", ")}; the whole pass with the ban lookup and status ${passS.toFixed(3)} s; target <= 1 s)`, value: oneS, unit: "s" });
  } finally {
    spire.close();
    await s.stop();
  }
  return rows;
}

export async function benchSpireSync(
  n = Number(process.env["FLEETD_BENCH_SPIRE_SYNC_NODES"] ?? 10_000),
  datastores = (process.env["FLEETD_BENCH_SPIRE_SYNC_DATASTORES"] ?? "sqlite3,postgres").split(",").map((x) => x.trim()),
): Promise<BenchRow[]> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-bench-spire-sync-"));
  let pg: Postgres | undefined;
  try {
    await makeCa(dir, "ca", "bench CA");
    const rows: BenchRow[] = [];
    for (const d of datastores) {
      if (d !== "sqlite3" && d !== "postgres") throw new Error(`unknown datastore ${d} (sqlite3, postgres)`);
      if (d === "postgres") pg ??= await startPostgres();
      rows.push(...(await onDatastore(d, n, dir, pg)));
    }
    return rows;
  } finally {
    await pg?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (name: string) => (process.argv.includes(name) ? Number(process.argv[process.argv.indexOf(name) + 1]) : undefined);
  const rows = await benchSpireSync(arg("--nodes"));
  printRows("spire-plugin's entry sync vs SPIRE's floor: spire-server v1.13.3, admin socket on loopback", rows);
}
