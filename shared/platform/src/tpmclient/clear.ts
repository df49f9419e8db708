/**
 * Clearing the TPM's owner hierarchy at retirement (TPM2_Clear with the lockout hierarchy, Part 3 §24.6): the
 * storage primary seed changes, so every key created under the old SRK — the LDevID and LAK blobs SPIRE and
 * fleetd kept — no longer loads; owner and endorsement auth values and their objects go; the endorsement
 * primary seed stays (the EK, and its certificate in platform-created NV, are unchanged).
 * Done only with an empty lockout authorization, as in HookOS before an OS took ownership; refused with the
 * reason when TPMA_PERMANENT says it cannot work: disableClear set, a lockout auth value set, or in lockout.
 */
import { TPM_PT, TPM2_Clear, TPMA_PERMANENT } from "@fleetd/verify/tpm";
import { TPM_RH } from "@fleetd/verify/tcg";
import type { TpmClient } from "./client.js";
import { passwordAuth } from "./sessions.js";

export type PermanentFlags = { [K in keyof typeof TPMA_PERMANENT]: boolean };

export async function readPermanent(tpm: TpmClient): Promise<PermanentFlags> {
  const props = await tpm.getProperties(TPM_PT.PERMANENT, 1);
  const v = props.get(TPM_PT.PERMANENT);
  if (v === undefined) throw new ClearRefused("tpm-permanent-unreadable", "TPM2_GetCapability returned no TPM_PT_PERMANENT");
  return Object.fromEntries(Object.entries(TPMA_PERMANENT).map(([k, bit]) => [k, (v & bit) !== 0])) as PermanentFlags;
}

export class ClearRefused extends Error {
  override readonly name = "ClearRefused";
  constructor(readonly code: "tpm-clear-disabled" | "tpm-lockout-auth-set" | "tpm-in-lockout" | "tpm-permanent-unreadable", message: string) {
    super(message);
  }
}

export interface ClearReport {
  before: PermanentFlags;
  after: PermanentFlags;
}

/** TPM2_Clear(TPM_RH_LOCKOUT) with an empty password; ClearRefused (nothing sent) when it cannot succeed. */
export async function clearOwnerHierarchy(tpm: TpmClient): Promise<ClearReport> {
  const before = await readPermanent(tpm);
  if (before.disableClear) {
    throw new ClearRefused("tpm-clear-disabled", "TPMA_PERMANENT.disableClear is set: TPM2_Clear is disabled (an OS ran TPM2_ClearControl); clear it from the firmware setup");
  }
  if (before.lockoutAuthSet) {
    throw new ClearRefused("tpm-lockout-auth-set", "TPMA_PERMANENT.lockoutAuthSet: the lockout hierarchy has an authorization value fleetd does not hold; clear the TPM from the firmware setup");
  }
  if (before.inLockout) {
    throw new ClearRefused("tpm-in-lockout", "TPMA_PERMANENT.inLockout: the TPM is in dictionary-attack lockout; wait for the recovery time or clear it from the firmware setup");
  }
  await tpm.run(TPM2_Clear, [TPM_RH.LOCKOUT], {}, [passwordAuth()]);
  return { before, after: await readPermanent(tpm) };
}
