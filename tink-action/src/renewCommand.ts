/**
 * `fleetd-tink-action renew` — the node agent on Talos (a DaemonSet container next to spire-agent; manifests/
 * renew-daemonset.yaml). It copies the seed Talos wrote into the devid directory once, runs a runtime attestation
 * at every start, renews the LDevID/LAK certificates at two thirds of their lifetime, swaps the files atomically,
 * restarts spire-agent so it loads the renewed LDevID (spire-plugin's sync then makes it attest with it), and reports its own verdict (status file, /readyz).
 * See devidStore.ts (files), renewSchedule.ts (when and the verdict), spireSignal.ts (the restart), README "renew".
 *
 * Modes: (default) run until SIGTERM/SIGINT; `--once`: seed, one attempt, exit; `--seed-only`: seed and check the
 * devid directory, exit (the DaemonSet's init container, so spire-agent starts with files in place).
 *
 * Exit codes (fleetd's one table, `EXIT`):
 *   0 ok: stopped by SIGTERM/SIGINT (running), the attempt passed (--once), the directory is ready (--seed-only);
 *   1 refused: --once only, the server refused the runtime attestation (403);
 *   2 usage: configuration (the variable or flag is named), the seed is missing or invalid with no generation in
 *     the devid directory, the devid directory is corrupt or holds another node;
 *   4 internal: an unexpected failure;
 *   5 unavailable: --once only, the attempt failed otherwise (server outage past FLEETD_RENEW_OUTAGE_SECONDS,
 *     network, TLS, TPM, event log).
 * Running, failures never end the process: they are retried with backoff (renewSchedule.ts) and reported.
 */
import pino, { type Logger } from "pino";
import { type CliCommand, EXIT, type ExitCode, parseOptions } from "@fleetd/platform/cmd";
import { runtimeAttest, type RuntimeAttestResult } from "@fleetd/platform/protocol/client";
import type { RenewPurpose } from "@fleetd/platform/protocol";
import { backoffDelayMs } from "@fleetd/platform/outage";
import { ActionConfigError } from "./config.js";
import { readEventLogFile } from "./eventLog.js";
import { serverTransport } from "./serverTransport.js";
import { describeTpm, openTpm, resolveTpm } from "./tpm.js";
import { RenewAgent, type AgentDeps, type AttestHooks } from "./renewAgent.js";
import { loadRenewConfig, RENEW_FLAGS, type RenewConfig } from "./renewConfig.js";
import { type DevidSet, DevidStoreError, keyAlgOf, keyBlobs } from "./devidStore.js";
import { signalSpireAgent } from "./spireSignal.js";
import { type AgentStatus, startHealthServer } from "./renewStatus.js";

export function renewLogger(level: string): Logger {
  return pino({ level, base: { action: "fleetd-renew" }, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ fd: 2, sync: true }));
}

/** Sleeps `ms` in steps of at most an hour (timers cap at 2^31 ms), ending early on abort. */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const end = Date.now() + ms;
    let timer: NodeJS.Timeout;
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const tick = () => {
      const left = end - Date.now();
      if (left <= 0) return done();
      timer = setTimeout(tick, Math.min(left, 3_600_000));
    };
    signal.addEventListener("abort", done, { once: true });
    tick();
  });
}

/** The real protocol run: the event log, the TPM, and protocol/client `runtimeAttest` against the server. */
export function serverAttest(cfg: RenewConfig, log: Logger): AgentDeps["attest"] {
  const server = serverTransport(cfg.server, cfg.ca ? { ca: cfg.ca } : {});
  return async (purpose: RenewPurpose, current: DevidSet, hooks?: AttestHooks): Promise<RuntimeAttestResult> => {
    const eventLog = readEventLogFile(cfg.eventLog);
    const tpm = openTpm(resolveTpm(cfg.tpm));
    try {
      return await runtimeAttest({
        tpm,
        server,
        purpose,
        eventLog,
        keyAlg: keyAlgOf(current),
        ldevid: { certificate: current.ldevidCertificate, blobs: keyBlobs(current.ldevidPublic, current.ldevidPrivate) },
        lak: { certificate: current.lakCertificate, blobs: keyBlobs(current.lakPublic, current.lakPrivate) },
        ...(hooks?.beforeConfirm ? { beforeConfirm: hooks.beforeConfirm } : {}),
        retryUnavailable: {
          // the client compares with the real clock (a test's clock offset does not stretch the budget)
          deadline: Date.now() + cfg.outageBudgetMs,
          delayMs: (n) => backoffDelayMs(n, Math.random()),
          onRetry: (step, refusal, n, waitMs) =>
            log.warn({ step, attempt: n, reason: refusal.reason ?? null, retryInSeconds: Math.round(waitMs / 100) / 10 }, `${step}: the server's ${refusal.reason ?? "dependency"} is down; retrying the same request`),
        },
      });
    } finally {
      await tpm.close().catch(() => undefined);
    }
  };
}

export interface RenewRunOptions {
  once?: boolean;
  seedOnly?: boolean;
  /** Stops the loop (the command wires SIGTERM/SIGINT). */
  stop?: AbortSignal;
  /** Tests: another clock (the server's test clock), another protocol run. */
  deps?: Partial<AgentDeps>;
  log?: Logger;
}

/** Runs the agent with a checked configuration; returns the exit code. */
export async function runRenew(cfg: RenewConfig, opts: RenewRunOptions = {}): Promise<ExitCode> {
  const log = opts.log ?? renewLogger(cfg.logLevel);
  const now = opts.deps?.now ?? (() => new Date());
  let latest: AgentStatus | undefined;
  const deps: AgentDeps = {
    log,
    now,
    sleep: abortableSleep,
    random: Math.random,
    attest: serverAttest(cfg, log),
    signalSpire: () => signalSpireAgent(cfg.spireSignal),
    ...opts.deps,
    onStatus: (s) => {
      latest = s;
      opts.deps?.onStatus?.(s);
    },
  };
  const agent = new RenewAgent(
    { seedDir: cfg.seedDir, devidDir: cfg.devidDir, statusFile: cfg.statusFile, failuresForVerdict: cfg.failuresForVerdict, backoff: cfg.backoff },
    deps,
  );
  log.info(
    {
      server: cfg.server.origin,
      tpm: describeTpm(cfg.tpm),
      seedDir: cfg.seedDir,
      devidDir: cfg.devidDir,
      eventLog: cfg.eventLog,
      failuresForVerdict: cfg.failuresForVerdict,
      backoffSeconds: { base: cfg.backoff.baseMs / 1000, cap: cfg.backoff.capMs / 1000 },
      spireSignal: cfg.spireSignal,
      mode: opts.seedOnly ? "seed-only" : opts.once ? "once" : "run",
    },
    "renew: starting",
  );
  const health = cfg.healthPort !== undefined && !opts.seedOnly && !opts.once ? await startHealthServer(cfg.healthPort, () => latest) : undefined;
  try {
    if (opts.seedOnly) {
      agent.prepare();
      return EXIT.ok;
    }
    const last = await agent.run(opts.stop ?? new AbortController().signal, opts.once ?? false);
    if (!opts.once) {
      log.info({}, "renew: stopped");
      return EXIT.ok;
    }
    return last?.kind === "pass" ? EXIT.ok : last?.kind === "refused" ? EXIT.refused : EXIT.unavailable;
  } catch (e) {
    if (e instanceof DevidStoreError) {
      log.error({ code: e.code, path: e.path }, e.message);
      return EXIT.usage;
    }
    log.error({ code: "internal", err: e instanceof Error ? { name: e.name, message: e.message, stack: e.stack } : String(e) }, "unexpected failure");
    return EXIT.internal;
  } finally {
    await new Promise<void>((r) => (health ? health.close(() => r()) : r()));
  }
}

const OPTIONS = {
  ...(Object.fromEntries(Object.keys(RENEW_FLAGS).map((k) => [k, { type: "string" as const }])) as Record<keyof typeof RENEW_FLAGS, { type: "string" }>),
  once: { type: "boolean" as const },
  "seed-only": { type: "boolean" as const },
};

export const command: CliCommand = {
  usage:
    "[--once | --seed-only] [--server URL] [--server-ca PEM|FILE] [--seed DIR] [--devid DIR] [--tpm SPEC] [--event-log FILE] [--failures N] [--spire-signal none|process:NAME|pidfile:PATH] [--status-file FILE] [--health-port N|off]\n" +
    "  (each flag overrides its FLEETD_* variable: FLEETD_SERVER, FLEETD_SERVER_CA, FLEETD_SEED_DIR (/var/lib/fleetd/seed), FLEETD_DEVID_DIR\n" +
    "  (/var/lib/fleetd/devid), FLEETD_TPM (/dev/tpmrm0), FLEETD_EVENT_LOG, FLEETD_RENEW_FAILURES (3), FLEETD_SPIRE_SIGNAL (none),\n" +
    "  FLEETD_STATUS_FILE, FLEETD_HEALTH_PORT (off); also FLEETD_RENEW_BACKOFF_BASE_SECONDS (30), FLEETD_RENEW_BACKOFF_CAP_SECONDS (3600),\n" +
    "  FLEETD_RENEW_OUTAGE_SECONDS (300), FLEETD_LOG_LEVEL; see the README)",
  async run(args) {
    const { values } = parseOptions(args, OPTIONS);
    const flags = Object.fromEntries(Object.keys(RENEW_FLAGS).flatMap((k) => (typeof values[k] === "string" ? [[k, values[k]]] : []))) as Partial<Record<keyof typeof RENEW_FLAGS, string>>;
    let cfg: RenewConfig;
    try {
      cfg = loadRenewConfig(process.env, flags);
    } catch (e) {
      if (!(e instanceof ActionConfigError)) throw e;
      renewLogger("info").error({ code: "config", issues: e.issues }, e.message);
      return EXIT.usage;
    }
    if (values["once"] && values["seed-only"]) {
      renewLogger("info").error({ code: "config" }, "--once and --seed-only exclude each other");
      return EXIT.usage;
    }
    const stop = new AbortController();
    const onSignal = (sig: NodeJS.Signals) => {
      renewLogger(cfg.logLevel).info({ signal: sig }, "renew: stopping");
      stop.abort();
    };
    process.once("SIGTERM", onSignal);
    process.once("SIGINT", onSignal);
    try {
      return await runRenew(cfg, { once: values["once"] === true, seedOnly: values["seed-only"] === true, stop: stop.signal });
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    }
  },
};
