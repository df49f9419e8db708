/**
 * `pnpm bench` — every benchmark, each printed with a floor measured in the same run and the ratio to it.
 * FLEETD_BENCH_MS sets the time budget per measurement (default 1000 ms); FLEETD_BENCH_SPIRE_ENTRIES the entries of
 * the SPIRE floor (default 10,000); FLEETD_BENCH_SPIRE_SYNC_NODES the nodes of the entry-sync bench (default 10,000);
 * FLEETD_BENCH_NETBOX_ITERATIONS the NetBox changes timed to their Workflow (default 20; FLEETD_BENCH_NETBOX_TRACE=1
 * prints one's requests on a time line); FLEETD_BENCH_TALOS_CONFIG_BURSTS and FLEETD_BENCH_TALOS_CONFIG_FETCHES the
 * config-fetch bursts and their size (default 5 of 200).
 * The attestation rows run NetBox under gunicorn (FLEETD_BENCH_NETBOX_WORKERS, default 2); the concurrency and storm
 * rows take FLEETD_BENCH_CONCURRENT_MACHINES (32), FLEETD_BENCH_CONCURRENT_ROUNDS (3), FLEETD_BENCH_STORM_MACHINES
 * (1000, in-memory inventory), FLEETD_BENCH_STORM_NETBOX_MACHINES (50, real NetBox), FLEETD_BENCH_STORM_SPREAD_MS
 * (3000) and FLEETD_BENCH_NETBOX=0 (in-memory rows only) — see concurrency.ts and tests/README.md.
 */
import { printRows } from "./measure.js";
import { benchAttestation } from "./attestation.js";
import { benchConcurrency } from "./concurrency.js";
import { benchEventlog } from "./eventlog.js";
import { benchNetbox } from "./netbox.js";
import { benchRenewal } from "./renewal.js";
import { benchSpire } from "./spire.js";
import { benchSpireSync } from "./spireSync.js";
import { benchTalosConfig } from "./talosConfig.js";
import { benchTpm } from "./tpm.js";

const suites: [string, () => Promise<import("./measure.js").BenchRow[]> | import("./measure.js").BenchRow[]][] = [
  ["TPM: quotes and credential activation (per core)", benchTpm],
  ["Event log and evidence verification (per core)", benchEventlog],
  ["NetBox change to Tinkerbell Workflow, per stage: real NetBox, netbox-script, a real kube-apiserver with Tinkerbell's CRDs", () => benchNetbox()],
  ["Talos config fetch: 200 concurrent fetches of 200 sealed configs (SQLite store, loopback)", () => benchTalosConfig()],
  ["Attestation server (per core)", benchAttestation],
  ["Attestation server under concurrency and a power-on storm (software TPM machines, SoftHSM2; NetBox under gunicorn beside the in-memory inventory)", benchConcurrency],
  ["Renewal with runtime attestation, server side (per core)", benchRenewal],
  ["SPIRE's own floor: spire-server v1.13.3, SQLite, admin socket on loopback", benchSpire],
  ["spire-plugin's entry sync vs SPIRE's floor (same run): SQLite and PostgreSQL", benchSpireSync],
];

for (const [title, run] of suites) {
  printRows(title, await run());
}
