/**
 * Whether an event's digests vouch for its data: for the event types whose digest is H(data) (separators,
 * EFI actions, UEFI variables, GPT), data may be interpreted only when every digest we can compute equals
 * the hash of the data (google/go-attestation docs/event-log-disclosure.md).
 */
import { digest } from "../crypto/hash.js";
import { isHashAlg } from "../tcg/constants.js";
import type { TcgEvent } from "./parse.js";

function same(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

/** "ok" when every computable digest equals H(bytes); "mismatch" otherwise; "none" when no digest is computable. */
export function digestsCover(ev: TcgEvent, bytes: Uint8Array): "ok" | "mismatch" | "none" {
  let checked = 0;
  for (const d of ev.digests) {
    if (!isHashAlg(d.hashAlg)) continue;
    checked++;
    if (!same(digest(d.hashAlg, bytes), d.digest)) return "mismatch";
  }
  return checked === 0 ? "none" : "ok";
}

/** Digests of constant inputs, by the input object's identity then algorithm. */
const memo = new WeakMap<Uint8Array, Map<number, Uint8Array>>();
/**
 * H(bytes) for small constant inputs (separator values, action strings), computed once per algorithm. `bytes`
 * must be a constant (module-level, never modified): the memo is keyed by the object, not by its contents.
 */
export function constantDigest(alg: number, bytes: Uint8Array): Uint8Array {
  let byAlg = memo.get(bytes);
  if (!byAlg) memo.set(bytes, (byAlg = new Map()));
  let d = byAlg.get(alg);
  if (!d) byAlg.set(alg, (d = digest(alg, bytes)));
  return d;
}

/** Whether any computable digest of the event equals H(bytes) — used to spot look-alikes of constant events. */
export function anyDigestIs(ev: TcgEvent, bytes: Uint8Array): boolean {
  for (const d of ev.digests) {
    if (isHashAlg(d.hashAlg) && same(constantDigest(d.hashAlg, bytes), d.digest)) return true;
  }
  return false;
}
