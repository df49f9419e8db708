/**
 * Reading and extending PCRs. TPM2_PCR_Read returns at most 8 digests per call and says which PCRs it read;
 * pcrRead asks again for the rest, and starts over if the PCR update counter moved in between (so the values
 * are one consistent snapshot).
 */
import { bankName, selectionFromBitmaps, selectionToBitmaps, type PcrSelection, type PcrValues } from "@fleetd/verify/attest";
import { DIGEST_SIZES } from "@fleetd/verify/tcg";
import type { TpmClient } from "./client.js";
import { TpmClientError } from "./errors.js";

export interface PcrSnapshot {
  updateCounter: number;
  values: PcrValues;
}

export async function pcrRead(tpm: TpmClient, selection: PcrSelection[]): Promise<PcrSnapshot> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const values: PcrValues = new Map();
    let remaining = selection.map((s) => ({ hash: s.hash, pcrs: [...new Set(s.pcrs)].sort((a, b) => a - b) })).filter((s) => s.pcrs.length > 0);
    let counter: number | undefined;
    let consistent = true;
    for (let round = 0; remaining.length > 0; round++) {
      if (round > 64) throw new TpmClientError("unexpected", "PCR_Read made no progress");
      const out = await tpm.pcrRead(selectionToBitmaps(remaining));
      if (counter !== undefined && out.updateCounter !== counter) {
        consistent = false;
        break;
      }
      counter = out.updateCounter;
      const got = selectionFromBitmaps(out.selection);
      const flat = got.flatMap((s) => s.pcrs.map((p) => ({ hash: s.hash, pcr: p })));
      if (flat.length !== out.values.length) {
        throw new TpmClientError("unexpected", `PCR_Read selected ${flat.length} PCRs but returned ${out.values.length} digests`);
      }
      if (flat.length === 0) {
        const missing = remaining.map((s) => `${bankName(s.hash)}:${s.pcrs.join(",")}`).join(" ");
        throw new TpmClientError("pcr-unavailable", `the TPM returned no value for ${missing} (bank not allocated?)`);
      }
      flat.forEach(({ hash, pcr }, i) => {
        if (!remaining.some((s) => s.hash === hash && s.pcrs.includes(pcr))) {
          throw new TpmClientError("unexpected", `PCR_Read returned ${bankName(hash)}:${pcr}, which was not asked for (or was already read)`);
        }
        const v = out.values[i] ?? new Uint8Array(0);
        const want = DIGEST_SIZES[hash];
        if (want !== undefined && v.length !== want) {
          throw new TpmClientError("unexpected", `PCR ${bankName(hash)}:${pcr} value is ${v.length} bytes, expected ${want}`);
        }
        const bank = values.get(hash) ?? new Map<number, Uint8Array>();
        values.set(hash, bank);
        bank.set(pcr, v);
      });
      remaining = remaining
        .map((s) => ({ hash: s.hash, pcrs: s.pcrs.filter((p) => !values.get(s.hash)?.has(p)) }))
        .filter((s) => s.pcrs.length > 0);
    }
    if (consistent) return { updateCounter: counter ?? 0, values };
  }
  throw new TpmClientError("unexpected", "PCRs kept changing while being read");
}

/** TPM2_PCR_Extend of one PCR in the given banks. */
export function pcrExtend(tpm: TpmClient, pcr: number, digests: { hashAlg: number; digest: Uint8Array }[]): Promise<void> {
  return tpm.pcrExtend(pcr, digests);
}
