/**
 * Server-side attestations per second: challenge + evidence + confirm as the attestation server handles them
 * (HTTP on loopback, zod, every check, NetBox reads and writes, PKCS#11 signing on SoftHSM2, SQLite), with the
 * machine's TPM time excluded — only the time inside the three HTTP calls counts. Floor: the same crypto done
 * bare with node:crypto (two EK encapsulations: RSA-OAEP and ECDH P-384; four RSA-2048 verifications: quote,
 * two certifies, confirm; two ECDSA P-256 signatures: LDevID and LAK certificates).
 *   node tests/dist/bench/attestation.js [--iterations N]
 */
import { constants, createECDH, generateKeyPairSync, publicEncrypt, randomBytes, sign, verify } from "node:crypto";
import { fileURLToPath } from "node:url";
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

export async function benchAttestation(iterations = Number(process.env["FLEETD_BENCH_ATTESTATIONS"] ?? 8)): Promise<BenchRow[]> {
  const w = await startWorld({ talosVersion: TALOS_VERSION });
  try {
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
    return [row("server-side attestation (challenge+evidence+confirm, TPM excluded; with NetBox, SoftHSM2)", "attestations/s", perSecond, "the same crypto bare in node:crypto", bareFloor())];
  } finally {
    await w.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--iterations");
  for (const r of await benchAttestation(i > 0 ? Number(process.argv[i + 1]) : undefined)) console.log(r);
}
