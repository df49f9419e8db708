/**
 * Replay a parsed event log into PCR values, per bank, with the real-world start rules:
 *  - EV_NO_ACTION is never extended;
 *  - PCR0 starts at 00…0N after an EV_NO_ACTION "StartupLocality\0" event with locality N (PFP §10.4.5.3),
 *    and at 00…04 when its first extended event is EV_EFI_HCRTM_EVENT (TPM Library Part 1 §34.3;
 *    tpm2-tools lib/tpm2_eventlog.c, tpm2-tss ifapi_helpers.c);
 *  - when checking against known values, PCR5 may have been extended with the Exit-Boot-Services
 *    EV_EFI_ACTION digests without the firmware logging them (go-attestation eventlog_workarounds.go).
 */
import { bufferOf, digest, pcrExtender } from "../crypto/hash.js";
import { isHashAlg } from "../tcg/constants.js";
import { EFI_ACTION, EV } from "./events.js";
import { eventDigest, type EventLog, type TcgEvent } from "./parse.js";
import type { PcrValues } from "../attest/pcrs.js";

export const STARTUP_LOCALITY_SIGNATURE = "StartupLocality\0";

export interface Pcr0Start {
  /** The last byte of PCR0's initial value. */
  value: number;
  /** Why: a StartupLocality event, an H-CRTM first event, or nothing (0). */
  reason: "zero" | "startup-locality" | "h-crtm";
  /** The event that set it. */
  event?: number;
}

export interface BankReplay {
  alg: number;
  /** Final values for every PCR with at least one extended event, and PCR0 when it starts non-zero. */
  pcrs: Map<number, Uint8Array>;
  /** PCRs that have an extended event without a digest for this bank: they cannot be replayed in it. */
  incomplete: Map<number, number[]>;
}

export interface Replay {
  pcr0Start: Pcr0Start;
  /** Every computable bank the log declares. */
  banks: Map<number, BankReplay>;
  /** Indices of the extended (non-EV_NO_ACTION) events, per PCR, in log order. */
  extended: Map<number, number[]>;
}

/** The locality of an EV_NO_ACTION StartupLocality event, if `ev` is one. */
export function startupLocality(ev: TcgEvent): number | undefined {
  if (ev.type !== EV.NO_ACTION || ev.data.length !== 17) return undefined;
  const sig = bufferOf(ev.data.subarray(0, 16)).toString("latin1");
  return sig === STARTUP_LOCALITY_SIGNATURE ? ev.data[16] : undefined;
}

export function pcr0Start(log: EventLog): Pcr0Start {
  let locality: Pcr0Start | undefined;
  for (const ev of log.events) {
    if (ev.pcr !== 0) continue;
    if (ev.type === EV.NO_ACTION) {
      const l = startupLocality(ev);
      if (l !== undefined && locality === undefined) locality = { value: l, reason: "startup-locality", event: ev.index };
      continue;
    }
    if (ev.type === EV.EFI_HCRTM_EVENT) return { value: 4, reason: "h-crtm", event: ev.index };
    break;
  }
  return locality ?? { value: 0, reason: "zero" };
}

/** A PCR's value at TPM startup: PCR0 per `start`, PCRs 17-22 all-FF (reset to 0 only by a DRTM), others 0. */
export function initialValue(size: number, pcr: number, start: Pcr0Start): Uint8Array {
  const v = new Uint8Array(size);
  if (pcr >= 17 && pcr <= 22) v.fill(0xff);
  if (pcr === 0) v[size - 1] = start.value;
  return v;
}

/** Replay every computable bank of the log. */
export function replayLog(log: EventLog): Replay {
  const start = pcr0Start(log);
  const extended = new Map<number, number[]>();
  for (const ev of log.events) {
    if (ev.type === EV.NO_ACTION) continue;
    let list = extended.get(ev.pcr);
    if (!list) extended.set(ev.pcr, (list = []));
    list.push(ev.index);
  }
  const banks = new Map<number, BankReplay>();
  for (const bank of log.banks) {
    if (!bank.computable) continue;
    const pcrs = new Map<number, Uint8Array>();
    const incomplete = new Map<number, number[]>();
    const extend = pcrExtender(bank.alg);
    if (start.value !== 0) pcrs.set(0, initialValue(bank.size, 0, start));
    for (const ev of log.events) {
      if (ev.type === EV.NO_ACTION) continue;
      const d = eventDigest(ev, bank.alg);
      if (!d) {
        const l = incomplete.get(ev.pcr) ?? [];
        l.push(ev.index);
        incomplete.set(ev.pcr, l);
        continue;
      }
      const cur = pcrs.get(ev.pcr) ?? initialValue(bank.size, ev.pcr, start);
      pcrs.set(ev.pcr, extend(cur, d));
    }
    for (const pcr of incomplete.keys()) pcrs.delete(pcr);
    banks.set(bank.alg, { alg: bank.alg, pcrs, incomplete });
  }
  return { pcr0Start: start, banks, extended };
}

/** The Exit-Boot-Services sequences firmware is known to extend into PCR5 without logging them. */
export const EBS_WORKAROUNDS: readonly (readonly string[])[] = [
  [EFI_ACTION.EXIT_BOOT_SERVICES_INVOCATION, EFI_ACTION.EXIT_BOOT_SERVICES_SUCCESS],
  [EFI_ACTION.EXIT_BOOT_SERVICES_INVOCATION, EFI_ACTION.EXIT_BOOT_SERVICES_FAILURE],
  [EFI_ACTION.EXIT_BOOT_SERVICES_INVOCATION, EFI_ACTION.EXIT_BOOT_SERVICES_FAILURE, EFI_ACTION.EXIT_BOOT_SERVICES_SUCCESS],
];

export type PcrReplayStatus =
  /** The log replays to the expected value. */
  | "match"
  /** The log replays to another value. */
  | "mismatch"
  /** The log extends nothing into this PCR: its value is unexplained (`replayed` is its reset value). */
  | "no-events"
  /** Some event of this PCR lacks a digest for this bank. */
  | "missing-digests"
  /** The log carries no digests of this bank at all (e.g. a SHA-1 format log against SHA-256 PCRs). */
  | "no-bank";

export interface PcrReplayCheck {
  alg: number;
  pcr: number;
  status: PcrReplayStatus;
  expected: Uint8Array;
  replayed?: Uint8Array;
  /** Set when the match needed the Exit-Boot-Services workaround (the unlogged action strings). */
  workaround?: readonly string[];
  /** With `workaround`: what the log alone replays to (a policy that does not tolerate the quirk sees a mismatch). */
  withoutWorkaround?: Uint8Array;
  /** Events that lack this bank's digest (status missing-digests). */
  events?: number[];
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

/** Compare a replay with PCR values from a verified quote, PCR by PCR and bank by bank. */
export function checkReplay(log: EventLog, replay: Replay, expected: PcrValues): PcrReplayCheck[] {
  const out: PcrReplayCheck[] = [];
  for (const [alg, values] of [...expected].sort((a, b) => a[0] - b[0])) {
    const bank = replay.banks.get(alg);
    for (const [pcr, value] of [...values].sort((a, b) => a[0] - b[0])) {
      const base = { alg, pcr, expected: value };
      if (!bank) {
        out.push({ ...base, status: "no-bank" });
        continue;
      }
      const missing = bank.incomplete.get(pcr);
      if (missing) {
        out.push({ ...base, status: "missing-digests", events: missing });
        continue;
      }
      const replayed = bank.pcrs.get(pcr);
      if (!replay.extended.has(pcr)) {
        const size = log.banks.find((b) => b.alg === alg)?.size ?? value.length;
        out.push({ ...base, status: "no-events", replayed: replayed ?? initialValue(size, pcr, replay.pcr0Start) });
        continue;
      }
      if (!replayed) throw new Error(`internal: PCR ${pcr} has events but no replayed value`);
      if (equal(replayed, value)) {
        out.push({ ...base, status: "match", replayed });
        continue;
      }
      const fixed = pcr === 5 && isHashAlg(alg) ? ebsWorkaround(alg, replayed, value) : undefined;
      out.push(fixed ? { ...base, status: "match", replayed: value, workaround: fixed, withoutWorkaround: replayed } : { ...base, status: "mismatch", replayed });
    }
  }
  return out;
}

function ebsWorkaround(alg: number, replayed: Uint8Array, expected: Uint8Array): readonly string[] | undefined {
  for (const seq of EBS_WORKAROUNDS) {
    let v = replayed;
    for (const s of seq) v = digest(alg, v, digest(alg, new Uint8Array(Buffer.from(s, "latin1"))));
    if (equal(v, expected)) return seq;
  }
  return undefined;
}
