/**
 * Server-side attestations per second: challenge + evidence + confirm as the attestation server handles them
 * (HTTP on loopback, zod, every check, NetBox reads and writes, PKCS#11 signing on SoftHSM2, SQLite), with the
 * machine's TPM time excluded — only the time inside the three HTTP calls counts. Floor: the same crypto done
 * bare with node:crypto (two EK encapsulations: RSA-OAEP and ECDH P-384; four RSA-2048 verifications: quote,
 * two certifies, confirm; two ECDSA P-256 signatures: LDevID and LAK certificates).
 * It also counts the NetBox requests one attestation makes (as NetBox's own request log records them), in each
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

/** NetBox API requests (REST and GraphQL) in its runserver log (one line per request, written as it answers). */
function netboxRequestLines(log: string): string[] {
  return readFileSync(log, "utf8").match(/"(GET|POST|PUT|PATCH|DELETE) \/(api|graphql)\/[^?" ]*/g) ?? [];
}
function netboxRequests(log: string): number {
  return netboxRequestLines(log).length;
}

/** The count once it has not moved for `quietMs` (NetBox writes its log line after the answer; the outbox is async). */
async function settled(log: string, quietMs: number): Promise<number> {
  let n = netboxRequests(log);
  for (;;) {
    await sleep(quietMs);
    const m = netboxRequests(log);
    if (m === n) return n;
    n = m;
  }
}

export async function benchAttestation(iterations = Number(process.env["FLEETD_BENCH_ATTESTATIONS"] ?? 8)): Promise<BenchRow[]> {
  const w = await startWorld({ talosVersion: TALOS_VERSION });
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
      console.log(`# NetBox requests in one intake attestation: ${total} (${[...perStep].map(([k, v]) => `${k} ${v}`).join(", ")}; after the answers ${total - inAnswers}), target ≤ 4: ${[...which].map(([k, v]) => `${k.replace(/\/\d+\//g, "/{id}/")}${v > 1 ? ` ×${v}` : ""}`).join(", ")}`);
      rows.push(row("NetBox requests per attestation (intake; NetBox's request log)", "requests", total, "issue 12's target (≤ 4; ratio > 1 is over it)", 4));
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
    return [...rows, row("server-side attestation (challenge+evidence+confirm, TPM excluded; with NetBox, SoftHSM2)", "attestations/s", perSecond, "the same crypto bare in node:crypto", bareFloor())];
  } finally {
    await w.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--iterations");
  for (const r of await benchAttestation(i > 0 ? Number(process.argv[i + 1]) : undefined)) console.log(r);
}
