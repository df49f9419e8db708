/**
 * `fleetd-tink-action attest --mode intake|provision|attest|wipe` — the first action of every fleetd workflow.
 * Collects the claims (SMBIOS serial and UUID, MACs, LLDP on the boot interface), the event log, runs the
 * attestation protocol (shared/platform/src/protocol/client/attest.ts) against the server with the TPM, and leaves
 * the results on the shared volume (outputs.ts). Thin: each step is its own module.
 *
 * Exit codes, fleetd's one table (`EXIT`, @fleetd/platform/cmd; Tinkerbell stops the workflow at the first non-zero
 * action, so a refused machine keeps its disk):
 *   0 ok: attested; 1 refused by the server (or it confirmed another mode, or no install code in provision);
 *   2 usage: configuration or local input (environment, sysfs claims, event log); 3 pending: still pending when
 *   FLEETD_TIMEOUT_SECONDS ran out; 4 internal: unexpected failure (or the shared volume could not be written);
 *   5 unavailable: TPM or transport failure (TPM, network, TLS, a malformed answer, or the server's dependency still
 *   down — 503 `unavailable`, retried with the same request — when FLEETD_TIMEOUT_SECONDS ran out).
 */
import pino, { type Logger } from "pino";
import { type CliCommand, EXIT, type ExitCode, parseOptions, str } from "@fleetd/platform/cmd";
import { attest, AttestationRefused, type AttestResult, attest12 } from "@fleetd/platform/protocol/client";
import { Claims, type Mode, TPM12_MODES } from "@fleetd/platform/protocol";
import { backoffDelayMs } from "@fleetd/platform/outage";
import { bootInterface, bootMacOf, ClaimsError, collectHostClaims } from "./claims.js";
import { ActionConfigError, loadConfig, type AttestConfig, describeAuth, readTpm12Auth } from "./config.js";
import { EventLogError, readEventLog } from "./eventLog.js";
import type { LldpReading } from "./lldp/json0.js";
import { readLldp } from "./lldp/lldpd.js";
import { isTransport } from "./errorExits.js";
import { clearOutputs, writeFailure, writeSuccess } from "./outputs.js";
import { serverTransport } from "./serverTransport.js";
import { describeTpm, openRawTransport, openTpm, resolveTpm, tpmFamily } from "./tpm.js";
import { Tpm12Client, type TpmFamily } from "@fleetd/platform/tpm12client";
import { randomBytes } from "node:crypto";

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function logger(level: string): Logger {
  return pino({ level, base: { action: "fleetd-attest" }, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ fd: 2, sync: true }));
}


async function lldpClaim(cfg: AttestConfig, log: Logger, boot: ReturnType<typeof bootInterface>): Promise<LldpReading> {
  if (cfg.lldp === "off") return { lldp: null, reason: "LLDP disabled (FLEETD_LLDP=off)" };
  if (!boot) return { lldp: null, reason: "no boot interface found (set FLEETD_BOOT_INTERFACE)" };
  return readLldp({ iface: boot.name, waitMs: cfg.lldpWaitSeconds * 1000, onProgress: (m) => log.info(m) });
}

export async function runAttest(env: NodeJS.ProcessEnv, modeFlag?: string): Promise<ExitCode> {
  let log = logger(env["FLEETD_LOG_LEVEL"] && /^(fatal|error|warn|info|debug|trace|silent)$/.test(env["FLEETD_LOG_LEVEL"]) ? env["FLEETD_LOG_LEVEL"] : "info");
  let cfg: AttestConfig;
  try {
    if (modeFlag !== undefined && env["FLEETD_MODE"] && env["FLEETD_MODE"] !== modeFlag) {
      throw new ActionConfigError([`--mode ${modeFlag} contradicts FLEETD_MODE=${env["FLEETD_MODE"]}`]);
    }
    cfg = loadConfig({ ...env, ...(modeFlag !== undefined ? { FLEETD_MODE: modeFlag } : {}) });
  } catch (e) {
    if (e instanceof ActionConfigError) {
      log.error({ code: "config", issues: e.issues }, e.message);
      return EXIT.usage;
    }
    throw e;
  }
  log = logger(cfg.logLevel);
  const mode: Mode = cfg.mode;
  const fail = (verdict: "fail" | "pending" | "error", step: string, error: string, reasons: { check: string; detail: string }[] = [], attempts = 0) =>
    writeFailure(cfg.out, { mode, verdict, workflow: cfg.workflow, step, error, reasons, attempts });

  try {
    clearOutputs(cfg.out);
  } catch (e) {
    log.error({ code: "output", dir: cfg.out, err: (e as Error).message }, "cannot prepare the output directory");
    return EXIT.internal;
  }
  log.info({ mode, workflow: cfg.workflow, server: cfg.server.origin, tpm: describeTpm(cfg.tpm), out: cfg.out, timeoutSeconds: cfg.timeoutSeconds }, "attest: starting");

  // Claims and the event log: local input, read once.
  let claims: Claims;
  let eventLog: Uint8Array;
  try {
    const host = collectHostClaims(cfg.root);
    const boot = bootInterface(cfg.root, host.interfaces, cfg.bootInterface);
    const log0 = await readEventLog(cfg.root);
    eventLog = log0.bytes;
    if (log0.mounted) log.info({ path: log0.path }, "mounted securityfs for the event log");
    const lldp = await lldpClaim(cfg, log, boot);
    log.info({ bootInterface: boot ?? null, lldp: lldp.lldp }, lldp.reason);
    const bootMac = bootMacOf({ macs: host.macs.slice(0, 32), interfaces: host.interfaces }, boot);
    const parsed = Claims.safeParse({ serial: host.serial, uuid: host.uuid, macs: host.macs.slice(0, 32), lldp: lldp.lldp, mode, workflow: cfg.workflow, ...(bootMac ? { bootMac } : {}) });
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
      log.error({ code: "claims", issues }, "the machine's claims are not valid");
      fail("error", "claims", issues.join("; "));
      return EXIT.usage;
    }
    claims = parsed.data;
    log.info({ claims: { serial: claims.serial, uuid: claims.uuid, macs: claims.macs, lldp: claims.lldp }, eventLogBytes: eventLog.length }, "claims collected");
  } catch (e) {
    if (e instanceof ClaimsError || e instanceof EventLogError) {
      log.error({ code: e.code, path: e.path }, e.message);
      fail("error", e instanceof ClaimsError ? "claims" : "event-log", `${e.code}: ${e.message}`);
      return EXIT.usage;
    }
    throw e;
  }

  // Which TPM: a TPM 1.2 takes the TPM 1.2 variant (intake and wipe only; nothing is issued to it).
  cfg = { ...cfg, tpm: resolveTpm(cfg.tpm) };
  let family: TpmFamily;
  try {
    family = await tpmFamily(cfg.tpm);
  } catch (e) {
    if (!isTransport(e)) throw e;
    const err = e as Error;
    log.error({ code: "transport", kind: err.name, detail: err.message }, `cannot tell which TPM this is: ${err.message}`);
    fail("error", "transport", `${err.name}: ${err.message}`);
    return EXIT.unavailable;
  }
  let secrets12: { ownerAuth: Uint8Array; srkAuth: Uint8Array } | undefined;
  if (family === "1.2") {
    log.info({ tpm: describeTpm(cfg.tpm), ownerAuth: describeAuth(cfg.tpm12.ownerAuth), srkAuth: describeAuth(cfg.tpm12.srkAuth) }, "a TPM 1.2: the TPM 1.2 protocol (intake and wipe only)");
    if (!(TPM12_MODES as readonly string[]).includes(mode)) {
      const why = `a TPM 1.2 machine attests only for intake or wipe; ${mode} needs a TPM 2.0 (fleetd issues no LDevID, LAK, install code or Talos config to a TPM 1.2)`;
      log.error({ code: "tpm12-mode", mode }, why);
      fail("fail", "tpm12", why);
      return EXIT.refused;
    }
    try {
      if (!cfg.tpm12.ownerAuth) throw new ActionConfigError(["FLEETD_TPM12_OWNER_AUTH: required for a TPM 1.2 (TPM_MakeIdentity and TPM_ActivateIdentity need the owner): well-known or file:/path"]);
      secrets12 = { ownerAuth: readTpm12Auth(cfg.tpm12.ownerAuth, "FLEETD_TPM12_OWNER_AUTH"), srkAuth: readTpm12Auth(cfg.tpm12.srkAuth, "FLEETD_TPM12_SRK_AUTH") };
    } catch (e) {
      if (!(e instanceof ActionConfigError)) throw e;
      log.error({ code: "config", issues: e.issues }, e.message);
      fail("error", "config", e.message);
      return EXIT.usage;
    }
  }

  // The protocol, retried while the server lists this machine as pending.
  const server = serverTransport(cfg.server, cfg.ca ? { ca: cfg.ca } : {});
  const deadline = Date.now() + cfg.timeoutSeconds * 1000;
  for (let attempt = 1; ; attempt++) {
    let result: AttestResult | undefined;
    let wait = 0;
    const tpm = secrets12 ? new Tpm12Client(openRawTransport(cfg.tpm)) : openTpm(cfg.tpm);
    try {
      // a dependency outage on the server (503 unavailable: nothing spent): the same step again, within the budget
      const retryUnavailable = {
        deadline,
        delayMs: (n: number) => backoffDelayMs(n, Math.random()),
        onRetry: (step: string, refusal: { reason?: string }, n: number, waitMs: number) =>
          log.warn({ step, attempt: n, reason: refusal.reason, retryInSeconds: Math.round(waitMs / 100) / 10 }, `${step}: the server's ${refusal.reason ?? "dependency"} is down; retrying the same request`),
      };
      if (tpm instanceof Tpm12Client && secrets12) {
        const r = await attest12({ tpm, secrets: secrets12, server, claims, eventLog, random: (n) => new Uint8Array(randomBytes(n)), retryUnavailable });
        result = { mode: r.mode };
      } else if (!(tpm instanceof Tpm12Client)) {
        result = await attest({ tpm, server, claims, eventLog, retryUnavailable });
      }
    } catch (e) {
      if (e instanceof AttestationRefused) {
        const reasons = e.refusal.reasons;
        if (e.pending) {
          wait = backoffDelayMs(attempt, Math.random());
          if (Date.now() + wait < deadline) {
            log.warn({ attempt, status: e.status, reasons, retryInSeconds: Math.round(wait / 100) / 10 }, "pending: the server does not know this machine's TPM yet (an operator approves it with `fleetd pending`); retrying");
          } else {
            log.error({ code: "pending-timeout", attempt, reasons }, `still pending after ${cfg.timeoutSeconds} s (FLEETD_TIMEOUT_SECONDS); giving up`);
            fail("pending", e.step, e.message, reasons, attempt);
            return EXIT.pending;
          }
        } else if (e.refusal.error === "unavailable") {
          log.error({ code: "unavailable", step: e.step, reason: e.refusal.reason, attempt }, `${e.step}: the server's ${e.refusal.reason ?? "dependency"} stayed down until FLEETD_TIMEOUT_SECONDS ran out; giving up`);
          fail("error", e.step, e.message, reasons, attempt);
          return EXIT.unavailable;
        } else {
          log.error({ code: "refused", step: e.step, status: e.status, error: e.refusal.error, reasons }, `refused at ${e.step}: ${reasons.map((r) => `${r.check}: ${r.detail}`).join("; ")}`);
          fail("fail", e.step, e.message, reasons, attempt);
          return EXIT.refused;
        }
      } else if (isTransport(e)) {
        const err = e as Error & { code?: unknown };
        log.error({ code: "transport", kind: err.name, detail: err.message }, `${err.name}: ${err.message}`);
        fail("error", "transport", `${err.name}: ${err.message}`, [], attempt);
        return EXIT.unavailable;
      } else {
        log.error({ code: "internal", err: e instanceof Error ? { name: e.name, message: e.message, stack: e.stack } : String(e) }, "unexpected failure");
        fail("error", "internal", e instanceof Error ? e.message : String(e), [], attempt);
        return EXIT.internal;
      }
    } finally {
      await tpm.close().catch(() => undefined);
    }
    if (result === undefined) {
      await sleep(wait);
      continue;
    }

    if (result.mode !== mode) {
      log.error({ code: "mode", asked: mode, answered: result.mode }, "the server confirmed another mode");
      fail("fail", "confirm", `asked for ${mode}, the server confirmed ${result.mode}`, [], attempt);
      return EXIT.refused;
    }
    if (mode === "provision" && result.installCode === undefined) {
      log.error({ code: "no-install-code" }, "provision confirmed without an install code");
      fail("fail", "confirm", "provision confirmed without an install code", [], attempt);
      return EXIT.refused;
    }
    if (mode !== "provision") delete result.installCode;
    try {
      const report = writeSuccess(cfg.out, result, { workflow: cfg.workflow, claims, attempts: attempt, tpm: `${describeTpm(cfg.tpm)}${family === "1.2" ? " (TPM 1.2)" : ""}` });
      log.info({ node: report.node, generation: report.generation, ldevidSerial: report.ldevid?.serial ?? null, lakSerial: report.lak?.serial ?? null, installCode: report.installCode, out: cfg.out }, `attested (${mode})`);
      process.stdout.write(JSON.stringify(report, null, 2) + "\n");
      return EXIT.ok;
    } catch (e) {
      log.error({ code: "output", dir: cfg.out, err: (e as Error).message }, "cannot write the results");
      return EXIT.internal;
    }
  }
}

export const command: CliCommand = {
  usage: "[--mode intake|provision|attest|wipe]   (settings from FLEETD_* environment variables; see the README)",
  async run(args) {
    const { values } = parseOptions(args, { mode: { type: "string" } });
    return runAttest(process.env, values["mode"] !== undefined ? str(values, "mode") : undefined);
  },
};
