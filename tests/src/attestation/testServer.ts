/**
 * What the attestation worlds' servers share, the real one (world.ts: NetBox, SoftHSM2) and the in-memory one
 * (tests/src/unit/platform/protocol/memoryWorld.ts): the state store that counts install codes, the service's
 * test settings, and talos-config-server's app over a service with the test limits.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import type { Inventory } from "@fleetd/platform/fleet";
import { AttestationService, TalosRenderer, type ServerContext } from "@fleetd/platform/protocol/server";
import { DEFAULT_MODE_GATES } from "@fleetd/platform/fleet";
import { type AttestationStore, type StepRecord, SqliteAttestationStore } from "@fleetd/platform/state";
import type { TalosSiteConfig } from "@fleetd/platform/talos/config";
import { createApp } from "@fleetd/talos-config-server/app";
import type { createMetrics } from "@fleetd/talos-config-server/metrics";
import { StoreLimiter } from "@fleetd/talos-config-server/rateLimit";
import { stillStaged } from "@fleetd/talos-config-server/configFetch";

/** The SQLite store, counting the install codes committed into it. */
export class CountingStore extends SqliteAttestationStore {
  installCodes = 0;
  override async commit(step: StepRecord, now: number): Promise<boolean> {
    const ok = await super.commit(step, now);
    if (ok && step.installCode) this.installCodes++;
    return ok;
  }
}

/** The limits a test server may change (the rest are the tests' fixed settings). */
export interface TestLimits {
  /** The pending-EK cap (default 1000). */
  maxPendingEks?: number;
  /**
   * A device's journal gets one unauthenticated refusal per this window (default 1 ms: the refusal matrix
   * checks every refusal's entry; the limit itself is tested on a second server with the production window).
   */
  unauthenticatedJournalWindowMs?: number;
  /** A latched worker's cordon is queued again at most once per this window (default 1 ms: renew.it re-cordons). */
  cordonReassertWindowMs?: number;
  /** A session claim older than this is a dead request's (default 60 s). */
  claimStaleMs?: number;
  /** Attestation requests per address per minute (default: effectively unlimited, for the suites). */
  attestRequestsPerMinute?: number;
}

/** The attestation service with the tests' settings over `deps` (a HookOS provisioning profile, configs for `talosSite`). */
export function testAttestationService(
  deps: Omit<ServerContext, "settings" | "renderer" | "random">,
  talosSite: TalosSiteConfig,
  limits: TestLimits = {},
): AttestationService {
  return new AttestationService({
    ...deps,
    renderer: new TalosRenderer(talosSite, 24 * 3600_000, deps.now),
    settings: {
      sessionTtlMs: 5 * 60_000,
      installCodeTtlMs: 2 * 3600_000,
      provisioningProfile: "hookos",
      gates: DEFAULT_MODE_GATES,
      allowExpiredEkCertificates: false,
      maxPendingEks: limits.maxPendingEks ?? 1000,
      renewBeforeMs: 7 * 86_400_000,
      unauthenticatedJournalWindowMs: limits.unauthenticatedJournalWindowMs ?? 1,
      cordonReassertWindowMs: limits.cordonReassertWindowMs ?? 1,
      claimStaleMs: limits.claimStaleMs ?? 60_000,
    },
    random: (n) => new Uint8Array(randomBytes(n)),
  });
}

/** talos-config-server's public app over `service` and `store`, with the tests' limits. */
export function testConfigApp(o: {
  service: AttestationService;
  store: AttestationStore;
  inventory: Pick<Inventory, "reread">;
  log: Logger;
  metrics: ReturnType<typeof createMetrics>;
  outbox: { kick(): void; flush(deviceId: number, opts?: { journal?: boolean }): Promise<boolean> };
  limits?: TestLimits;
}): ReturnType<typeof createApp> {
  return createApp({
    service: o.service,
    store: o.store,
    limiter: new StoreLimiter(o.store, { max: 5, windowMs: 60_000 }, { max: o.limits?.attestRequestsPerMinute ?? 10_000, windowMs: 60_000 }),
    log: o.log,
    metrics: o.metrics,
    outbox: o.outbox,
    stillWanted: (node) => stillStaged(o.inventory, node),
    now: () => Date.now(),
    staleClaimMs: 60_000,
    bodyLimit: "2mb",
  });
}
