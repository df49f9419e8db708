/**
 * The node agent's loop: seed once, attest at start, renew when due, swap, restart spire-agent, count failures.
 * Its I/O (the protocol run, the clock, sleeping, the spire-agent signal) comes in as dependencies so the unit
 * tests drive it through failures and renewals; renewCommand.ts wires the real ones.
 */
import type { Logger } from "pino";
import { AttestationRefused, type IssuedCertificates, type RuntimeAttestResult } from "@fleetd/platform/protocol/client";
import type { RenewPurpose } from "@fleetd/platform/protocol";
import { type DevidSet, DevidStoreError, discardStaged, ensureSeeded, type InstallOptions, readCurrent, readStaged, renewedSet, type Staged, stageGeneration, switchCurrent } from "./devidStore.js";
import { type AgentState, delayAfter, INITIAL_STATE, nextState, type Outcome, purposeFor, type ScheduleSettings } from "./renewSchedule.js";
import type { SignalResult } from "./spireSignal.js";
import { type AgentStatus, writeStatus } from "./renewStatus.js";

export interface AgentDeps {
  log: Logger;
  now: () => Date;
  /** Resolves after `ms`, or early when `signal` aborts. */
  sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  random: () => number;
  /**
   * One runtime attestation (and renewal, for `renew`) with the given set: protocol/client `runtimeAttest`, which
   * calls `hooks.beforeConfirm` with the issued certificates before it confirms them (the agent stages them there).
   */
  attest: (purpose: RenewPurpose, current: DevidSet, hooks?: AttestHooks) => Promise<RuntimeAttestResult>;
  /** Restart spire-agent so it loads the renewed files (it attests with them once spire-plugin's sync deletes its agent). */
  signalSpire: () => SignalResult;
  /** Told after each attempt (the health endpoint reads it). */
  onStatus?: (s: AgentStatus) => void;
  /** Tests: fail inside the swap. */
  install?: InstallOptions;
}

export interface AttestHooks {
  beforeConfirm?: (issued: IssuedCertificates) => void | Promise<void>;
}

/** The challenge's refusals that say a staged generation is not the node's current one server-side. */
const NOT_CURRENT = new Set(["ldevid.void", "ldevid.stale"]);

export interface AgentSettings extends ScheduleSettings {
  seedDir: string;
  devidDir: string;
  statusFile: string;
}

const REASONS_MAX = 20;
const DETAIL_MAX = 500;

/** The server's reasons, bounded, for a log line (pino escapes the values; the message quotes them with JSON). */
function reasonsOf(e: AttestationRefused): { check: string; detail: string; pcr?: number; event?: number }[] {
  return (e.refusal.reasons ?? []).slice(0, REASONS_MAX).map((r) => ({ ...r, check: r.check.slice(0, 200), detail: r.detail.slice(0, DETAIL_MAX) }));
}

export class RenewAgent {
  state: AgentState = INITIAL_STATE;
  current: DevidSet | undefined;
  lastAttemptAt: Date | undefined;
  lastPassAt: Date | undefined;
  lastError: string | undefined;
  lastReasons: { check: string; detail: string }[] = [];
  nextAttemptAt: Date | undefined;

  constructor(
    readonly settings: AgentSettings,
    readonly deps: AgentDeps,
  ) {}

  /** Copies the seed once and reads the current set. DevidStoreError (corrupt, other node, no seed) propagates. */
  prepare(): DevidSet {
    const r = ensureSeeded(this.settings.seedDir, this.settings.devidDir, this.deps.now(), this.deps.install);
    const c = r.current;
    const base = { node: c.node, generation: c.generation, devidDir: this.settings.devidDir };
    if (r.action === "seeded") this.deps.log.info({ ...base, seedDir: this.settings.seedDir }, `copied the seed (generation ${c.generation}) into the devid directory`);
    else if (r.action === "adopted") this.deps.log.warn({ ...base, previousGeneration: r.previousGeneration }, `the seed is a newer generation (${c.generation}) than the devid directory's (${r.previousGeneration}): adopted it`);
    else {
      this.deps.log.info({ ...base, seedGeneration: r.seedGeneration ?? null }, `the devid directory holds generation ${c.generation}; the seed is not copied again`);
      if (r.seedProblem) this.deps.log.warn({ code: "seed", detail: r.seedProblem }, "the seed is unreadable (the devid directory is used as it is)");
    }
    this.current = c;
    this.writeStatus();
    return c;
  }

  /**
   * One attempt: first resolve a staged generation (a renewal whose confirm may or may not have happened), then
   * attest (or renew when due) with the current set; a renewal stages the next generation before the confirm and
   * switches `current` to it after.
   */
  async attempt(): Promise<Outcome> {
    const log = this.deps.log;
    const now = this.deps.now();
    const dir = this.settings.devidDir;
    // the files are read again each time: what is on disk is what spire-agent reads
    let current = readCurrent(dir);
    if (!current) throw new DevidStoreError("devid-corrupt", dir, "holds no current generation");
    this.current = current;
    let purpose = purposeFor(current.ldevidCertificate, now);
    this.lastAttemptAt = now;
    let outcome: Outcome;
    try {
      const staged = readStaged(dir, current);
      if (staged) {
        const promoted = await this.resolveStaged(current, staged);
        if (promoted) {
          this.passed(now);
          outcome = { kind: "pass" };
          return this.settle(outcome);
        }
      }
      current = this.current;
      purpose = purposeFor(current.ldevidCertificate, now);
      log.info({ purpose, node: current.node, generation: current.generation }, `runtime attestation (${purpose})`);
      let staging: DevidSet | undefined;
      const from = current;
      const r = await this.deps.attest(purpose, current, {
        beforeConfirm: (issued) => {
          // on disk, complete and fsynced, before the server makes it current: a crash after the confirm finds it
          const next = renewedSet(from, issued);
          stageGeneration(dir, next, this.deps.install);
          staging = next;
          log.info({ node: next.node, generation: next.generation, devidDir: dir }, `staged generation ${next.generation} before confirming it`);
        },
      });
      if (r.issued) {
        let next = renewedSet(current, r.issued);
        if (!staging || staging.generation !== next.generation) stageGeneration(dir, next, this.deps.install);
        else next = staging;
        switchCurrent(dir, next.generation, this.deps.install);
        this.current = next;
        log.info({ node: next.node, generation: next.generation, previousGeneration: current.generation, devidDir: dir }, `renewed: generation ${next.generation} is current`);
        this.restartSpire();
      } else {
        log.info({ purpose, node: current.node, generation: current.generation }, purpose === "renew" ? "runtime verdict pass; the server issued nothing (not due by its clock)" : "runtime verdict pass");
      }
      this.passed(now);
      outcome = { kind: "pass" };
    } catch (e) {
      outcome = this.failure(e, purpose);
    }
    return this.settle(outcome);
  }

  /**
   * A generation newer than `current` is on disk: staged before a confirm, never switched to. Attest with it: the
   * server accepting its challenge means the confirm happened → switch `current` to it (true). Refused by the
   * challenge as not current (`ldevid.void`: never confirmed; `ldevid.stale`) → discard it and go on with
   * `current` (false). Anything else (network, outage, TPM) throws: a failed attempt, the staged directory is kept
   * and tried again first. Never a downgrade: only a generation newer than `current` is tried; `current` is never
   * removed.
   */
  private async resolveStaged(current: DevidSet, staged: Staged): Promise<boolean> {
    const log = this.deps.log;
    const dir = this.settings.devidDir;
    const base = { node: current.node, generation: current.generation, stagedGeneration: staged.generation, devidDir: dir };
    if (!("set" in staged)) {
      log.error({ ...base, code: "staged-invalid", detail: staged.problem }, `the staged generation ${staged.generation} is unusable (${staged.problem}): discarded; generation ${current.generation} stays current`);
      discardStaged(dir, staged.generation);
      return false;
    }
    log.info(base, `a staged generation ${staged.generation} (newer than the current ${current.generation}) is on disk: asking the server whether its renewal was confirmed`);
    const promote = (set: DevidSet) => {
      switchCurrent(dir, set.generation, this.deps.install);
      this.current = set;
      log.info({ ...base, previousGeneration: current.generation }, `the server accepts the staged generation ${set.generation}: it is current now`);
      this.restartSpire();
    };
    try {
      await this.deps.attest("attest", staged.set);
    } catch (e) {
      if (e instanceof AttestationRefused && e.step === "renew-challenge") {
        const checks = (e.refusal.reasons ?? []).map((r) => r.check);
        if (e.status === 403 && checks.some((c) => NOT_CURRENT.has(c))) {
          discardStaged(dir, staged.generation);
          log.warn({ ...base, code: "staged-discarded", checks }, `the server refuses the staged generation ${staged.generation} as not current (its confirm never happened): discarded; generation ${current.generation} stays current`);
          return false;
        }
      } else if (e instanceof AttestationRefused) {
        // past the challenge: the server holds the staged generation as current; the failure is this attempt's
        promote(staged.set);
      }
      throw e;
    }
    promote(staged.set);
    return true;
  }

  private restartSpire(): void {
    const s = this.deps.signalSpire();
    if (s.pids.length) this.deps.log.info({ pids: s.pids }, "signalled spire-agent to restart and load the renewed LDevID (it attests with it once spire-plugin's sync deletes its old agent)");
    else this.deps.log.warn({ code: "spire-signal", note: s.note ?? null }, `spire-agent was not signalled: ${s.note ?? "nothing to signal"}`);
  }

  private passed(now: Date): void {
    this.lastPassAt = now;
    this.lastError = undefined;
    this.lastReasons = [];
  }

  private settle(outcome: Outcome): Outcome {
    const log = this.deps.log;
    const before = this.state;
    this.state = nextState(this.state, outcome, this.settings);
    if (this.state.verdict === "failed" && before.verdict !== "failed") {
      log.error(
        { code: "node-verdict-failed", consecutiveFailures: this.state.consecutiveFailures, refused: this.state.refused, threshold: this.settings.failuresForVerdict },
        this.state.refused
          ? "node verdict failed: the server refused the runtime attestation; readiness is off until a pass (retrying at the backoff cap)"
          : `node verdict failed: ${this.state.consecutiveFailures} consecutive failed attempts (FLEETD_RENEW_FAILURES=${this.settings.failuresForVerdict}); readiness is off until a pass (retrying at the backoff cap)`,
      );
    }
    return outcome;
  }

  private failure(e: unknown, purpose: RenewPurpose): Outcome {
    const log = this.deps.log;
    if (e instanceof AttestationRefused) {
      const reasons = reasonsOf(e);
      this.lastReasons = reasons;
      this.lastError = `${e.step}: ${e.status} ${e.refusal.error}`;
      if (e.status === 403 && e.refusal.error === "refused") {
        log.error(
          { code: "refused", step: e.step, status: e.status, error: e.refusal.error, purpose, reasons },
          `the server refused the runtime attestation at ${e.step}: ${JSON.stringify(reasons.map((r) => `${r.check}: ${r.detail}`))}; nothing was swapped`,
        );
        return { kind: "refused" };
      }
      log.warn({ code: e.refusal.error, step: e.step, status: e.status, reason: e.refusal.reason ?? null, purpose, reasons }, `${e.step}: ${e.status} ${e.refusal.error}; retrying with backoff`);
      return { kind: "failed" };
    }
    const err = e instanceof Error ? e : new Error(String(e));
    this.lastError = `${err.name}: ${err.message}`;
    this.lastReasons = [];
    const code = (err as { code?: unknown }).code;
    log.warn({ code: typeof code === "string" ? code : "error", kind: err.name, detail: err.message, purpose }, `attempt failed: ${err.name}: ${err.message}; retrying with backoff`);
    return { kind: "failed" };
  }

  /** Milliseconds until the next attempt. */
  delay(): number {
    const c = this.current;
    if (!c) return this.settings.backoff.baseMs;
    return delayAfter(this.state, c.ldevidCertificate, this.deps.now(), this.settings, this.deps.random());
  }

  status(): AgentStatus {
    const c = this.current;
    return {
      version: 1,
      ready: this.state.verdict !== "failed",
      verdict: this.state.verdict,
      consecutiveFailures: this.state.consecutiveFailures,
      failuresForVerdict: this.settings.failuresForVerdict,
      refused: this.state.refused,
      ...(c ? { node: c.node, generation: c.generation } : {}),
      ...(this.lastAttemptAt ? { lastAttemptAt: this.lastAttemptAt.toISOString() } : {}),
      ...(this.lastPassAt ? { lastPassAt: this.lastPassAt.toISOString() } : {}),
      ...(this.nextAttemptAt ? { nextAttemptAt: this.nextAttemptAt.toISOString() } : {}),
      ...(this.lastError ? { lastError: this.lastError } : {}),
      reasons: this.lastReasons,
      updatedAt: this.deps.now().toISOString(),
    };
  }

  writeStatus(): void {
    const s = this.status();
    try {
      writeStatus(this.settings.statusFile, s);
    } catch (e) {
      this.deps.log.warn({ code: "status-file", path: this.settings.statusFile, detail: (e as Error).message }, "cannot write the status file");
    }
    this.deps.onStatus?.(s);
  }

  /**
   * Prepare, then attempt until `stop` aborts (or once, with `once`). Returns the last outcome (undefined when
   * stopped before the first attempt).
   */
  async run(stop: AbortSignal, once = false): Promise<Outcome | undefined> {
    this.prepare();
    let last: Outcome | undefined;
    while (!stop.aborted) {
      last = await this.attempt();
      const wait = this.delay();
      this.nextAttemptAt = new Date(this.deps.now().getTime() + wait);
      this.writeStatus();
      if (once) break;
      this.deps.log.info({ verdict: this.state.verdict, consecutiveFailures: this.state.consecutiveFailures, nextAttemptAt: this.nextAttemptAt.toISOString() }, "next attempt scheduled");
      await this.deps.sleep(wait, stop);
    }
    return last;
  }
}
