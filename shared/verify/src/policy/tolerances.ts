/**
 * Firmware-quirk tolerances: named, narrow exceptions to a strict reading of the PC Client Platform Firmware
 * Profile that real machines need (like go-attestation's workaround table, attest/eventlog_workarounds.go). A
 * profile lists the ones it accepts under `tolerances:`; none applies unless listed. Each entry names the real
 * log it came from (a file of shared/conformance) and the events that show the quirk; policy/tolerances.test.ts
 * checks that this log is refused by the strict rule without the tolerance, passes that rule with it, and that
 * the attack the strict rule exists for is still refused with it.
 */
import { EFI_ACTION, EV } from "../eventlog/events.js";
import type { InterpretOptions } from "../eventlog/interpret.js";

export interface Tolerance {
  /** What the firmware does, and why the strict rule refuses it. */
  description: string;
  /** The real log it came from (path under shared/conformance) and its events that show the quirk. */
  source: { log: string; events: readonly number[]; what: string };
  effect:
    | { kind: "event-type"; pcr: number; types: readonly number[] }
    | { kind: "unlogged-exit-boot-services"; actions: readonly string[] }
    | { kind: "scrtm-separator-digest" };
}

export const TOLERANCES = {
  "pcr0-post-code": {
    description:
      "firmware volumes measured into PCR 0 as EV_POST_CODE (with a UEFI_PLATFORM_FIRMWARE_BLOB as data) instead of EV_EFI_PLATFORM_FIRMWARE_BLOB(2) or EV_POST_CODE2; PCR 0 only",
    source: { log: "eventlogs/tpm2-tools/event-postcode.bin", events: [2], what: "event 2 (PCR 0, EV_POST_CODE), 16 bytes: base and length of a firmware volume" },
    effect: { kind: "event-type", pcr: 0, types: [EV.POST_CODE] },
  },
  "unlogged-exit-boot-services": {
    description:
      "firmware extends PCR 5 with the Exit-Boot-Services EV_EFI_ACTION strings without logging them; PCR 5 replays only with those exact strings appended, nothing else",
    source: {
      log: "eventlogs/go-attestation/ebs_event_missing_eventlog.bin",
      events: [],
      what: "PCR 5 (SHA-1) replays to the quoted value only after H(\"Exit Boot Services Invocation\") and H(\"Exit Boot Services Returned with Success\") (go-attestation TestEBSVerifyWorkaround)",
    },
    effect: { kind: "unlogged-exit-boot-services", actions: [EFI_ACTION.EXIT_BOOT_SERVICES_INVOCATION, EFI_ACTION.EXIT_BOOT_SERVICES_SUCCESS] },
  },
  "boot-guard-scrtm-separator-digest": {
    description: "Intel Boot Guard measures an S-CRTM component (EV_S_CRTM_CONTENTS, PCR 0) whose digest is a separator's, H(00000000); PCR 0 and that type only",
    source: { log: "eventlogs/go-tpm-tools/glinux-alex.bin", events: [4], what: 'event 4 (PCR 0, EV_S_CRTM_CONTENTS, "FIT Type 0x2D"), digest SHA-256(00000000)' },
    effect: { kind: "scrtm-separator-digest" },
  },
} as const satisfies Record<string, Tolerance>;

export type ToleranceName = keyof typeof TOLERANCES;
export const TOLERANCE_NAMES = Object.keys(TOLERANCES) as [ToleranceName, ...ToleranceName[]];

/** What a profile's tolerances let interpretation accept. */
export function interpretOptions(names: readonly ToleranceName[]): InterpretOptions {
  const out: { extraEventTypes: NonNullable<InterpretOptions["extraEventTypes"]>[number][]; scrtmSeparatorDigest?: { tolerance: string } } = { extraEventTypes: [] };
  for (const name of names) {
    const e: Tolerance["effect"] = TOLERANCES[name].effect;
    if (e.kind === "event-type") out.extraEventTypes.push({ pcr: e.pcr, types: e.types, tolerance: name });
    if (e.kind === "scrtm-separator-digest") out.scrtmSeparatorDigest = { tolerance: name };
  }
  return out;
}

/** The tolerance that accepts a replay match needing the unlogged `actions` in PCR 5, if the profile lists one. */
export function ebsTolerance(names: readonly ToleranceName[], actions: readonly string[]): ToleranceName | undefined {
  return names.find((n) => {
    const e: Tolerance["effect"] = TOLERANCES[n].effect;
    return e.kind === "unlogged-exit-boot-services" && e.actions.length === actions.length && e.actions.every((a, i) => a === actions[i]);
  });
}
