/**
 * `fleetd pending [--config FILE] [--json]` — machines whose EKs no node approves: what their challenges
 * claimed (serial, MACs), where they came from, when and how often. Read from talos-config-server's state
 * state (`server.stateDb` of the same configuration file, or with `server.ha` the Kubernetes-backed state in
 * `server.ha.namespace` through `server.ha.kubeconfig`). Claims are unproven; approve an EK by putting
 * its binding into the nodes file and running `inventory apply`, never from this list alone.
 */
import { safeLine } from "@fleetd/verify/text";
import { existsSync } from "node:fs";
import { z } from "zod";
import { ConfigError, readConfigFile } from "@fleetd/platform/fleet";
import { KubeAttestationStore, SqliteAttestationStore, type AttestationStore, type PendingEk } from "@fleetd/platform/state";
import { type CliCommand, EXIT, parseOptions, printJson } from "@fleetd/platform/cmd";
import { kubeOption } from "./kubeInput.js";

/** Only where the state is; the rest of the `server` section is talos-config-server's to validate. */
const StatePath = z
  .object({
    server: z
      .object({
        stateDb: z.string().min(1, "must be a path").optional(),
        ha: z.object({ kubeconfig: z.string().min(1).default("in-cluster"), namespace: z.string().min(1) }).loose().optional(),
      })
      .loose()
      .refine((s) => s.stateDb !== undefined || s.ha !== undefined, { message: "needs stateDb (or ha.namespace)", path: ["stateDb"] }),
  })
  .loose();

export type StateSource = { kind: "sqlite"; path: string } | { kind: "kubernetes"; kubeconfig: string; namespace: string };

export interface PendingRow {
  ekBinding: string;
  serial: string;
  macs: string[];
  sourceAddress: string;
  firstSeen: string;
  lastSeen: string;
  count: number;
}

export function stateSource(path: string | undefined, env: NodeJS.ProcessEnv = process.env): StateSource {
  const f = readConfigFile(path, env);
  const r = StatePath.safeParse(f.raw);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new ConfigError(`${f.path}: ${i ? `${i.path.map(String).join(".") || "(root)"}: ${i.message}` : "invalid"} (the state database of talos-config-server)`);
  }
  const { ha, stateDb } = r.data.server;
  return ha ? { kind: "kubernetes", kubeconfig: ha.kubeconfig, namespace: ha.namespace } : { kind: "sqlite", path: stateDb ?? "" };
}

function openStore(src: StateSource): AttestationStore {
  if (src.kind === "kubernetes") return new KubeAttestationStore({ kube: kubeOption(src.kubeconfig, "server.ha.kubeconfig"), namespace: src.namespace });
  if (!existsSync(src.path)) throw new ConfigError(`no state database at ${src.path} (has talos-config-server run with this configuration?)`);
  return new SqliteAttestationStore(src.path);
}

export async function listPending(src: StateSource): Promise<PendingRow[]> {
  const store = openStore(src);
  try {
    return (await store.listPendingEks()).map(toRow);
  } finally {
    await store.close();
  }
}

const toRow = (p: PendingEk): PendingRow => ({
  ekBinding: p.binding,
  serial: p.serial,
  macs: p.macs,
  sourceAddress: p.sourceAddress,
  firstSeen: new Date(p.firstSeen).toISOString(),
  lastSeen: new Date(p.lastSeen).toISOString(),
  count: p.count,
});

export function renderPending(rows: PendingRow[]): string {
  if (rows.length === 0) return "no pending EKs";
  const head = ["EK BINDING", "CLAIMED SERIAL", "CLAIMED MACS", "SOURCE", "FIRST SEEN", "LAST SEEN", "COUNT"];
  // Serial, MACs and address are the caller's (schema-checked, but an operator's terminal is no place for their
  // control characters): every cell goes through safeLine, so no ANSI/OSC sequence or fake row reaches it.
  const body = rows.map((r) => [r.ekBinding, r.serial, r.macs.join(","), r.sourceAddress, r.firstSeen, r.lastSeen, String(r.count)].map((c) => safeLine(c, 100)));
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join("  ");
  return [line(head), ...body.map(line), `${rows.length} pending EK${rows.length === 1 ? "" : "s"} (claims are unproven)`].join("\n");
}

export const command: CliCommand = {
  usage: "[--config FLEETD_CONFIG] [--json]",
  async run(args) {
    const { values } = parseOptions(args, { config: { type: "string" }, json: { type: "boolean" } });
    const rows = await listPending(stateSource(typeof values["config"] === "string" ? values["config"] : undefined));
    if (values["json"] === true) printJson({ pending: rows });
    else process.stdout.write(`${renderPending(rows)}\n`);
    return EXIT.ok;
  },
};
