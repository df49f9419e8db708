/**
 * The worker: takes a hint ("look at device N"), re-reads the device and acts on its current state.
 * Jobs of one device run one after another (a wipe never races a provision); different devices in parallel.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { NodesFile } from "@fleetd/shared/inventory/nodesFile";
import { NetBoxError, type NetBox } from "@fleetd/shared/netbox/client";
import { checkEkAttribution, lastChangeOf, userGroups, type ObjectChangeRecord } from "@fleetd/shared/netbox/changelog";
import { decide, type Decision, type Facts, type Trigger } from "@fleetd/shared/netbox/decide";
import { desiredActionOf, patchDevice, readDeviceIfExists } from "@fleetd/shared/netbox/device";
import { writeJournal } from "@fleetd/shared/netbox/journal";
import type { HandlerConfig } from "./config.js";
import { applyIntent, type EffectDeps, type EffectOutcome } from "./effects.js";
import { appendDurable } from "./durable.js";
import type { IntentLog } from "./intents.js";
import type { Metrics } from "./metrics.js";
import type { FileQueue, Job } from "./queue.js";

export interface DecisionEvent {
  job: Job;
  deviceId: number;
  decision: Decision;
  at: number;
}

export interface WorkerDeps {
  cfg: HandlerConfig;
  nb: NetBox;
  nodes: NodesFile;
  queue: FileQueue;
  intents: IntentLog;
  /** The platform side (Tinkerbell workflows, retirement); absent: intents are only recorded. */
  effects?: EffectDeps;
  log: Logger;
  metrics: Metrics;
  onDecision?: (e: DecisionEvent) => void;
}

class Handled {
  private readonly keys = new Set<string>();
  constructor(private readonly path: string) {
    if (existsSync(path)) for (const l of readFileSync(path, "utf8").split("\n")) if (l) this.keys.add(l);
  }
  has(k: string): boolean {
    return this.keys.has(k);
  }
  add(k: string): void {
    if (this.keys.has(k)) return;
    appendDurable(this.path, k);
    this.keys.add(k);
  }
}

const MAX_CONFLICT_RETRIES = 5;

export class Worker {
  private readonly chains = new Map<number, Promise<void>>();
  private readonly inFlight = new Set<string>();
  private readonly handled: Handled;
  private timer: NodeJS.Timeout | undefined;
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

  /** Picks up every pending job whose time has come (at start: what a crash left behind). */
  pump(): void {
    if (this.stopped) return;
    const now = Date.now();
    const pending = this.d.queue.pending();
    this.d.metrics.queueDepth.set(pending.length);
    for (const job of pending) {
      if (job.notBefore > now || this.inFlight.has(job.id)) continue;
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
    await Promise.allSettled([...this.chains.values()]);
  }

  private async run(job: Job): Promise<void> {
    if (this.stopped) return;
    try {
      const decision = await this.process(job);
      this.d.queue.done(job);
      this.d.metrics.decisions.inc({ outcome: decision.outcome, action: decision.outcome === "dispatch" ? decision.intent.action : "-" });
      this.d.onDecision?.({ job, deviceId: job.deviceId, decision, at: Date.now() });
    } catch (e) {
      const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      const delay = Math.min(60_000, 500 * 2 ** job.attempts);
      const r = this.d.queue.retryLater(job, msg, delay, this.d.cfg.handler.maxAttempts);
      this.d.metrics.jobErrors.inc({ result: r });
      this.d.log.warn({ job: job.id, device: job.deviceId, attempts: job.attempts + 1, err: msg, result: r }, "job failed");
    }
  }

  /** One hint: re-read, decide, act, journal. Retries itself on 412 (the device changed under us). */
  async process(job: Job): Promise<Decision> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.processOnce(job);
      } catch (e) {
        if (e instanceof NetBoxError && e.code === "netbox_conflict" && attempt < MAX_CONFLICT_RETRIES) {
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

  private async processOnce(job: Job): Promise<Decision> {
    const { nb, cfg, log } = this.d;
    const got = await readDeviceIfExists(nb, job.deviceId);
    if (!got) return this.ignore(job, "device no longer exists");
    const { device, etag } = got;
    const desiredAction = desiredActionOf(device);
    let trigger: Trigger;
    let requestChange: ObjectChangeRecord | undefined;
    if (desiredAction !== null) {
      trigger = "desired_action";
      requestChange = await lastChangeOf(nb, device.id, "custom_fields.desired_action");
    } else if (device.status === "decommissioning") {
      trigger = "decommissioning";
      requestChange = await lastChangeOf(nb, device.id, "status");
      if (requestChange && this.handled.has(`decommission:${device.id}:${requestChange.id}`)) {
        if (device.last_updated) this.handled.add(`settled:${device.id}:${device.last_updated}`);
        return this.ignore(job, "decommissioning already handled");
      }
    } else {
      return this.ignore(job, "nothing requested (desired_action empty, status not decommissioning)");
    }
    const node = device.name ? this.d.nodes.nodes[device.name] : undefined;
    const facts: Facts = {
      trigger,
      device,
      desiredAction,
      node,
      ekAttribution: node?.tpm === "2.0" && trigger === "desired_action" ? await checkEkAttribution(nb, device.id, device.cf["ek_bindings"] ?? null, cfg.site.accounts.apply) : undefined,
      requester: await this.requesterOf(requestChange),
      authorizedGroup: cfg.site.authorizedGroup,
      features: cfg.site.features,
    };
    const decision = decide(facts);
    const requestKey = `${trigger}:${device.id}:${requestChange?.id ?? "none"}`;
    const name = device.name ?? `#${device.id}`;
    if (decision.outcome === "ignore") return this.ignore(job, decision.reason);

    // The effect comes before desired_action is cleared: a transient failure throws, the job is retried, and the
    // re-read device still asks for it (the same request names the same Workflow, so nothing doubles).
    let effect: EffectOutcome | undefined;
    if (decision.outcome === "dispatch") {
      effect = this.d.effects
        ? await applyIntent(this.d.effects, decision.intent, requestKey, node)
        : { effect: "intent-only", why: "no platform effects configured" };
      const rec = this.d.intents.record(requestKey, decision.intent, effect);
      if (rec) log.info({ device: device.id, node: name, intent: decision.intent, effect }, "intent recorded");
      if (effect.effect === "refused") log.warn({ device: device.id, node: name, code: effect.code, reason: effect.reason }, "effect refused");
    }
    if (decision.clearDesiredAction && desiredAction !== null) {
      const msg = decision.outcome === "dispatch" ? `fleetd: ${desiredAction} taken` : `fleetd: ${desiredAction} refused (${decision.code})`;
      await patchDevice(nb, device.id, { custom_fields: { desired_action: null } }, etag, msg);
    }
    if (trigger === "decommissioning" && requestChange) {
      this.handled.add(`decommission:${device.id}:${requestChange.id}`);
      if (device.last_updated) this.handled.add(`settled:${device.id}:${device.last_updated}`);
    }
    if (decision.outcome === "dispatch") {
      if (effect?.effect === "refused") {
        await writeJournal(nb, device.id, "danger", `${decision.journal.text}, but not started: ${effect.reason} [${effect.code}]`);
      } else if (effect?.effect === "workflow") {
        const replaced = effect.deleted.length ? `; deleted first: ${effect.deleted.join(", ")}` : "";
        await writeJournal(nb, device.id, decision.journal.kind, `${decision.journal.text}; Tinkerbell Workflow ${effect.workflow} ${effect.created ? "created" : "already exists"}${replaced}`);
      } else {
        await writeJournal(nb, device.id, decision.journal.kind, decision.journal.text);
      }
    } else {
      await writeJournal(nb, device.id, "danger", `fleetd refused ${trigger === "decommissioning" ? "decommissioning" : desiredAction}: ${decision.reason} [${decision.code}]`);
      log.warn({ device: device.id, node: name, code: decision.code, reason: decision.reason }, "refused");
    }
    return decision;
  }

  private ignore(job: Job, reason: string): Decision {
    this.d.log.debug({ job: job.id, device: job.deviceId, reason }, "nothing to do");
    return { outcome: "ignore", reason };
  }
}
