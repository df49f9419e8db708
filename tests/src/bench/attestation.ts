/**
 * Server-side attestations per second: challenge + evidence + confirm as the attestation server handles them
 * (HTTP on loopback, zod, every check, NetBox reads and writes, PKCS#11 signing on SoftHSM2, SQLite), with the
 * machine's TPM time excluded — only the time inside the three HTTP calls counts. Floor: the same crypto done
 * bare with node:crypto (two EK encapsulations: RSA-OAEP and ECDH P-384; four RSA-2048 verifications: quote,
 * two certifies, confirm; two ECDSA P-256 signatures: LDevID and LAK certificates).
 * NetBox runs as production runs it: gunicorn with FLEETD_BENCH_NETBOX_WORKERS workers (default 2; the tests run
 * `runserver`). It also counts the NetBox requests one attestation makes (as gunicorn's access log records them), in each
 * step's answer and after it (the outbox's deliveries), against issue 12's target of 4.
 *   node tests/dist/bench/attestation.js [--iterations N]
 */
import { constants, createECDH, generateKeyPairSync, publicEncrypt, randomBytes, sign, verify } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ServerTransport } from "@fleetd/platform/protocol/client";
import { sleep } from "../harness/ports.js";
import { attest } from "@fleetd/platform/protocol/client";
import { startWorld } from "../attestation/world.js";
import { opsPerSecond, row, timedTransport, type BenchRow } from "./measure.js";
import { TALOS_VERSION } from "../talos/goTools.js";

function bareFloor(): number {
  const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const ca = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const ekPoint = createECDH("secp384r1");
  ekPoint.generateKeys();
  const ekPub = ekPoint.getPublicKey();
  const msg = randomBytes(150);
  const sig = sign("sha256", msg, rsa.privateKey);
  const secret = randomBytes(32);
  return opsPerSecond(() => {
    publicEncrypt({ key: rsa.publicKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: "sha256" }, secret);
    const e = createECDH("secp384r1");
    e.generateKeys();
    e.computeSecret(ekPub);
    for (let i = 0; i < 4; i++) verify("sha256", msg, rsa.publicKey, sig);
    sign("sha256", msg, ca.privateKey);
    sign("sha256", msg, ca.privateKey);
  });
}

/** NetBox API requests (REST and GraphQL) in its access log (gunicorn's; one line per request, written once it has answered). */
export function netboxRequestLines(log: string): string[] {
  return readFileSync(log, "utf8").match(/"(GET|POST|PUT|PATCH|DELETE) \/(api|graphql)\/[^?" ]*/g) ?? [];
}
export function netboxRequests(log: string): number {
  return netboxRequestLines(log).length;
}

/** The count once it has not moved for `quietMs` (NetBox writes its log line after the answer; the outbox is async). */
export async function settled(log: string, quietMs: number): Promise<number> {
  let n = netboxRequests(log);
  for (;;) {
    await sleep(quietMs);
    const m = netboxRequests(log);
    if (m === n) return n;
    n = m;
  }
}

/** gunicorn's workers for NetBox in the benchmarks (FLEETD_BENCH_NETBOX_WORKERS, default 2). */
export function benchNetboxWorkers(): number {
  const n = Number(process.env["FLEETD_BENCH_NETBOX_WORKERS"] ?? 2);
  if (!Number.isInteger(n) || n < 1 || n > 16) throw new Error(`FLEETD_BENCH_NETBOX_WORKERS=${process.env["FLEETD_BENCH_NETBOX_WORKERS"]}: 1..16`);
  return n;
}

export async function benchAttestation(iterations = Number(process.env["FLEETD_BENCH_ATTESTATIONS"] ?? 8)): Promise<BenchRow[]> {
  // NetBox as production runs it: gunicorn with workers (the tests run `runserver`)
  const workers = benchNetboxWorkers();
  const nbLabel = `NetBox under gunicorn ×${workers}`;
  const w = await startWorld({ talosVersion: TALOS_VERSION, netbox: { server: "gunicorn", workers } });
  try {
    const rows: BenchRow[] = [];
    const server = timedTransport(w.transport);
    const timed = server.transport;
    // The node stays planned: intake is the mode it allows again and again (each run a fresh AK and session).
    await (async () => {
      const tpm = w.client();
      try {
        await attest({ tpm, server: timed, claims: w.claims({ mode: "intake" }), eventLog: w.eventLog });
      } finally {
        await tpm.close();
      }
    })();
    // NetBox requests per step: counted around each call, outside the timed part
    const log = join(w.fleet.nb.runDir, "netbox.log");
    const perStep = new Map<string, number>();
    const counting: ServerTransport = {
      async post(path, body) {
        const before = await settled(log, 100);
        try {
          return await timed.post(path, body);
        } finally {
          const step = path.split("/").pop() ?? path;
          perStep.set(step, (perStep.get(step) ?? 0) + (await settled(log, 100)) - before);
        }
      },
    };
    {
      const start = await settled(log, 1500);
      const tpm = w.client();
      try {
        await attest({ tpm, server: counting, claims: w.claims({ mode: "intake" }), eventLog: w.eventLog });
      } finally {
        await tpm.close();
      }
      const total = (await settled(log, 1500)) - start;
      const which = new Map<string, number>();
      for (const l of netboxRequestLines(log).slice(start)) which.set(l.slice(1), (which.get(l.slice(1)) ?? 0) + 1);
      const inAnswers = [...perStep.values()].reduce((a, b) => a + b, 0);
      console.log(`# NetBox requests in one intake attestation (${nbLabel}): ${total} (${[...perStep].map(([k, v]) => `${k} ${v}`).join(", ")}; after the answers ${total - inAnswers}), target ≤ 4: ${[...which].map(([k, v]) => `${k.replace(/\/\d+\//g, "/{id}/")}${v > 1 ? ` ×${v}` : ""}`).join(", ")}`);
      rows.push(row(`NetBox requests per attestation (intake; ${nbLabel}, its access log)`, "requests", total, "issue 12's target (≤ 4; ratio > 1 is over it)", 4));
    }
    server.ms = 0;
    for (let i = 0; i < iterations; i++) {
      const tpm = w.client();
      try {
        await attest({ tpm, server: timed, claims: w.claims({ mode: "intake" }), eventLog: w.eventLog });
      } finally {
        await tpm.close();
      }
    }
    const perSecond = iterations / (server.ms / 1000);
    return [...rows, row(`server-side attestation, one at a time (challenge+evidence+confirm, TPM excluded; ${nbLabel}, SoftHSM2)`, "attestations/s", perSecond, "the same crypto bare in node:crypto", bareFloor())];
  } finally {
    await w.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--iterations");
  for (const r of await benchAttestation(i > 0 ? Number(process.argv[i + 1]) : undefined)) console.log(r);
}
