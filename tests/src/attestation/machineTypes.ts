/**
 * The shapes the test machines share, whatever their TPM: machine.ts drives swtpm through fleetd's TPM client,
 * tests/src/unit/platform/protocol/memoryWorld.ts drives @fleetd/testkit/softwareTpm. Ek, Key and L are each
 * TPM's presented EK, key and certified key.
 */
import type { PcrSelection } from "@fleetd/verify/attest";
import type { ServerTransport, EvidenceWire } from "@fleetd/platform/protocol/client";
import type { ChallengeResponse, Claims } from "@fleetd/platform/protocol";
import type { KeyAlg } from "@fleetd/platform/tpmclient";

/** A machine: its TPM, the server it talks to, its key algorithm and the log of the boot its TPM measured. */
export interface MachineOn<Tpm> {
  tpm: Tpm;
  server: ServerTransport;
  alg: KeyAlg;
  /** The log of the boot its TPM measured. */
  eventLog: Uint8Array;
}

export const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
export const unb64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));

/** A challenged session, as the machine remembers it. */
export interface Session<Ek, Key> {
  claims: Claims;
  /** The EKs the machine can activate with (all it has, whatever it presented). */
  eks: Ek[];
  ak: Key;
  response: ChallengeResponse;
  nonce: Uint8Array;
}

export interface ChallengeOptions<Ek, Key> {
  /** The EKs to present (default: every EK with a certificate, as the honest client does). */
  present?: Ek[];
  /** The AK to present (default: a fresh one). */
  ak?: Key;
}

/** The evidence of a challenged session and the keys it certifies; not sent yet. */
export interface Evidence<L> {
  body: EvidenceWire;
  ldevid: L;
  lak: L;
}

/** How the evidence differs from an honest machine's (each default: what the honest client sends). */
export interface EvidenceOptions<L> {
  /** Claims the quote's extraData is computed over (default: the claims of the challenge). */
  quoteClaims?: Claims;
  /** PCRs the TPM quotes (default: SHA-256 0–15). */
  quoteSelection?: PcrSelection[];
  /** PCRs whose values are sent (default: the quoted ones). */
  sendPcrs?: PcrSelection[];
  /** The event log sent (default: the machine's own). */
  eventLog?: Uint8Array;
  /** Send this LDevID, certify included, instead of making one (e.g. one from an earlier session). */
  ldevid?: L;
}
