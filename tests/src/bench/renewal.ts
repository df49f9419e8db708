/**
 * Server-side renewals per second: /v1/renew/challenge + evidence + confirm as the server handles them (zod, the
 * two certificates chained to the CA bundle by fleetd's X.509 module, the issued records, the possession
 * signature, the LAK quote, the event log replayed and judged by the `talos` profile, two certificates signed by
 * the CA, the runtime verdict, the outbox), with the node's TPM time excluded: a node:crypto TPM model
 * (@fleetd/testkit/softwareTpm) and the in-memory world of the protocol engine's unit tests (in-memory SQLite,
 * a software CA key), so only the server's own work is timed. Each renewal moves the server's clock past two
 * thirds of the current LDevID's lifetime, so every one issues and confirms a generation.
 * Floor, measured in the same run: the same crypto bare in node:crypto — three RSA-2048 PKCS#1 v1.5 SHA-256
 * verifications (possession, quote, confirm), two ECDSA P-256 verifications (the presented LDevID and LAK
 * against the CA) and two ECDSA P-256 signatures (the new LDevID and LAK certificates).
 *   node tests/dist/bench/renewal.js [--iterations N]
 */
import { generateKeyPairSync, randomBytes, sign, verify } from "node:crypto";
import { fileURLToPath } from "node:url";
import { bootedTpm, heldFrom, honest, machineOf, renewOnce, startMemoryWorld, type Held, type WorldMachine } from "../unit/platform/protocol/memoryWorld.js";
import { opsPerSecond, row, timedTransport, type BenchRow } from "./measure.js";

const DAY = 86_400_000;

function bareFloor(): number {
  const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const ca = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const msg = randomBytes(150);
  const rsaSig = sign("sha256", msg, rsa.privateKey);
  const caSig = sign("sha256", msg, ca.privateKey);
  return opsPerSecond(() => {
    for (let i = 0; i < 3; i++) verify("sha256", msg, rsa.publicKey, rsaSig);
    for (let i = 0; i < 2; i++) verify("sha256", msg, ca.publicKey, caSig);
    sign("sha256", msg, ca.privateKey);
    sign("sha256", msg, ca.privateKey);
  });
}

export async function benchRenewal(iterations = Number(process.env["FLEETD_BENCH_RENEWALS"] ?? 12)): Promise<BenchRow[]> {
  // the CA certificate lives 365 days: 21-day steps keep every renewal inside it
  const n = Math.min(iterations, 15);
  const w = await startMemoryWorld();
  try {
    const wm = w.machines["worker-1"] as WorldMachine;
    let held: Held = heldFrom(await honest(machineOf(wm, w.transport), wm.claims({ mode: "intake" })));
    const boot = bootedTpm(w, "talos");
    const server = timedTransport(w.transport);
    const timed = server.transport;
    // warm-up: one runtime attestation (profile load, JIT)
    await renewOnce(timed, boot.tpm, held, boot.eventLog, "attest");
    server.ms = 0;
    for (let i = 0; i < n; i++) {
      w.advanceClock(21 * DAY);
      const r = await renewOnce(timed, boot.tpm, held, boot.eventLog, "renew");
      if (r.response.issued !== "new") throw new Error(`renewal ${i + 1} issued nothing`);
      held = r.held;
    }
    const renewals = n / (server.ms / 1000);
    server.ms = 0;
    const m = n * 2;
    for (let i = 0; i < m; i++) await renewOnce(timed, boot.tpm, held, boot.eventLog, "attest");
    const attests = m / (server.ms / 1000);
    const floor = bareFloor();
    return [
      row("server-side renewal (challenge+evidence+confirm, a new generation each; TPM excluded)", "renewals/s", renewals, "the same crypto bare in node:crypto", floor),
      row("server-side runtime attestation without renewal (challenge+evidence)", "attestations/s", attests, "the renewal's crypto bare in node:crypto", floor),
    ];
  } finally {
    await w.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--iterations");
  for (const r of await benchRenewal(i > 0 ? Number(process.argv[i + 1]) : undefined)) console.log(r);
}
