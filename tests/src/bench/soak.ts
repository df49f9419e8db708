/**
 * `pnpm -s soak` — a power-on storm through NetBox outages: N machines (default 200, FLEETD_SOAK_MACHINES), each
 * with its own swtpm TPM whose EKs a node of the nodes file approves, run intake against the attestation world's
 * server (real NetBox, SoftHSM2 CA, SQLite state, the outbox) CONCURRENCY at a time (FLEETD_SOAK_CONCURRENCY,
 * default 8), while NetBox's web server is stopped and started again three times (FLEETD_SOAK_RESTARTS) at even
 * points of the run. The machines use fleetd's client with the same-request retry of a 503 and of a lost
 * connection, within a deadline.
 *
 * Prints completed / retried / lost (a machine that did not complete its intake within its deadline is lost), and
 * then checks NetBox against what the machines hold: every node has one verdict (pass) naming the LDevID its
 * machine holds, one "TPM evidence passed" journal entry, and the outbox is empty. Exits 1 if anything was lost
 * or a check fails.
 */
import { X509Certificate } from "node:crypto";
import { readDevice, readJournal } from "@fleetd/platform/netbox";
import { attest, type ServerTransport } from "@fleetd/platform/protocol/client";
import { NODE, startWorld, type MachineSpec, type WorldMachine } from "../attestation/world.js";
import { TALOS_VERSION } from "../talos/goTools.js";

const int = (name: string, dflt: number) => {
  const v = Number(process.env[name] ?? dflt);
  return Number.isInteger(v) && v > 0 ? v : dflt;
};
const N = int("FLEETD_SOAK_MACHINES", 200);
const CONCURRENCY = int("FLEETD_SOAK_CONCURRENCY", 8);
const RESTARTS = int("FLEETD_SOAK_RESTARTS", 3);
const DEADLINE_MS = int("FLEETD_SOAK_DEADLINE_SECONDS", 1800) * 1000;

const say = (s: string) => process.stderr.write(`[soak] ${s}\n`);

interface Outcome {
  node: string;
  ok: boolean;
  retries: number;
  error?: string;
  ldevidSerial?: string;
}

async function intake(m: WorldMachine, transport: ServerTransport): Promise<Outcome> {
  let retries = 0;
  const tpm = m.client();
  try {
    const r = await attest({
      tpm,
      server: transport,
      claims: m.claims({ mode: "intake" }),
      eventLog: m.eventLog,
      retryUnavailable: {
        deadline: Date.now() + DEADLINE_MS,
        delayMs: (attempt) => Math.min(5000, 250 * 2 ** Math.min(attempt, 5)) * (0.5 + Math.random() / 2),
        onRetry: () => void retries++,
      },
    });
    const cert = r.issued ? new X509Certificate(Buffer.from(r.issued.ldevid.certificate)) : undefined;
    return { node: m.node, ok: r.mode === "intake", retries, ...(cert ? { ldevidSerial: cert.serialNumber.toLowerCase().replace(/^0+/, "") } : {}) };
  } catch (e) {
    return { node: m.node, ok: false, retries, error: (e as Error).message };
  } finally {
    await tpm.close();
  }
}

const started = Date.now();
const seconds = () => ((Date.now() - started) / 1000).toFixed(0);
say(`starting the world with ${N} machines (a swtpm each; the nodes applied to NetBox)…`);
const machines: Record<string, MachineSpec> = Object.fromEntries(Array.from({ length: N - 1 }, (_, i) => [`soak-${String(i + 1).padStart(3, "0")}`, {}]));
const w = await startWorld({ talosVersion: TALOS_VERSION, machines });
let exit = 0;
try {
  const names = [NODE, ...Object.keys(machines)];
  say(`world up in ${seconds()} s; ${names.length} machines, ${CONCURRENCY} at a time, NetBox restarted ${RESTARTS} times`);
  const outcomes: Outcome[] = [];
  const restartAt = Array.from({ length: RESTARTS }, (_, i) => Math.floor(((i + 1) * names.length) / (RESTARTS + 1)));
  let restarts = 0;
  let restarting: Promise<void> | undefined;
  const runStart = Date.now();
  let next = 0;
  const workers = Array.from({ length: CONCURRENCY }, async () => {
    for (;;) {
      const i = next++;
      if (i >= names.length) return;
      const m = w.machines[names[i] as string] as WorldMachine;
      outcomes.push(await intake(m, w.transport));
      const done = outcomes.length;
      if (done % 20 === 0 || done === names.length) say(`${done}/${names.length} done (${outcomes.filter((o) => !o.ok).length} lost so far), ${seconds()} s`);
      if (restarting === undefined && restarts < RESTARTS && done >= (restartAt[restarts] ?? Infinity)) {
        restarts++;
        const n = restarts;
        restarting = (async () => {
          say(`NetBox restart ${n}: web server stopped at ${done} done`);
          const t = Date.now();
          await w.fleet.nb.stopWeb();
          await w.fleet.nb.startWeb();
          say(`NetBox restart ${n}: back after ${((Date.now() - t) / 1000).toFixed(1)} s`);
        })().finally(() => {
          restarting = undefined;
        });
      }
    }
  });
  await Promise.all(workers);
  await restarting;
  const runSeconds = (Date.now() - runStart) / 1000;

  // NetBox against what the machines hold, once the outbox has delivered everything
  say("waiting for the outbox to deliver everything…");
  for (let i = 0; i < 600 && (await w.store.listOutbox()).length > 0; i++) {
    w.outbox.kick();
    await new Promise((r) => setTimeout(r, 1000));
  }
  const left = (await w.store.listOutbox()).length;
  const problems: string[] = [];
  for (const o of outcomes.filter((x) => x.ok)) {
    const id = await w.deviceId(o.node);
    const { device } = await readDevice(w.admin, id);
    if (device.cf["attestation_verdict"] !== "pass") problems.push(`${o.node}: verdict ${String(device.cf["attestation_verdict"])}`);
    if (o.ldevidSerial && String(device.cf["ldevid_serial"]).replace(/^0+/, "") !== o.ldevidSerial) problems.push(`${o.node}: NetBox names LDevID ${String(device.cf["ldevid_serial"])}, the machine holds ${o.ldevidSerial}`);
    const passes = (await readJournal(w.admin, id)).filter((j) => /intake: TPM evidence passed/.test(j.comments)).length;
    if (passes !== 1) problems.push(`${o.node}: ${passes} "TPM evidence passed" journal entries`);
  }
  if (left > 0) problems.push(`${left} outbox items undelivered`);
  const completed = outcomes.filter((o) => o.ok).length;
  const retried = outcomes.filter((o) => o.retries > 0).length;
  const lost = outcomes.filter((o) => !o.ok);
  const retries = outcomes.reduce((a, o) => a + o.retries, 0);
  console.log("");
  console.log(`machines ${names.length}   NetBox restarts ${restarts}   concurrency ${CONCURRENCY}`);
  console.log(`completed ${completed}   retried ${retried} (${retries} retries)   lost ${lost.length}`);
  console.log(`intakes in ${runSeconds.toFixed(1)} s (${(completed / runSeconds).toFixed(2)}/s through the outages)`);
  console.log(`NetBox afterwards: ${completed - problems.filter((p) => !p.includes("outbox")).length} nodes as their machines hold them, ${problems.length} problems, outbox left ${left}`);
  for (const l of lost.slice(0, 10)) console.log(`  lost ${l.node}: ${l.error}`);
  for (const p of problems.slice(0, 10)) console.log(`  problem ${p}`);
  if (lost.length > 0 || problems.length > 0) exit = 1;
} finally {
  await w.stop();
}
process.exit(exit);
