/**
 * Authentication between talos-config-server replicas (the internal issuance endpoint): a shared secret from a
 * file (`server.ha.peerSecretFile`, at least 32 bytes), HMAC-SHA256 over the request — method, path, the target
 * replica's identity, a timestamp, a random nonce and SHA-256 of the exact body bytes — and, on the answer, over
 * the request's nonce and the answer's body. The verifier refuses a request meant for another replica, a
 * timestamp more than `maxSkewMs` away and a nonce seen inside that window — in the state every replica shares
 * (`once`: the store's recordOnce), so a captured request is accepted once by the fleet, not once per replica —
 * and compares MACs in constant time.
 */
import { createHash, createHmac, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { ctEqual } from "@fleetd/verify/crypto";
import { ConfigError } from "@fleetd/platform/fleet";
import { z } from "zod";

export const PEER_TIMESTAMP = "x-fleetd-peer-timestamp";
export const PEER_NONCE = "x-fleetd-peer-nonce";
export const PEER_SIGNATURE = "x-fleetd-peer-signature";
export const PEER_TARGET = "x-fleetd-peer-target";
const MIN_SECRET_BYTES = 32;

const HEX_MAC = /^[0-9a-f]{64}$/;
/** The headers a peer request carries (openapi-internal.yaml); a request without every one of them is refused. */
export const PeerRequestHeaders = z.object({
  [PEER_TIMESTAMP]: z.string().regex(/^[0-9]{1,12}$/).meta({ description: "Unix seconds." }),
  [PEER_NONCE]: z.string().regex(/^[0-9a-f]{32}$/),
  [PEER_TARGET]: z.string().min(1).max(253).meta({ description: "The identity of the replica the request is for." }),
  [PEER_SIGNATURE]: z.string().regex(HEX_MAC),
});
/** The header on a replica's answer: its MAC over the request's nonce. */
export const PeerResponseSignature = z.string().regex(HEX_MAC);

export class PeerAuthError extends Error {
  override readonly name = "PeerAuthError";
  constructor(
    readonly code: "peer-signature-missing" | "peer-signature-mismatch" | "peer-timestamp-skew" | "peer-nonce-replayed" | "peer-target-mismatch",
    message: string,
  ) {
    super(message);
  }
}

/** The secret file's bytes (surrounding whitespace trimmed); at least 32 bytes. */
export function loadPeerSecret(path: string): Uint8Array {
  let raw: Buffer;
  try {
    raw = readFileSync(path);
  } catch (e) {
    throw new ConfigError(`server.ha.peerSecretFile: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}`);
  }
  const secret = new Uint8Array(Buffer.from(raw.toString("utf8").trim(), "utf8"));
  if (secret.length < MIN_SECRET_BYTES) throw new ConfigError(`server.ha.peerSecretFile: ${path} holds ${secret.length} bytes; at least ${MIN_SECRET_BYTES} are required`);
  return secret;
}

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const mac = (secret: Uint8Array, text: string) => new Uint8Array(createHmac("sha256", secret).update(text, "utf8").digest());
const requestText = (method: string, path: string, target: string, timestamp: string, nonce: string, body: Uint8Array) =>
  `fleetd-peer-request-v2\n${method.toUpperCase()}\n${path}\n${target}\n${timestamp}\n${nonce}\n${sha256(body)}`;
const responseText = (nonce: string, status: number, body: Uint8Array) => `fleetd-peer-response-v1\n${nonce}\n${status}\n${sha256(body)}`;

/** Headers of a request from one replica to another (`target`: the receiving replica's identity). */
export function signPeerRequest(secret: Uint8Array, method: string, path: string, body: Uint8Array, now: number, target: string): { headers: Record<string, string>; nonce: string } {
  const timestamp = String(Math.floor(now / 1000));
  const nonce = randomBytes(16).toString("hex");
  const signature = Buffer.from(mac(secret, requestText(method, path, target, timestamp, nonce, body))).toString("hex");
  return { headers: { [PEER_TIMESTAMP]: timestamp, [PEER_NONCE]: nonce, [PEER_TARGET]: target, [PEER_SIGNATURE]: signature }, nonce };
}

/** The MAC a replica puts on its answer (header PEER_SIGNATURE). */
export function signPeerResponse(secret: Uint8Array, nonce: string, status: number, body: Uint8Array): string {
  return Buffer.from(mac(secret, responseText(nonce, status, body))).toString("hex");
}

const header = (h: Record<string, string | string[] | undefined>, name: string): string | undefined => {
  const v = h[name];
  return typeof v === "string" ? v : undefined;
};
/** Checks an answer's MAC against the request's nonce; throws PeerAuthError. */
export function verifyPeerResponse(secret: Uint8Array, nonce: string, status: number, body: Uint8Array, signature: string | undefined): void {
  if (!signature || !HEX_MAC.test(signature)) throw new PeerAuthError("peer-signature-missing", "the leader's answer carries no MAC");
  if (!ctEqual(new Uint8Array(Buffer.from(signature, "hex")), mac(secret, responseText(nonce, status, body)))) {
    throw new PeerAuthError("peer-signature-mismatch", "the leader's answer does not carry a valid MAC (another peer secret?)");
  }
}

/** A single-use token recorded in the shared state until `expiresAt`; false when seen before (AttestationStore.recordOnce). */
export type RecordOnce = (token: string, expiresAt: number, now: number) => Promise<boolean>;

export class PeerVerifier {
  private readonly seen = new Map<string, number>();

  /**
   * `self`: this replica's identity (a request for another replica is refused). `once`: the shared replay cache;
   * without it (one replica, tests) nonces are remembered in this process.
   */
  constructor(
    private readonly secret: Uint8Array,
    private readonly self: string,
    private readonly once?: RecordOnce,
    private readonly maxSkewMs = 30_000,
    private readonly maxNonces = 100_000,
  ) {}

  /** Verifies a request; returns its nonce (to sign the answer with). Throws PeerAuthError. */
  async verify(method: string, path: string, body: Uint8Array, headers: Record<string, string | string[] | undefined>, now: number): Promise<string> {
    const parsed = PeerRequestHeaders.safeParse({
      [PEER_TIMESTAMP]: header(headers, PEER_TIMESTAMP),
      [PEER_NONCE]: header(headers, PEER_NONCE),
      [PEER_TARGET]: header(headers, PEER_TARGET),
      [PEER_SIGNATURE]: header(headers, PEER_SIGNATURE),
    });
    if (!parsed.success) {
      throw new PeerAuthError("peer-signature-missing", `a peer request needs ${PEER_TIMESTAMP}, ${PEER_NONCE} (32 hex), ${PEER_TARGET} and ${PEER_SIGNATURE} (64 hex)`);
    }
    const { [PEER_TIMESTAMP]: timestamp, [PEER_NONCE]: nonce, [PEER_TARGET]: target, [PEER_SIGNATURE]: signature } = parsed.data;
    if (!ctEqual(new Uint8Array(Buffer.from(signature, "hex")), mac(this.secret, requestText(method, path, target, timestamp, nonce, body)))) {
      throw new PeerAuthError("peer-signature-mismatch", "the request's MAC does not match (another peer secret, or the body was changed)");
    }
    if (target !== this.self) throw new PeerAuthError("peer-target-mismatch", `the request was signed for replica ${target}, not for this one`);
    const at = Number(timestamp) * 1000;
    if (Math.abs(now - at) > this.maxSkewMs) throw new PeerAuthError("peer-timestamp-skew", `the request's timestamp is ${Math.round((now - at) / 1000)} s away from this replica's clock (at most ${this.maxSkewMs / 1000} s)`);
    if (this.once) {
      if (!(await this.once(`peer:${nonce}`, at + this.maxSkewMs, now))) throw new PeerAuthError("peer-nonce-replayed", "this request was already received by a replica (replay)");
      return nonce;
    }
    this.forget(now);
    if (this.seen.has(nonce)) throw new PeerAuthError("peer-nonce-replayed", "this request was already received (replay)");
    if (this.seen.size >= this.maxNonces) throw new PeerAuthError("peer-nonce-replayed", "too many peer requests inside the replay window");
    this.seen.set(nonce, at + this.maxSkewMs);
    return nonce;
  }

  private forget(now: number): void {
    for (const [n, until] of this.seen) if (until < now) this.seen.delete(n);
  }
}
