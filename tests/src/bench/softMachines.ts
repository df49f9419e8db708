/**
 * Machines for the concurrency and storm benchmarks: each a software TPM model (@fleetd/testkit/softwareTpm —
 * real keys, real TPM structures, credential activation, quotes and certifies made with node:crypto; not swtpm)
 * manufactured by one software EK CA, with the world's HookOS boot in its PCRs and event log, and every key it
 * will use made before any clock starts: its two EKs (RSA-2048 made asynchronously, on libuv's pool) and, per
 * attestation it will run, a fresh AK, LDevID and LAK (P-256: what an ECC machine creates; the server verifies
 * ECDSA for them). Each attestation is the real protocol over HTTP — challenge, activation of every credential,
 * quote, two certifies, evidence, confirm signed by the LDevID — with the real client's retry of a 503
 * `unavailable` (postStep with the tink-action's backoff).
 */
import { generateKeyPair, generateKeyPairSync, type KeyObject } from "node:crypto";
import { promisify } from "node:util";
import { certifyExtraData, claimsHash, confirmMessage, quoteExtraData, type ChallengeResponse, type Claims, type ConfirmResponse, type EvidenceResponse } from "@fleetd/platform/protocol";
import { AttestationRefused, ATTEST_PATHS, DEFAULT_QUOTE_SELECTION, postStep, tpm2b, type EvidenceWire, type RetryUnavailable, type ServerTransport } from "@fleetd/platform/protocol/client";
import { backoffDelayMs } from "@fleetd/platform/outage";
import type { Node } from "@fleetd/platform/fleet";
import { akTemplate, lakTemplate, ldevidTemplate } from "@fleetd/platform/tpmclient";
import { SoftwareTpm, softwareKey, type SoftwareKey, type SoftwareManufacturer } from "@fleetd/testkit/softwareTpm";
import type { bootScenario } from "@fleetd/testkit/bootScenarios";

type BootScenario = ReturnType<typeof bootScenario>;
import { b64, unb64 } from "../attestation/machineTypes.js";

const rsaKeyPair = promisify(generateKeyPair);

/** The keys of one attestation: a fresh AK (an AK serves one session) and the LDevID and LAK it certifies. */
export interface SessionKeys {
  ak: SoftwareKey;
  ldevid: SoftwareKey;
  lak: SoftwareKey;
}

export interface SoftMachine {
  index: number;
  name: string;
  tpm: SoftwareTpm;
  claims: Claims;
  eventLog: Uint8Array;
  /** One set per attestation this machine will run (used in order). */
  sessions: SessionKeys[];
}

export function machineName(i: number): string {
  return `bench-${String(i).padStart(4, "0")}`;
}

/** Node i's addresses, serial and switch port: unique for up to 50,000 nodes. */
export function nodeFacts(i: number): { serial: string; port: string; cidr: string; gateway: string; bmc: string; mac: string; uuid: string } {
  const net = Math.floor(i / 200);
  const host = 10 + (i % 200);
  return {
    serial: `BENCH${String(i).padStart(5, "0")}`,
    port: `ethernet9/${net + 1}/${(i % 200) + 1}`,
    cidr: `10.${100 + Math.floor(net / 250)}.${net % 250}.${host}/24`,
    gateway: `10.${100 + Math.floor(net / 250)}.${net % 250}.1`,
    bmc: `10.${200 + Math.floor(net / 250)}.${net % 250}.${host}`,
    mac: `b0:7b:26:${((i >> 16) & 0xff).toString(16).padStart(2, "0")}:${((i >> 8) & 0xff).toString(16).padStart(2, "0")}:${(i & 0xff).toString(16).padStart(2, "0")}`,
    uuid: `4c4c4544-0058-4b10-8032-${i.toString(16).padStart(12, "0")}`,
  };
}

/** `count` machines with `sessions` attestations' keys each; RSA EKs are made `parallel` at a time on the pool. */
export async function makeMachines(count: number, sessions: number, maker: SoftwareManufacturer, boot: BootScenario, parallel = 8): Promise<SoftMachine[]> {
  const rsa: KeyObject[] = new Array<KeyObject>(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, count) }, async () => {
      for (let i = next++; i < count; i = next++) rsa[i] = (await rsaKeyPair("rsa", { modulusLength: 2048 })).privateKey;
    }),
  );
  const extends_ = [...boot.extends()];
  const eventLog = boot.bytes();
  return Array.from({ length: count }, (_, i) => {
    const tpm = new SoftwareTpm({ manufacturer: maker, ekKeys: { rsa: rsa[i] as KeyObject, ecc: generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey } });
    for (const e of extends_) tpm.extend(e.pcr, e.digests);
    const f = nodeFacts(i);
    const name = machineName(i);
    return {
      index: i,
      name,
      tpm,
      claims: { serial: f.serial, uuid: f.uuid, macs: [f.mac], lldp: { chassisId: "tor-a1", portId: f.port }, mode: "intake", workflow: `enrollment-${f.mac.replace(/:/g, "")}` },
      eventLog,
      sessions: Array.from({ length: sessions }, () => ({ ak: softwareKey(akTemplate("ecc")), ldevid: softwareKey(ldevidTemplate("ecc")), lak: softwareKey(lakTemplate("ecc")) })),
    };
  });
}

/** The node fleetd reads from NetBox for machine `m` (the memory inventory's copy), device ID `deviceId`. */
export function memoryNode(m: SoftMachine, deviceId: number): Node {
  const f = nodeFacts(m.index);
  return {
    deviceId,
    name: m.name,
    serial: f.serial,
    class: "talos",
    role: "worker",
    tpm: "2.0",
    ekBindings: [
      { binding: m.tpm.eks.rsa.binding, alg: "rsa", chain: true },
      { binding: m.tpm.eks.ecc.binding, alg: "ecc", chain: true },
    ],
    status: "planned",
    desiredAction: null,
    macs: [],
    switchPort: { device: "tor-a1", port: f.port },
    unattributed: [],
    switchPortWaived: false,
    address: f.cidr,
    gateway: f.gateway,
    installDisk: "/dev/nvme0n1",
  };
}

/** Machine `m`'s node in a nodes file (a copy of the example rack's worker-1 with its own facts and EKs). */
export function nodesFileNode(m: SoftMachine, worker1: Record<string, unknown>): Record<string, unknown> {
  const f = nodeFacts(m.index);
  return {
    ...structuredClone(worker1),
    serial: f.serial,
    switch: { device: "tor-a1", port: f.port },
    address: { cidr: f.cidr, gateway: f.gateway },
    bmc: { type: "redfish", address: f.bmc, credentials: `secret:tinkerbell/fleetd-bmc-${m.name}` },
    ek: [
      { alg: "rsa", sha256: m.tpm.eks.rsa.binding },
      { alg: "ecc", sha256: m.tpm.eks.ecc.binding },
    ],
  };
}

/** What one attestation came to: the time inside the three HTTP calls, and a verdict or a refusal. */
export interface AttestationRun {
  serverMs: number;
  /** Start of the challenge to the confirm's answer (machine work included). */
  totalMs: number;
  outcome: "attested" | "refused";
  /** For a refusal: `step status error: check` of the answer. */
  reason?: string;
  /** 503s answered (or requests lost on the way) and retried. */
  retries: number;
  /** Why each retry happened: `step: reason` (the refusal's reason, or `transport` for a lost request). */
  retryReasons: string[];
}

/** One attestation of `m` with session keys `k` against `server` (the real protocol; a 503 retried until `deadline`). */
export async function attestSoft(m: SoftMachine, k: SessionKeys, server: ServerTransport, deadline: number): Promise<AttestationRun> {
  let serverMs = 0;
  let retries = 0;
  const retryReasons: string[] = [];
  const timed: ServerTransport = {
    async post(path, body) {
      const t = performance.now();
      try {
        return await server.post(path, body);
      } finally {
        serverMs += performance.now() - t;
      }
    },
  };
  const retry: RetryUnavailable = { deadline, delayMs: (n) => backoffDelayMs(n, Math.random()), onRetry: (step, refusal) => {
    retries++;
    retryReasons.push(`${step}: ${refusal.reason ?? refusal.reasons?.[0]?.check ?? refusal.error}`);
  } };
  const t0 = performance.now();
  try {
    const eks = [m.tpm.eks.rsa, m.tpm.eks.ecc];
    const ch = await postStep<ChallengeResponse>(timed, ATTEST_PATHS.challenge, "challenge", {
      claims: m.claims,
      eks: eks.map((e) => ({ public: b64(tpm2b(e.publicBytes)), ...(e.certificate ? { certificate: b64(e.certificate) } : {}) })),
      akPublic: b64(tpm2b(k.ak.publicBytes)),
    }, retry);
    const nonce = unb64(ch.nonce);
    const sessionId = ch.sessionId;
    const secrets = ch.credentials.map((cred) => {
      const ek = eks.find((e) => e.binding === cred.ekBinding);
      if (!ek) throw new Error(`the server asked for EK ${cred.ekBinding}, which ${m.name} did not present`);
      return b64(m.tpm.activateCredential(ek, k.ak.name, unb64(cred.idObject), unb64(cred.encryptedSecret)));
    });
    const q = m.tpm.quote(k.ak, DEFAULT_QUOTE_SELECTION, quoteExtraData(nonce, sessionId, claimsHash(m.claims)));
    const certified = (key: SoftwareKey, what: "ldevid" | "lak") => {
      const c = m.tpm.certify(k.ak, key, certifyExtraData(what, nonce, sessionId));
      return { public: b64(key.publicBytes), private: b64(key.private), certifyInfo: b64(c.attestBytes), signature: b64(c.signatureBytes) };
    };
    const body: EvidenceWire = {
      sessionId,
      secrets,
      quote: { message: b64(q.attestBytes), signature: b64(q.signatureBytes), pcrs: m.tpm.pcrWire(DEFAULT_QUOTE_SELECTION) },
      eventLog: b64(m.eventLog),
      ldevid: certified(k.ldevid, "ldevid"),
      lak: certified(k.lak, "lak"),
    };
    const accepted = await postStep<EvidenceResponse>(timed, ATTEST_PATHS.evidence, "evidence", body, retry);
    if (accepted.issued !== "new") return { serverMs, totalMs: performance.now() - t0, outcome: "refused", reason: `evidence: issued ${accepted.issued}, nothing to confirm`, retries, retryReasons };
    const signature = m.tpm.sign(k.ldevid, confirmMessage(sessionId, unb64(accepted.ldevidCertificate), unb64(accepted.lakCertificate)));
    await postStep<ConfirmResponse>(timed, ATTEST_PATHS.confirm, "confirm", { sessionId, signature: b64(signature) }, retry);
    return { serverMs, totalMs: performance.now() - t0, outcome: "attested", retries, retryReasons };
  } catch (e) {
    if (!(e instanceof AttestationRefused)) throw e;
    const why = `${e.step} ${e.status} ${e.refusal.error}: ${(e.refusal.reasons ?? []).map((r) => r.check).join(", ")}`;
    return { serverMs, totalMs: performance.now() - t0, outcome: "refused", reason: why, retries, retryReasons };
  }
}

/** A transport to `baseUrl` over fetch (keep-alive connections of Node's global agent). */
export function httpTransport(baseUrl: string): ServerTransport {
  return {
    async post(path, body) {
      const r = await fetch(baseUrl + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    },
  };
}

export function pct(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? NaN;
}
