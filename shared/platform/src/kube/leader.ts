/**
 * Leader election on a coordination.k8s.io/v1 Lease, as client-go does it, and the one way fleetd runs a loop
 * on the leader only (`runWhileLeader`).
 *
 * Every `retryPeriod` each candidate reads the Lease:
 *   - absent → create it holding it (409 AlreadyExists: someone else was first);
 *   - held by us → renew (`renewTime` = now), a replace carrying the resourceVersion read (409: lost it);
 *   - held by another → wait; take it over (leaseTransitions + 1) only once the record has not changed for
 *     `leaseDuration` by OUR clock (the time we observed it, not the holder's renewTime: clocks differ).
 * A leader that has not renewed for `renewDeadline` (< leaseDuration) steps down on its own, before anyone
 * may take over; `stop()` steps down (callbacks first — e.g. the PKCS#11 session is closed) and then releases
 * the Lease (holder cleared), so a successor need not wait out the duration.
 *
 * The Lease carries the holder's annotations (fleetd: `fleetd.io/internal-url`, the address followers forward
 * to). RBAC: get, create, update on leases (coordination.k8s.io) in the namespace.
 */
import { V1MicroTime, type V1Lease } from "@kubernetes/client-node";
import { isConflict, isNotFound, type Kube } from "./client.js";
import { z } from "zod";
import { OWNER_LABELS } from "../fleet/ownership.js";

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** A Lease name (a DNS-1123 label). */
export const LeaseName = z.string().regex(DNS_LABEL, "must be a Lease name (DNS-1123 label)");

/**
 * The one configuration schema of leader election (every fleetd service with replicas): where the Lease lives, who
 * this replica is, and the timing. A service spreads these fields into its own section, adds its own (its Lease
 * names, its internal listener…) and refines with `leaseTimingOk` (client-go's rule retryPeriod < renewDeadline <
 * leaseDuration).
 */
export const LeaderElectionFields = {
  /** kubeconfig of the cluster holding the Lease; "in-cluster" (default) for a pod's service account. */
  kubeconfig: z.string().min(1).default("in-cluster"),
  namespace: z.string().regex(DNS_LABEL, "must be a namespace name (DNS-1123 label)"),
  /** This replica, unique among them (the pod name). */
  identity: z.string().min(1).max(128).regex(/^[A-Za-z0-9._:-]+$/, "letters, digits, '.', '_', ':', '-'"),
  leaseDurationSeconds: z.number().int().min(3).max(300).default(15),
  renewDeadlineSeconds: z.number().int().min(2).max(299).default(10),
  retryPeriodSeconds: z.number().int().min(1).max(60).default(2),
};

/**
 * The replica's own values over an `ha` section every replica shares (one ConfigMap behind a Deployment or
 * StatefulSet): `FLEETD_HA_IDENTITY` (the pod name, from the downward API) replaces `identity`, and each
 * `extra` variable its field (talos-config-server: `FLEETD_HA_INTERNAL_URL` → `internalUrl`). Only where the file
 * has an `ha` mapping: a variable never turns leader election on. The schema then checks the values as if written.
 */
export function applyHaEnv(ha: unknown, env: NodeJS.ProcessEnv, extra: Record<string, string> = {}): unknown {
  if (typeof ha !== "object" || ha === null || Array.isArray(ha)) return ha;
  const out: Record<string, unknown> = { ...(ha as Record<string, unknown>) };
  for (const [name, field] of Object.entries({ FLEETD_HA_IDENTITY: "identity", ...extra })) {
    const v = env[name];
    if (v !== undefined && v !== "") out[field] = v;
  }
  return out;
}

export const leaseTimingOk = (h: { retryPeriodSeconds: number; renewDeadlineSeconds: number; leaseDurationSeconds: number }): boolean =>
  h.retryPeriodSeconds < h.renewDeadlineSeconds && h.renewDeadlineSeconds < h.leaseDurationSeconds;
export const LEASE_TIMING = { message: "need retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds" };

export const INTERNAL_URL_ANNOTATION = "fleetd.io/internal-url";

export interface LeaderLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface LeaderElectionOptions {
  kube: Kube;
  namespace: string;
  /** The Lease's name, e.g. "fleetd-ca-signer". */
  name: string;
  /** This candidate (unique per replica: pod name, or host + pid). */
  identity: string;
  /** Annotations the holder puts on the Lease (e.g. its internal URL). */
  annotations?: Record<string, string>;
  leaseDurationSeconds?: number;
  renewDeadlineSeconds?: number;
  retryPeriodSeconds?: number;
  onStartedLeading?: () => void | Promise<void>;
  onStoppedLeading?: () => void | Promise<void>;
  log?: LeaderLog;
  /** Milliseconds; tests may pass another clock. */
  now?: () => number;
}

/** What a Lease says about its holder, judged by the reader's clock. */
export interface LeaseHolder {
  identity: string;
  annotations: Record<string, string>;
  /** When the holder last renewed (its own clock). */
  renewTime: Date | undefined;
}

/** Something run only on the leader. `start` may be called again after `stop` (a regained leadership). */
export interface LeaderLoop {
  start(): void | Promise<void>;
  stop(): Promise<void>;
}

interface Listener {
  started(): void | Promise<void>;
  stopped(): void | Promise<void>;
}

const noLog: LeaderLog = { info: () => undefined, warn: () => undefined };

export class LeaderElector {
  readonly namespace: string;
  readonly name: string;
  readonly identity: string;
  private readonly o: LeaderElectionOptions;
  private readonly leaseMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryMs: number;
  private readonly now: () => number;
  private readonly log: LeaderLog;
  private readonly listeners = new Set<Listener>();
  private leading = false;
  private lastRenew = 0;
  /** The Lease as last seen changing: its holder and resourceVersion (`key`), and when by our clock. */
  private observed: { key: string; holder: string; at: number } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private ticking: Promise<void> = Promise.resolve();
  /** Leadership transitions run one at a time, in order (start → stop → start …). */
  private transitions: Promise<void> = Promise.resolve();

  constructor(o: LeaderElectionOptions) {
    this.o = o;
    this.namespace = o.namespace;
    this.name = o.name;
    this.identity = o.identity;
    this.leaseMs = (o.leaseDurationSeconds ?? 15) * 1000;
    this.renewDeadlineMs = (o.renewDeadlineSeconds ?? 10) * 1000;
    this.retryMs = (o.retryPeriodSeconds ?? 2) * 1000;
    if (!(this.renewDeadlineMs < this.leaseMs)) throw new Error(`lease ${o.name}: renewDeadline must be shorter than leaseDuration`);
    if (!(this.retryMs < this.renewDeadlineMs)) throw new Error(`lease ${o.name}: retryPeriod must be shorter than renewDeadline`);
    this.now = o.now ?? Date.now;
    this.log = o.log ?? noLog;
    if (o.onStartedLeading || o.onStoppedLeading) {
      this.listeners.add({ started: o.onStartedLeading ?? (() => undefined), stopped: o.onStoppedLeading ?? (() => undefined) });
    }
  }

  /**
   * True while this replica holds the Lease and renewed it within renewDeadline. Check it right before an
   * action only the leader may take (a signature): a leader cut off from the API server stops in time.
   */
  isLeader(): boolean {
    return this.leading && this.now() - this.lastRenew < this.renewDeadlineMs;
  }

  /**
   * For readiness: ok while this replica leads, or while another holder is seen renewing the Lease (its
   * resourceVersion changed within the lease duration). Not ok when no leader is known: none holds the Lease, the
   * holder stopped renewing, or this replica cannot read the Lease.
   */
  leaderStatus(): { ok: true } | { ok: false; detail: string } {
    if (this.isLeader()) return { ok: true };
    const o = this.observed;
    if (o && o.holder !== "" && this.now() - o.at <= this.leaseMs) return { ok: true };
    return { ok: false, detail: `no leader of Lease ${this.namespace}/${this.name} is known (${!o ? "the Lease has not been read" : o.holder === "" ? "it is not held" : `${o.holder} has not renewed it within ${this.leaseMs / 1000} s`})` };
  }

  /** Begin campaigning (idempotent). */
  start(): void {
    if (this.running) return;
    this.running = true;
    const loop = (): void => {
      if (!this.running) return;
      this.ticking = this.tick().catch((e: unknown) => this.log.warn({ lease: this.name, err: (e as Error).message }, "leader election: lease request failed"));
      void this.ticking.then(() => {
        if (this.running) this.timer = setTimeout(loop, this.retryMs);
      });
    };
    loop();
  }

  /** Stop campaigning; if leading, step down (listeners' stop first) and release the Lease. */
  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    await this.ticking;
    const wasLeading = this.leading;
    this.setLeading(false);
    await this.transitions;
    if (wasLeading) await this.release();
  }

  /**
   * Stop campaigning WITHOUT stepping down or releasing: what a crashed or frozen process looks like to the
   * others (they take over once the Lease lapses). For tests; listeners are not told.
   */
  async halt(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    await this.ticking;
    this.leading = false;
  }

  /** Wait until the transitions queued so far have run (tests, start-up). */
  settled(): Promise<void> {
    return this.transitions;
  }

  /** Add a listener; it is started at once if this replica leads. Returns its removal (stopping it if started). */
  subscribe(l: Listener): () => Promise<void> {
    this.listeners.add(l);
    if (this.leading) this.transitions = this.transitions.then(() => this.call("start", l));
    return async () => {
      const had = this.listeners.delete(l);
      if (had && this.leading) {
        this.transitions = this.transitions.then(() => this.call("stop", l));
        await this.transitions;
      }
    };
  }

  /** The current holder, read fresh; undefined when nobody holds it or the holder let it lapse (by renewTime). */
  async holder(): Promise<LeaseHolder | undefined> {
    const lease = await this.read();
    const spec = lease?.spec;
    if (!spec?.holderIdentity) return undefined;
    const renew = spec.renewTime ? new Date(spec.renewTime) : undefined;
    const duration = (spec.leaseDurationSeconds ?? 0) * 1000;
    if (!renew || renew.getTime() + duration < this.now()) return undefined;
    return { identity: spec.holderIdentity, annotations: { ...(lease?.metadata?.annotations ?? {}) }, renewTime: renew };
  }

  // ---- internals ----------------------------------------------------------------------------------------

  private async read(): Promise<V1Lease | undefined> {
    try {
      return await this.o.kube.coordination.readNamespacedLease({ name: this.name, namespace: this.namespace });
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  private body(prev: V1Lease | undefined, acquire: boolean): V1Lease {
    const now = new V1MicroTime(this.now());
    const spec = prev?.spec ?? {};
    const transitions = spec.leaseTransitions ?? 0;
    return {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: {
        name: this.name,
        namespace: this.namespace,
        labels: { ...OWNER_LABELS },
        annotations: { ...(this.o.annotations ?? {}) },
        ...(prev?.metadata?.resourceVersion ? { resourceVersion: prev.metadata.resourceVersion } : {}),
      },
      spec: {
        holderIdentity: this.identity,
        leaseDurationSeconds: Math.ceil(this.leaseMs / 1000),
        acquireTime: acquire ? now : (spec.acquireTime ?? now),
        renewTime: now,
        leaseTransitions: acquire && prev ? transitions + 1 : transitions,
      },
    };
  }

  private async tick(): Promise<void> {
    let lease: V1Lease | undefined;
    try {
      lease = await this.read();
    } catch (e) {
      this.checkDeadline();
      throw e;
    }
    const t = this.now();
    if (!lease) {
      await this.write(undefined, true);
      return;
    }
    const spec = lease.spec ?? {};
    const key = `${spec.holderIdentity ?? ""}|${lease.metadata?.resourceVersion ?? ""}`;
    if (this.observed?.key !== key) this.observed = { key, holder: spec.holderIdentity ?? "", at: t };
    if (spec.holderIdentity === this.identity) {
      await this.write(lease, false);
      return;
    }
    // another holder (or none): we may not be leading, whatever we thought
    if (this.leading) {
      this.log.warn({ lease: this.name, holder: spec.holderIdentity }, "leader election: lease taken by another holder");
      this.setLeading(false);
    }
    const released = !spec.holderIdentity;
    const lapsed = t - this.observed.at > (spec.leaseDurationSeconds ?? 0) * 1000;
    if (released || lapsed) await this.write(lease, true);
  }

  /** Create (prev undefined) or replace with prev's resourceVersion; a 409 means another candidate won. */
  private async write(prev: V1Lease | undefined, acquire: boolean): Promise<void> {
    const body = this.body(prev, acquire);
    try {
      if (prev) await this.o.kube.coordination.replaceNamespacedLease({ name: this.name, namespace: this.namespace, body });
      else await this.o.kube.coordination.createNamespacedLease({ namespace: this.namespace, body });
    } catch (e) {
      if (isConflict(e)) {
        if (this.leading) {
          this.log.warn({ lease: this.name }, "leader election: renewal lost a race; stepping down");
          this.setLeading(false);
        }
        return;
      }
      this.checkDeadline();
      throw e;
    }
    this.lastRenew = this.now();
    if (!this.leading) {
      this.log.info({ lease: this.name, identity: this.identity, transitions: body.spec?.leaseTransitions }, "leader election: leading");
      this.setLeading(true);
    }
  }

  /** A leader that cannot renew steps down once renewDeadline has passed since its last renewal. */
  private checkDeadline(): void {
    if (this.leading && this.now() - this.lastRenew >= this.renewDeadlineMs) {
      this.log.warn({ lease: this.name }, "leader election: could not renew within the deadline; stepping down");
      this.setLeading(false);
    }
  }

  private setLeading(v: boolean): void {
    if (this.leading === v) return;
    this.leading = v;
    const which = v ? "start" : "stop";
    for (const l of [...this.listeners]) this.transitions = this.transitions.then(() => this.call(which, l));
  }

  private async call(which: "start" | "stop", l: Listener): Promise<void> {
    try {
      await (which === "start" ? l.started() : l.stopped());
    } catch (e) {
      this.log.warn({ lease: this.name, err: (e as Error).message }, `leader election: ${which} of a leader-only task failed`);
    }
  }

  private async release(): Promise<void> {
    try {
      const lease = await this.read();
      if (!lease || lease.spec?.holderIdentity !== this.identity) return;
      const body: V1Lease = {
        ...lease,
        spec: { ...lease.spec, holderIdentity: "", leaseDurationSeconds: 1, renewTime: new V1MicroTime(this.now()) },
      };
      await this.o.kube.coordination.replaceNamespacedLease({ name: this.name, namespace: this.namespace, body });
      this.log.info({ lease: this.name, identity: this.identity }, "leader election: released");
    } catch (e) {
      // it lapses on its own after leaseDuration
      this.log.warn({ lease: this.name, err: (e as Error).message }, "leader election: release failed");
    }
  }
}

/**
 * Runs `loop` while `elector` leads: started on gaining leadership (at once if already leading), stopped on
 * losing it. Returns the function that detaches it (stopping the loop if running).
 */
export function runWhileLeader(elector: LeaderElector, loop: LeaderLoop): () => Promise<void> {
  return elector.subscribe({ started: () => loop.start(), stopped: () => loop.stop() });
}
