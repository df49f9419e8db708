/** The server's wiring and settings, shared by the challenge, evidence and confirm steps. */
import type { CaStore } from "../../ek/store.js";
import type { AttestationStore } from "../../state/store.js";
import type { Admission, BootstrapTokens, ConfigRenderer, Inventory, Issuer, Journal, MeasuredBoot, ModeGates } from "./deps.js";

export interface ServerSettings {
  /** Session (nonce) lifetime; default 5 minutes. */
  sessionTtlMs: number;
  /** Install code lifetime; default 2 hours. */
  installCodeTtlMs: number;
  /** The profile every attestation from the provisioning OS is judged by. */
  provisioningProfile: string;
  gates: ModeGates;
  /** Allow EK certificates past notAfter (EK certificates are long-lived identity documents); default false. */
  allowExpiredEkCertificates: boolean;
}

export interface ServerContext {
  store: AttestationStore;
  inventory: Inventory;
  journal: Journal;
  measuredBoot: MeasuredBoot;
  issuer: Issuer;
  renderer: ConfigRenderer;
  bootstrapTokens: BootstrapTokens;
  admission: Admission;
  ekRoots: CaStore;
  settings: ServerSettings;
  now: () => Date;
  random: (n: number) => Uint8Array;
}

/** A refusal: HTTP status plus the failed checks. */
export class Refused extends Error {
  override readonly name = "Refused";
  constructor(
    readonly status: 400 | 403 | 404 | 409 | 410,
    readonly error: "refused" | "pending" | "bad-request" | "expired",
    readonly reasons: { check: string; detail: string; pcr?: number; event?: number }[],
    /** The node it concerns, when known (for the journal). */
    readonly node?: string,
  ) {
    super(reasons.map((r) => `${r.check}: ${r.detail}`).join("; "));
  }
}
