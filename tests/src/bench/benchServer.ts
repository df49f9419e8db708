/**
 * The attestation server of the concurrency and storm benchmarks, in a process of its own (so that its RSS and
 * CPU are the server's alone): talos-config-server's app over the AttestationService, wired as the attestation
 * world wires it (tests/src/attestation/world.ts attestationServer: the tests' settings, a SQLite state file, the
 * outbox worker started, the CA key on a SoftHSM2 token behind PKCS#11 with its signing queue, JournalOnlyAdmission)
 * with one of two inventories:
 *   - "netbox": NetBoxInventory and NetBoxOutboxDelivery over a real NetBox (the attestation account's token);
 *   - "memory": MemoryInventory, MemoryJournal and MemoryOutboxDelivery (@fleetd/testkit/memoryAdapters) holding
 *     the nodes it is given — the same server with NetBox taken out, to show what NetBox costs.
 * Both trust the software manufacturer's EK CA only and accept every claimed Workflow (AcceptingWorkflowGate: no
 * Tinkerbell cluster in the benchmark; the real gate reads one Workflow per challenge).
 *
 *   node tests/dist/bench/benchServer.js CONFIG.json     (started by concurrency.ts; prints `READY {json}`)
 *
 * Besides the protocol it answers, on the same loopback port, the benchmark's own questions (nothing a real
 * server has): GET /bench/stats (signatures and the signing queue's figures, CPU), POST /bench/drain (waits until
 * the outbox is empty), POST /bench/audit {deviceIds} (per device: issued LDevID/LAK records, journal entries of
 * the memory journal, the inventory's status).
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { z } from "zod";
import { caStoreFrom } from "@fleetd/verify/ek";
import { parseCertificate } from "@fleetd/verify/x509";
import { createNetBox, NetBoxInventory, NetBoxOutboxDelivery } from "@fleetd/platform/netbox";
import { OutboxWorker } from "@fleetd/platform/outbox";
import { PolicyMeasuredBoot } from "@fleetd/platform/protocol/server";
import { JournalOnlyAdmission, type BootstrapTokens, type Inventory, type Journal, type Node } from "@fleetd/platform/fleet";
import { siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { AcceptingWorkflowGate, bundleInMemoryIssuer, countingSigner, MemoryInventory, MemoryJournal, MemoryOutboxDelivery } from "@fleetd/testkit/memoryAdapters";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { CountingStore, testAttestationService, testConfigApp } from "../attestation/testServer.js";
import { createSoftHsmCa, startSoftHsm } from "../harness/softhsm.js";

export const BenchServerConfig = z.object({
  mode: z.enum(["netbox", "memory"]),
  dir: z.string(),
  talosVersion: z.string(),
  /** The software manufacturer's EK CA certificate (DER, hex): the server's only EK root. */
  ekCaDer: z.string().regex(/^[0-9a-f]+$/),
  siteAuthoritiesDir: z.string(),
  netbox: z.object({ url: z.string().url(), token: z.string(), applyAccount: z.string(), attestationAccount: z.string() }).optional(),
  /** The nodes of the memory inventory (NetBox's devices as fleetd reads them). */
  nodes: z.array(z.unknown()).optional(),
});
export type BenchServerConfig = z.infer<typeof BenchServerConfig>;

/** What GET /bench/stats answers. */
export interface BenchServerStats {
  signatures: number;
  /** The PKCS#11 signing queue: signatures made, the most ever inside the token at once, time inside the token. */
  sign: { count: number; maxInside: number; insideMs: number };
  cpu: { userMs: number; systemMs: number };
  rssBytes: number;
  /** process.memoryUsage() now: V8 heap used and total, external (Buffers), bytes. */
  heap: { used: number; total: number; external: number };
}

/** What POST /bench/audit answers, per device ID. */
export interface DeviceAudit {
  ldevid: number;
  lak: number;
  voided: number;
  /** Entries of the memory journal (netbox mode: -1, read NetBox instead). */
  journal: number;
  status: string | undefined;
}

async function main(): Promise<void> {
  const file = process.argv[2];
  if (!file) throw new Error("usage: benchServer.js CONFIG.json");
  const cfg = BenchServerConfig.parse(JSON.parse(readFileSync(file, "utf8")));
  const log = pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" });
  const hsm = await startSoftHsm([{ label: "fleetd-ca", pin: "123456", soPin: "12345678", keys: [{ label: "ca", id: "01", type: "ec-p256" }] }]);
  // the signing queue, observed from inside: a second signature inside the token at once would show here
  const sign = { count: 0, inside: 0, maxInside: 0, insideMs: 0, since: 0 };
  const { signer, ca } = await createSoftHsmCa(hsm, {
    token: "fleetd-ca", key: "ca", commonName: "fleetd bench CA", notBefore: new Date(Date.now() - 3600_000), lifetimeDays: 365,
    signerOptions: {
      observe: {
        signStart() {
          sign.inside++;
          sign.maxInside = Math.max(sign.maxInside, sign.inside);
          sign.since = performance.now();
        },
        signEnd() {
          sign.inside--;
          sign.count++;
          sign.insideMs += performance.now() - sign.since;
        },
      },
    },
  });
  const counted = countingSigner(signer);
  const now = () => new Date();
  const store = new CountingStore(join(cfg.dir, "state.db"));
  const bootstrapTokens: BootstrapTokens = { create: async () => undefined, delete: async () => true };
  let inventory: Inventory;
  let journal: Journal;
  let memory: { inventory: MemoryInventory; journal: MemoryJournal } | undefined;
  let delivery;
  if (cfg.mode === "netbox") {
    const n = cfg.netbox;
    if (!n) throw new Error("netbox mode needs `netbox`");
    const nb = createNetBox({ url: n.url, token: n.token });
    const inv = new NetBoxInventory(nb, { applyAccount: n.applyAccount, attestationAccount: n.attestationAccount, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
    inventory = inv;
    journal = inv;
    delivery = new NetBoxOutboxDelivery({ nb, inventory: inv, bootstrapTokens, store });
  } else {
    const inv = new MemoryInventory();
    for (const node of cfg.nodes ?? []) inv.put(node as Node);
    const j = new MemoryJournal(inv);
    memory = { inventory: inv, journal: j };
    inventory = inv;
    journal = j;
    delivery = new MemoryOutboxDelivery({ inventory: inv, journal: j, bootstrapTokens });
  }
  const metrics = createMetrics();
  const outbox = new OutboxWorker({ store, delivery, log, onDelivery: (kind, outcome) => metrics.outboxDeliveries.inc({ kind, outcome }), intervalMs: 200, staleMs: 60_000 });
  outbox.start();
  const ekCa = new Uint8Array(Buffer.from(cfg.ekCaDer, "hex"));
  const service = testAttestationService(
    {
      store,
      inventory,
      journal,
      measuredBoot: new PolicyMeasuredBoot(cfg.siteAuthoritiesDir),
      issuer: bundleInMemoryIssuer({ signer: counted.signer, caPem: ca.pem, now }),
      bootstrapTokens,
      admission: new JournalOnlyAdmission(journal, "the benchmark has no Tinkerbell effects"),
      workflows: new AcceptingWorkflowGate(),
      ekRoots: caStoreFrom([{ cert: parseCertificate(ekCa), source: "bench-ek-ca.der" }]),
      outbox,
      now,
    },
    siteConfigFixture(cfg.talosVersion),
    { maxPendingEks: 1000 },
  );
  const app = testConfigApp({ service, store, inventory, log, metrics, outbox, limits: { attestRequestsPerMinute: 100_000 } });

  const json = (res: ServerResponse, body: unknown): void => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };
  const readBody = async (req: IncomingMessage): Promise<unknown> => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    return JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
  };
  const bench = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.url === "/bench/stats") {
      const u = process.cpuUsage();
      json(res, { signatures: counted.signatures(), sign: { count: sign.count, maxInside: sign.maxInside, insideMs: sign.insideMs }, cpu: { userMs: u.user / 1000, systemMs: u.system / 1000 }, rssBytes: process.memoryUsage.rss(), heap: (({ heapUsed, heapTotal, external }) => ({ used: heapUsed, total: heapTotal, external }))(process.memoryUsage()) } satisfies BenchServerStats);
    } else if (req.url === "/bench/drain") {
      const deadline = Date.now() + 600_000;
      while ((await store.listOutbox()).length > 0) {
        if (Date.now() > deadline) throw new Error("the outbox did not drain in 10 min");
        outbox.kick();
        await new Promise((r) => setTimeout(r, 100));
      }
      json(res, { drained: true });
    } else if (req.url === "/bench/audit") {
      const { deviceIds } = z.object({ deviceIds: z.array(z.number().int()) }).parse(await readBody(req));
      const out: Record<number, DeviceAudit> = {};
      for (const id of deviceIds) {
        const issued = await store.listIssued(id);
        const valid = issued.filter((c) => !c.voided);
        out[id] = {
          ldevid: valid.filter((c) => c.kind === "ldevid").length,
          lak: valid.filter((c) => c.kind === "lak").length,
          voided: issued.length - valid.length,
          journal: memory ? memory.journal.of(id).length : -1,
          status: memory?.inventory.get(id)?.status,
        };
      }
      json(res, out);
    } else {
      res.writeHead(404).end();
    }
  };
  const server = createServer((req, res) => {
    if (req.url?.startsWith("/bench/")) {
      bench(req, res).catch((e: unknown) => {
        res.writeHead(500, { "content-type": "text/plain" });
        res.end(String(e));
      });
    } else {
      app(req, res);
    }
  });
  // many machines at once: no connection is refused by a short listen backlog
  await new Promise<void>((res) => server.listen({ port: 0, host: "127.0.0.1", backlog: 4096 }, res));
  const port = (server.address() as { port: number }).port;
  const stop = async (): Promise<void> => {
    await new Promise<void>((res) => server.close(() => res()));
    await outbox.stop();
    await signer.close();
    await store.close();
    hsm.close();
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop());
  process.stdout.write(`READY ${JSON.stringify({ url: `http://127.0.0.1:${port}`, caPem: ca.pem, pid: process.pid })}\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`benchServer: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
