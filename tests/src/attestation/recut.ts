/**
 * The issue-10 re-cut, for tests: PCR values as the evidence carries them, re-split at other places so that a
 * quote's pcrDigest (which covers only their concatenation) still matches.
 */
import type { PcrValues } from "@fleetd/verify/attest";
import type { PcrWire } from "@fleetd/platform/protocol/client";
import { TPM_ALG } from "@fleetd/verify/tcg";

export const valueBytes = (v: PcrWire): Uint8Array => new Uint8Array(Buffer.from(v.value, "hex"));

const BANK_ALG: Record<string, number> = { sha1: TPM_ALG.SHA1, sha256: TPM_ALG.SHA256, sha384: TPM_ALG.SHA384, sha512: TPM_ALG.SHA512 };

/** Wire values as a bank → PCR → value map (whatever their lengths). */
export function valuesOf(list: PcrWire[]): PcrValues {
  const out: PcrValues = new Map();
  for (const p of list) {
    const alg = BANK_ALG[p.bank] as number;
    const m = out.get(alg) ?? new Map<number, Uint8Array>();
    out.set(alg, m.set(p.pcr, valueBytes(p)));
  }
  return out;
}

/**
 * The re-cut of SHA-256, SHA-384 and SHA-512 PCRs 0–15 (in that selection order) that presents the real SHA-384
 * PCRs 8–15 as SHA-384 PCRs 0–7. Real: sha256 16×32 | sha384 0–7 8×48 | sha384 8–15 8×48 | sha512 16×64.
 * Claimed: sha256 16×56 (its own 512 bytes and sha384 0–7) | sha384 0–7 8×48 = the real sha384 8–15 | sha384 8–15
 * and sha512 0–15, 24 values of 43 or 42 bytes sharing the real sha512's 1024.
 */
export function recutSha384Upper(real: PcrWire[]): PcrWire[] {
  const stream = Buffer.concat(real.map(valueBytes));
  const lengths: number[] = real.map((p) => (p.bank === "sha256" ? 56 : p.bank === "sha384" && p.pcr < 8 ? 48 : 0));
  const rest = lengths.filter((n) => n === 0).length;
  const left = stream.length - lengths.reduce((a, b) => a + b, 0);
  let extra = left % rest;
  for (let i = 0; i < lengths.length; i++) if (lengths[i] === 0) lengths[i] = Math.floor(left / rest) + (extra-- > 0 ? 1 : 0);
  let at = 0;
  const out = real.map((p, i) => {
    const n = lengths[i] as number;
    const value = stream.subarray(at, at + n).toString("hex");
    at += n;
    return { ...p, value };
  });
  if (at !== stream.length) throw new Error("a re-cut keeps every byte");
  return out;
}
