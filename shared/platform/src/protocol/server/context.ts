/** The server's wiring and settings, shared by the challenge, evidence and confirm steps. */
import type { Reason } from "@fleetd/verify/attest";
import type { Unavailable } from "../../outage/outage.js";
import type { CaStore } from "@fleetd/verify/ek";
import type { AttestationStore, NodeRef } from "../../state/store.js";
import type { WorkflowGate } from "../../tinkerbell/workflowGate.js";
import type { Admission, BootstrapTokens, ConfigRenderer, Inventory, Issuer, Journal, MeasuredBoot, ModeGates } from "../../fleet/ports.js";
import type { RenewalSettings } from "./renew.js";

export interface ServerSettings {
  /** Session (nonce) lifetime; default 5 minutes. */
  sessionTtlMs: number;
  /** Install code lifetime; default 2 hours. */
  installCodeTtlMs: number;
  /** The profile every attestation from the provisioning OS is judged by. */
  provisioningProfile: string;
  /** The profile a TPM 1.2 machine's provisioning-OS evidence is judged by (default `hookos-tpm12`; a `tpm: "1.2"` profile). */
  tpm12Profile?: string;
  gates: ModeGates;
  /** Allow EK certificates past notAfter (EK certificates are long-lived identity documents); default false. */
  allowExpiredEkCertificates: boolean;
  /** At most this many unknown EK bindings are listed as pending (known ones are refreshed); default 1000. */
  maxPendingEks: number;
  /** Renew an LDevID in `attest` mode when less than this much of its life is left; default 7 days. */
  renewBeforeMs: number;
  /** A device's journal gets at most one unauthenticated refusal per this window; default 10 minutes. */
  unauthenticatedJournalWindowMs: number;
  /** A session claim older than this belongs to a request whose process died (default 60 s). */
  claimStaleMs?: number;
  /**
   * A latched (quarantined) worker's cordon is queued again at most once per this window per device when its agent
   * asks (renew.ts reassertCordon; asking is unauthenticated); default 10 minutes.
   */
  cordonReassertWindowMs?: number;
}

export const DEFAULT_CORDON_REASSERT_WINDOW_MS = 10 * 60_000;

export interface ServerContext {
  store: AttestationStore;
  inventory: Inventory;
  journal: Journal;
  measuredBoot: MeasuredBoot;
  issuer: Issuer;
  renderer: ConfigRenderer;
  bootstrapTokens: BootstrapTokens;
  admission: Admission;
  /** The claimed Workflow must exist in Tinkerbell for this node and mode, and be current (workflowGate.ts). */
  workflows: WorkflowGate;
  /**
   * The outbox worker (outbox/worker.ts): told to deliver after each commit, and asked to deliver a node's queued
   * writes before its gates read NetBox. Absent: effects wait for a worker elsewhere (the gates then refuse to
   * read a NetBox that does not yet hold them). `journal: false`: only the field and status writes (OutboxWorker.flush).
   */
  outbox?: { kick(): void; flush(deviceId: number, opts?: { journal?: boolean }): Promise<boolean> };
  ekRoots: CaStore;
  settings: ServerSettings;
  /** Renewal with runtime attestation (renew.ts); absent: the renewal endpoints refuse. */
  renewal?: RenewalSettings;
  now: () => Date;
  random: (n: number) => Uint8Array;
  /** Counts refusals before activation (a metric; the journal is rate-limited). */
  onUnauthenticatedRefusal?: (step: string, reasons: Reason[]) => void;
  /** A step met a dependency outage and answered 503 (a metric and a log line). */
  onOutage?: (step: string, outage: Unavailable) => void;
}

/**
 * One failed check (attest/verdict.ts Reason). `detail` goes to the machine and must name no inventory value (node name, serial, UUID,
 * switch port, status): the caller may hold nothing but a public EK certificate. `internal` adds what the
 * inventory says, for the NetBox journal only.
 */
export type RefusalReason = Reason;

/** A refusal: HTTP status plus the failed checks. */
export class Refused extends Error {
  override readonly name = "Refused";
  constructor(
    readonly status: 400 | 403 | 404 | 409 | 410 | 429,
    readonly error: "refused" | "pending" | "bad-request" | "expired" | "rate-limited",
    readonly reasons: RefusalReason[],
    /** The node it concerns, when known (for the journal). */
    readonly node?: NodeRef,
    /**
     * The caller proved it holds the node's TPM (credential activation verified). Before that, a refusal is
     * recorded as a metric and a rate-limited log line, and journalled at most once per window per device: an
     * unauthenticated caller cannot fill a device's journal or set its verdict.
     */
    readonly authenticated = false,
    /** Its journal entry is recorded already (with the step's commit, or when the refusal was first made). */
    readonly journalled = false,
  ) {
    super(reasons.map((r) => `${r.check}: ${r.detail}`).join("; "));
  }

  /** This refusal, its journal entry recorded. */
  recorded(): Refused {
    return new Refused(this.status, this.error, this.reasons, this.node, this.authenticated, true);
  }
}
