/**
 * The CA signer as a single leader (a YubiKey is one device): only the holder of the `fleetd-ca-signer` Lease
 * opens the PKCS#11 session (and so holds the PIN) and signs; it opens on gaining the Lease and closes on
 * losing it, through the same queue the signatures go through, so a close waits for the issuance in flight and
 * nothing is signed after leadership was lost. Every other replica forwards the issuance to the leader.
 *
 * Fail closed: no leader, a leader that refuses, a forward that fails or an answer that does not verify means
 * nothing is issued; the attestation gets a clear error (HTTP 503 `unavailable`, check `ca.signer`) and the
 * node's journal says why.
 */
import { type MaybeOutage, Unavailable } from "@fleetd/platform/outage";
import { type CertificateSigner, SerialQueue } from "@fleetd/platform/pki";
import type { LeaderElector } from "@fleetd/platform/kube";
import type { Issuer, Journal } from "@fleetd/platform/fleet";
import type { IssueRequest, IssueResult } from "./wire.js";

export class CaUnavailable extends Error implements MaybeOutage {
  override readonly name = "CaUnavailable";
  constructor(
    readonly code: "not-leader" | "no-leader" | "signer-unavailable" | "forward-failed",
    message: string,
  ) {
    super(message);
  }

  /** Every way the CA could not sign here is an outage: nothing was issued, the request may be retried. */
  outage(): Unavailable {
    return new Unavailable("signer-unavailable", this.message);
  }
}

/** An open signer (a PKCS#11 session logged in with the PIN) and how to close it. */
export interface OpenSigner extends CertificateSigner {
  readonly description: string;
  close(): Promise<void>;
}

export interface LeaderIssuerLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface LeaderIssuerDeps {
  elector: Pick<LeaderElector, "isLeader" | "subscribe" | "identity">;
  /** Opens the token (and checks its key is the current CA's); called only while leading. */
  openSigner: () => Promise<OpenSigner>;
  /** The issuer over an open signer (PkiIssuer with the bundle state). */
  issuerFor: (signer: CertificateSigner) => Issuer;
  /** Sends the issuance to the leader (forward.ts). */
  forward: (req: IssueRequest) => Promise<IssueResult>;
  journal?: Journal;
  log: LeaderIssuerLog;
}

export class LeaderIssuer implements Issuer {
  private readonly queue = new SerialQueue();
  private open: { signer: OpenSigner; issuer: Issuer } | undefined;
  private detach: (() => Promise<void>) | undefined;

  constructor(private readonly d: LeaderIssuerDeps) {}

  /** Follow the Lease: open the signer on gaining it, close it on losing it. */
  attach(): void {
    this.detach ??= this.d.elector.subscribe({
      started: () =>
        this.queue.run(async () => void (await this.openNow())).catch((e: unknown) => {
          // stays closed: the next issuance tries again, and fails closed if the token still cannot be opened
          this.d.log.error({ err: e }, "CA signer: leading, but the token could not be opened");
        }),
      stopped: () => this.queue.run(() => this.closeNow()),
    });
  }

  /** True while this replica has the token open (tests: never two at once). */
  get signerOpen(): boolean {
    return this.open !== undefined;
  }

  async issue(req: IssueRequest): Promise<IssueResult> {
    try {
      if (this.d.elector.isLeader()) {
        try {
          return await this.issueLocal(req);
        } catch (e) {
          if (!(e instanceof CaUnavailable && e.code === "not-leader")) throw e;
          // lost the Lease while queued: the new leader signs
        }
      }
      return await this.d.forward(req);
    } catch (e) {
      const err = e instanceof CaUnavailable ? e : new CaUnavailable("signer-unavailable", `CA signer failed: ${(e as Error).message}`);
      this.d.log.warn({ node: req.node, code: err.code, detail: err.message }, "issuance failed; nothing issued");
      await this.d.journal
        ?.record(req.node, { kind: "danger", summary: `evidence accepted, but nothing was issued: the CA signer is unavailable (${err.code}): ${err.message}`, reasons: [{ check: "ca.signer", detail: err.message }] })
        .catch((je: unknown) => this.d.log.error({ err: (je as Error).message }, "journal entry failed"));
      throw err;
    }
  }

  /** Sign here; only on the leader (the internal endpoint calls this for forwarded requests). */
  issueLocal(req: IssueRequest): Promise<IssueResult> {
    return this.queue.run(async () => {
      if (!this.d.elector.isLeader()) throw new CaUnavailable("not-leader", `replica ${this.d.elector.identity} does not hold the CA signer lease`);
      const open = this.open ?? (await this.openNow());
      return open.issuer.issue(req);
    });
  }

  /** Detach from the Lease and close the token (after the issuance in flight). */
  async close(): Promise<void> {
    const detach = this.detach;
    this.detach = undefined;
    await detach?.();
    await this.queue.run(() => this.closeNow());
  }

  private async openNow(): Promise<{ signer: OpenSigner; issuer: Issuer }> {
    if (this.open) return this.open;
    let signer: OpenSigner;
    try {
      signer = await this.d.openSigner();
    } catch (e) {
      throw new CaUnavailable("signer-unavailable", `the CA token cannot be opened on the leader: ${(e as Error).message}`);
    }
    this.open = { signer, issuer: this.d.issuerFor(signer) };
    this.d.log.info({ signer: signer.description }, "CA signer open (this replica leads)");
    return this.open;
  }

  private async closeNow(): Promise<void> {
    const open = this.open;
    this.open = undefined;
    if (!open) return;
    await open.signer.close();
    this.d.log.info({ signer: open.signer.description }, "CA signer closed (leadership ended)");
  }
}
