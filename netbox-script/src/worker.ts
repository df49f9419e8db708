/**
 * The worker: takes a hint ("look at device N"), re-reads the device and acts on its current state.
 * Jobs of one device run one after another (a wipe never races a provision); different devices in parallel.
 */
import { join } from "node:path";
import type { Logger } from "pino";
import { nodeEntry, type NodeEntry, type NodesFile, attestationAccount } from "@fleetd/platform/fleet";
import {
  NetBoxError, type NetBox, checkEkAttribution, lastChangeOf, requestChangeOf, userGroups, type ObjectChangeRecord,
  provenBootMacOf, decide, type Decision, type Facts, type Intent, type Trigger, desiredActionOf, patchDevice,
  readDeviceIfExists, type DeviceRecord, type DesiredAction, writeJournal, comparableJson,
} from "@fleetd/platform/netbox";
import { mdCode, safeLine } from "@fleetd/verify/text";
import { backoffDelayMs, failpoint } from "@fleetd/platform/outage";
import type { HandlerConfig } from "./config.js";
import { applyIntent, type EffectDeps, type EffectOutcome } from "./effects.js";
import { Handled } from "./handled.js";
import type { Intents } from "./intents.js";
import type { Metrics } from "./metrics.js";
import type { JobQueue, Job } from "./queue.js";

export interface DecisionEvent {
  job: Job;
  deviceId: number;
  decision: Decision;
  /** When the job finished (the effect ran and the journal was written), ms since the epoch. */
  at: number;
  /** When each step of the job ended (ms since the epoch), for the per-stage latency of the webhook path. */
  marks: StageMarks;
}

/**
 * The steps of one job, as `Date.now()` at its end: `started` (taken from the queue, run begins), `decided` (NetBox
 * read, change log and groups read, decide() returned), `taken` (re-read, claimed, desired_action cleared with
 * If-Match), `effect` (the platform effect returned: the Workflow exists in the kube-apiserver). A step that did not
 * run (an ignore, a refusal, a resumed request) is absent; a 412 retry overwrites the earlier attempt's.
 */
export interface StageMarks {
  started: number;
  decided?: number;
  taken?: number;
  effect?: number;
}

export interface WorkerDeps {
  cfg: HandlerConfig;
  nb: NetBox;
  nodes: NodesFile;
  queue: JobQueue;
  intents: Intents;
  /** The platform side (Tinkerbell workflows, retirement); absent: intents are only recorded. */
  effects?: EffectDeps;
  log: Logger;
  metrics: Metrics;
  onDecision?: (e: DecisionEvent) => void;
}

const MAX_CONFLICT_RETRIES = 5;
/** A failed job's wait before it is taken again: 500 ms doubling per attempt up to a minute, with jitter. */
const JOB_BACKOFF = { baseMs: 500, capMs: 60_000 };
/** Jobs claimed in one take (the rest wait for the next pump). */
const TAKE_LIMIT = 100;
const DESIRED = "custom_fields.desired_action";
const FIELD_LABEL: Record<string, string> = { name: "the device name", status: "the status", [DESIRED]: "desired_action", "custom_fields.ek_bindings": "the EK bindings", "custom_fields.boot_mac": "the boot MAC" };
/** A NetBox value for a journal entry (any user could have typed it). */
const shown = (v: unknown): string => (v === null || v === undefined ? "(empty)" : mdCode(typeof v === "string" ? v : JSON.stringify(v), 200));
/** The changelog message of the handler's take; resume() recognises its own take by it. */
const takeMessage = (action: string, key: string): string => `fleetd: ${action} taken (request ${key})`;

export class Worker {
  private readonly chains = new Map<number, Promise<void>>();
  private readonly inFlight = new Set<string>();
  private readonly handled: Handled;
  private timer: NodeJS.Timeout | undefined;
  /** The take under way, if any (stop() waits for it). */
  private pumping: Promise<void> | undefined;
  private pumpAgain = false;
  /** Nothing runs before start() (a handler may accept and persist jobs without running them). */
  private stopped = true;

  constructor(private readonly d: WorkerDeps) {
    this.handled = new Handled(join(d.cfg.handler.stateDir, "handled.log"));
  }

  /**
   * True when this device's decommissioning was handled at exactly this `last_updated` (the reconcile loop
   * then does not queue it again; fleetd writes nothing to a decommissioning device, so it stays settled).
   */
  settled(deviceId: number, lastUpdated: string | null | undefined): boolean {
    return lastUpdated != null && this.handled.has(`settled:${deviceId}:${lastUpdated}`);
  }

  /**
   * Takes every due job (at start: what a crash left behind) under this process's claim and runs it. Several
   * calls while a take is under way make one more take after it.
   */
  pump(): void {
    if (this.stopped) return;
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = this.pumpOnce()
      .catch((e: unknown) => this.d.log.warn({ err: e instanceof Error ? e.message : String(e) }, "taking jobs from the queue failed"))
      .finally(() => {
        this.pumping = undefined;
        if (this.pumpAgain) {
          this.pumpAgain = false;
          this.pump();
        }
      });
  }

  private async pumpOnce(): Promise<void> {
    const jobs = await this.d.queue.take(TAKE_LIMIT);
    const [pending, parked] = await Promise.all([this.d.queue.pending(), this.d.queue.parked()]);
    this.d.metrics.queueDepth.set(pending.length);
    this.d.metrics.queueParked.set(parked.length);
    for (const job of jobs) {
      if (this.inFlight.has(job.id)) continue;
      this.inFlight.add(job.id);
      const prev = this.chains.get(job.deviceId) ?? Promise.resolve();
      const next = prev.then(() => this.run(job)).finally(() => {
        this.inFlight.delete(job.id);
        if (this.chains.get(job.deviceId) === next) this.chains.delete(job.deviceId);
      });
      this.chains.set(job.deviceId, next);
    }
  }

  start(): void {
    this.stopped = false;
    this.pump();
    this.timer = setInterval(() => this.pump(), 1000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.pumping;
    await Promise.allSettled([...this.chains.values()]);
    // jobs taken but not run: due again for whoever runs next
    await this.d.queue.release(true).catch(() => undefined);
  }

  private async run(job: Job): Promise<void> {
    if (this.stopped) return;
    const marks: StageMarks = { started: Date.now() };
    try {
      const decision = await this.process(job, marks);
      await this.d.queue.done(job);
      this.d.metrics.decisions.inc({ outcome: decision.outcome, action: decision.outcome === "dispatch" ? decision.intent.action : "-" });
      this.d.onDecision?.({ job, deviceId: job.deviceId, decision, at: Date.now(), marks });
    } catch (e) {
      const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      const delay = backoffDelayMs(job.attempts + 1, Math.random(), JOB_BACKOFF);
      const r = await this.d.queue.retryLater(job, msg, delay, this.d.cfg.handler.maxAttempts).catch((e2: unknown) => {
        this.d.log.warn({ job: job.id, err: e2 instanceof Error ? e2.message : String(e2) }, "recording the failure failed (the job's claim goes stale and it is taken again)");
        return "lost" as const;
      });
      this.d.metrics.jobErrors.inc({ outcome: r });
      this.d.log.warn({ job: job.id, device: job.deviceId, attempts: job.attempts + 1, err: msg, result: r }, "job failed");
    }
  }

  /** One hint: re-read, decide, act, journal. Retries itself on 412 (the device changed under us). */
  async process(job: Job, marks: StageMarks = { started: Date.now() }): Promise<Decision> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.processOnce(job, marks);
      } catch (e) {
        if (e instanceof NetBoxError && e.code === "netbox-conflict" && attempt < MAX_CONFLICT_RETRIES) {
          this.d.log.info({ device: job.deviceId }, "device changed while deciding (412); re-reading");
          continue;
        }
        throw e;
      }
    }
  }

  private async requesterOf(change: ObjectChangeRecord | undefined): Promise<{ username: string; groups: string[] } | null> {
    if (!change?.user) return null;
    return { username: change.user.username, groups: await userGroups(this.d.nb, change.user.id) };
  }

  private async processOnce(job: Job, marks: StageMarks): Promise<Decision> {
    const { nb, cfg, log } = this.d;
    const got = await readDeviceIfExists(nb, job.deviceId);
    if (!got) return this.ignore(job, "device no longer exists");
    const { device, etag } = got;
    const resumed = await this.resume(device);
    if (resumed) return resumed;
    const desiredAction = desiredActionOf(device);
    let trigger: Trigger;
    if (desiredAction !== null) trigger = "desired_action";
    else if (device.status === "decommissioning") trigger = "decommissioning";
    else return this.ignore(job, "nothing requested (desired_action empty, status not decommissioning)");
    // The requester is the user whose change set exactly the value read; a newer change (a revert, another
    // request) is nobody's authorization for it.
    const path = trigger === "desired_action" ? DESIRED : "status";
    const req = await requestChangeOf(nb, device.id, path, trigger === "desired_action" ? desiredAction : "decommissioning");
    if ("changed" in req) {
      const c = req.changed;
      return this.requestChanged(device, trigger, desiredAction, `${FIELD_LABEL[path]} was set to ${shown(req.value)} by ${c.user_name} at ${c.time} (change #${c.id}) after fleetd read it`);
    }
    const requestChange = req.change;
    if (trigger === "decommissioning" && requestChange && this.handled.has(`decommission:${device.id}:${requestChange.id}`)) {
      if (device.last_updated) this.handled.add(`settled:${device.id}:${device.last_updated}`);
      return this.ignore(job, "decommissioning already handled");
    }
    const node = device.name !== null ? nodeEntry(this.d.nodes, device.name) : undefined;
    // Three independent reads of what was read above: together, not one after another (each is a NetBox round trip).
    const [ekAttribution, bootMac, requester] = await Promise.all([
      node && node.tpm !== "none" && trigger === "desired_action" ? checkEkAttribution(nb, device.id, device.cf["ek_bindings"] ?? null, cfg.site.accounts.apply) : undefined,
      // A TPM 1.2 wipe targets only the boot MAC TPM evidence proved (decide.ts); TPM 2.0's effects check it themselves.
      node?.tpm === "1.2" ? provenBootMacOf(nb, device, attestationAccount(cfg.site)) : undefined,
      this.requesterOf(requestChange),
    ]);
    const facts: Facts = {
      trigger,
      device,
      desiredAction,
      node,
      ekAttribution,
      bootMac,
      requester,
      authorizedGroup: cfg.site.authorizedGroup,
      features: cfg.site.features,
    };
    const decision = decide(facts);
    marks.decided = Date.now();
    const requestKey = `${trigger}:${device.id}:${requestChange?.id ?? "none"}`;
    const name = device.name ?? `#${device.id}`;
    if (decision.outcome === "ignore") return this.ignore(job, decision.reason);

    if (decision.outcome === "refuse") {
      if (decision.clearDesiredAction && desiredAction !== null) {
        await patchDevice(nb, device.id, { custom_fields: { desired_action: null } }, etag, `fleetd: ${desiredAction} refused (${decision.code})`);
      }
      if (trigger === "decommissioning" && requestChange) this.settle(device, requestChange);
      await writeJournal(nb, device.id, "danger", `fleetd refused ${trigger === "decommissioning" ? "decommissioning" : desiredAction}: ${decision.reason} [${decision.code}]`);
      log.warn({ device: device.id, node: safeLine(name), code: decision.code, reason: safeLine(decision.reason) }, "refused");
      return decision;
    }

    // Dispatch. Right before the effect the device must still hold what was decided on, and the request is
    // taken in the same conditional step (If-Match at that state): a change in between means nothing runs.
    // The effect's boot MAC proof (a change-log read) runs beside the take: a take at the decision's own ETag proves
    // that the device, boot_mac included, did not change in between, so the proof of `device` is the proof at the
    // take. Used only then (the take matched `device` itself); after a 412 the effect reads it for the record taken.
    const effects = this.d.effects;
    const early = effects?.tinkerbell && decision.intent.action !== "decommission" ? effects.bootMac(device) : undefined;
    early?.catch(() => undefined); // a failure surfaces where it is awaited, if it is
    const taken = await this.take(device, etag, trigger, desiredAction, requestKey, decision.intent);
    if ("moved" in taken) return this.requestChanged(device, trigger, desiredAction, taken.moved);
    marks.taken = Date.now();
    failpoint("handler.afterTake"); // taken in NetBox, no effect yet: a restart resumes it (resume())
    const done = await this.runEffect(taken.device, decision.intent, requestKey, node, decision, marks, taken.device === device ? early : undefined);
    if (trigger === "decommissioning" && requestChange) this.settle(device, requestChange);
    return done;
  }

  /**
   * The conditional step before an effect. A desired_action request is claimed (durably, in the intent log) and
   * taken in NetBox: desired_action cleared with If-Match at the ETag the decision read, so it goes ahead only if
   * the device is exactly as decided on. On a 412 (changed meanwhile) the device is read again: changed only in
   * fields the decision did not read, it is taken with If-Match at the state just read (a 412 again reads and
   * compares again); otherwise the reason is returned and nothing runs. A decommissioning (fleetd writes nothing to
   * such a device) is confirmed by a read alone. Returns the record the take matched (the effect's boot MAC is
   * read from it).
   */
  private async take(device: DeviceRecord, etag: string | null, trigger: Trigger, desiredAction: DesiredAction | null, key: string, intent: Intent): Promise<{ device: DeviceRecord } | { moved: string }> {
    if (trigger !== "desired_action" || desiredAction === null) return this.reread(device, etag);
    // The first attempt writes at the decision's own read (no second read when nothing changed: the common case).
    let at: { device: DeviceRecord; etag: string | null } | undefined = etag !== null ? { device, etag } : undefined;
    for (let attempt = 0; ; attempt++) {
      if (!at) {
        const r = await this.reread(device, etag);
        if ("moved" in r) return r;
        at = r;
      }
      // Without an ETag the write would not be conditional: fail closed (retried as an error).
      if (at.etag === null) throw new NetBoxError("netbox-bad-response", `read device ${device.id}`, undefined, "no ETag: the request cannot be taken conditionally");
      await this.d.intents.claim(key, intent);
      try {
        await patchDevice(this.d.nb, device.id, { custom_fields: { desired_action: null } }, at.etag, takeMessage(desiredAction, key));
        return { device: at.device };
      } catch (e) {
        // Not taken: the claim goes (a 412 reads and compares again; anything else fails the job, retried).
        await this.d.intents.abandon(key, device.id);
        at = undefined;
        if (e instanceof NetBoxError && e.code === "netbox-conflict" && attempt < MAX_CONFLICT_RETRIES) continue;
        throw e;
      }
    }
  }

  /** The device read again: as decided on (same ETag, or changed only in fields the decision did not read), or why not. */
  private async reread(device: DeviceRecord, etag: string | null): Promise<{ device: DeviceRecord; etag: string | null } | { moved: string }> {
    const fresh = await readDeviceIfExists(this.d.nb, device.id);
    if (!fresh) return { moved: "the device was deleted" };
    const moved = fresh.etag !== null && fresh.etag === etag ? undefined : await this.movedInputs(device, fresh.device);
    return moved !== undefined ? { moved } : fresh;
  }

  /** Which of the decision's inputs differ between the device as decided on and as read now (with who changed it). */
  private async movedInputs(was: DeviceRecord, now: DeviceRecord): Promise<string | undefined> {
    for (const [path, a, b] of [
      ["name", was.name, now.name],
      ["status", was.status, now.status],
      [DESIRED, was.cf["desired_action"] ?? null, now.cf["desired_action"] ?? null],
      ["custom_fields.ek_bindings", was.cf["ek_bindings"] ?? null, now.cf["ek_bindings"] ?? null],
      ["custom_fields.boot_mac", was.cf["boot_mac"] ?? null, now.cf["boot_mac"] ?? null],
    ] as const) {
      if (comparableJson(a) === comparableJson(b)) continue;
      const c = await lastChangeOf(this.d.nb, now.id, path);
      const by = c ? ` by ${c.user_name} at ${c.time} (change #${c.id})` : "";
      return `${FIELD_LABEL[path]} was changed from ${shown(a)} to ${shown(b)}${by} while fleetd was deciding`;
    }
    return undefined;
  }

  /** A request that changed under the decision: journalled, nothing run, desired_action left as it now is. */
  private async requestChanged(device: DeviceRecord, trigger: Trigger, desiredAction: DesiredAction | null, why: string): Promise<Decision> {
    const what = trigger === "decommissioning" ? "decommissioning" : desiredAction ?? "the request";
    const d: Decision = { outcome: "refuse", code: "request-changed", reason: `${why}; nothing was started (a new request is decided on its own)`, clearDesiredAction: false };
    // Journalled once per device state: a state that stays so (a change log that never matches) is re-queued by
    // every reconcile pass, but not journalled again.
    const once = device.last_updated ? `changed:${device.id}:${device.last_updated}` : undefined;
    if (once !== undefined && this.handled.has(once)) return d;
    await writeJournal(this.d.nb, device.id, "warning", `fleetd did not act on ${what}: ${d.reason} [request-changed]`);
    if (once !== undefined) this.handled.add(once);
    this.d.log.warn({ device: device.id, reason: safeLine(d.reason) }, "request changed while deciding; nothing started");
    return d;
  }

  private settle(device: DeviceRecord, requestChange: ObjectChangeRecord): void {
    this.handled.add(`decommission:${device.id}:${requestChange.id}`);
    if (device.last_updated) this.handled.add(`settled:${device.id}:${device.last_updated}`);
  }

  /** A request claimed and taken by an earlier run whose effect did not finish (an error, a crash): run it now. */
  private async resume(device: DeviceRecord): Promise<Decision | undefined> {
    const claim = await this.d.intents.unsettledFor(device.id);
    if (!claim) return undefined;
    const last = await lastChangeOf(this.d.nb, device.id, DESIRED);
    const taken = last !== undefined && last.user_name === this.d.cfg.site.accounts.handler && last.message === takeMessage(claim.action, claim.key);
    if (!taken) {
      // Claimed but never taken (the write failed or the process stopped before it): nothing ran; the device
      // is decided again from what it holds now.
      await this.d.intents.abandon(claim.key, device.id);
      this.d.log.info({ device: device.id, request: claim.key }, "a claimed request was not taken; deciding again");
      return undefined;
    }
    const node = nodeEntry(this.d.nodes, claim.node);
    const text = `fleetd: ${claim.action} of ${claim.node} (taken earlier${claim.requestedBy ? `, requested by ${claim.requestedBy}` : ""}) resumed`;
    return this.runEffect(device, claim, claim.key, node, { outcome: "dispatch", intent: claim, clearDesiredAction: false, journal: { kind: "info", text } });
  }

  /** `bootMac`: the boot MAC proof of `device` already under way (see processOnce), if any. */
  private async runEffect(device: DeviceRecord, intent: Intent, requestKey: string, node: NodeEntry | undefined, decision: Extract<Decision, { outcome: "dispatch" }>, marks?: StageMarks, bootMac?: Promise<string | undefined>): Promise<Decision> {
    const { nb, log } = this.d;
    const name = safeLine(intent.node);
    // A transient failure throws: the job is retried and resume() runs the taken request again (the same
    // request names the same Workflow, so nothing doubles).
    const effects = this.d.effects;
    const effect: EffectOutcome = effects
      ? await applyIntent(effects, intent, requestKey, node, () => bootMac ?? effects.bootMac(device))
      : { effect: "intent-only", why: "no platform effects configured" };
    if (marks) marks.effect = Date.now();
    failpoint("handler.afterEffect"); // the Workflow exists, nothing recorded: a restart finds it (same name)
    const rec = await this.d.intents.record(requestKey, intent, effect);
    if (rec) log.info({ device: device.id, node: name, intent, effect }, "intent recorded");
    if (effect.effect === "refused") {
      log.warn({ device: device.id, node: name, code: effect.code, reason: safeLine(effect.reason) }, "effect refused");
      await writeJournal(nb, device.id, "danger", `${decision.journal.text}, but not started: ${effect.reason} [${effect.code}]`);
    } else if (effect.effect === "workflow") {
      const replaced = effect.deleted.length ? `; deleted first: ${effect.deleted.join(", ")}` : "";
      await writeJournal(nb, device.id, decision.journal.kind, `${decision.journal.text}; Tinkerbell Workflow ${effect.workflow} ${effect.created ? "created" : "already exists"}${replaced}`);
    } else {
      await writeJournal(nb, device.id, decision.journal.kind, decision.journal.text);
    }
    return decision;
  }

  private ignore(job: Job, reason: string): Decision {
    this.d.log.debug({ job: job.id, device: job.deviceId, reason }, "nothing to do");
    return { outcome: "ignore", reason };
  }
}
