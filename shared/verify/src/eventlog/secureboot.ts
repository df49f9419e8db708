/**
 * Secure Boot state from the PCR7 events (after the caller established that PCR7 replays):
 * the SecureBoot/PK/KEK/db/dbx values before the separator, the authorities (db entries) that verified
 * images before and after the separator, shim's SbatLevel/MokListTrusted, and the EV_EFI_ACTION flags.
 * Rules follow google/go-attestation attest/secureboot.go (ParseSecurebootState), with two differences:
 * structural problems become findings instead of one error, and an empty SecureBoot variable is reported
 * as "not enabled" with a warning (real firmware does this, research/tpm.md §3.4).
 */
import { decodePrefix, ParseError } from "../codec/codec.js";
import { bufferOf } from "../crypto/hash.js";
import { type CertSummary, certSummary } from "./certs.js";
import { digestsCover } from "./digests.js";
import { EFI_ACTION, EV } from "./events.js";
import type { Findings } from "./findings.js";
import { GUID, guidToString } from "./guid.js";
import { describeEvent, type TcgEvent } from "./parse.js";
import { UEFI_VARIABLE_DATA } from "./structures.js";
import { parseSignatureLists, parseVariableData, utf16le, type UefiVariable } from "./uefi.js";

export interface SignatureDatabase {
  event: number;
  certs: (CertSummary & { owner: string })[];
  /** SHA-256 entries (image digests), lowercase hex. */
  sha256: string[];
  /** Entries of other signature types (EFI_CERT_SHA1, X509_SHA256, ...), counted by type GUID. */
  other: { type: string; count: number }[];
}

export interface Authority {
  event: number;
  /** The variable the event names (db for firmware, Shim or db for shim, MokList...). */
  variable: string;
  guid: string;
  owner?: string;
  cert?: CertSummary;
  /** A SHA-256 image digest from db (when an image was allowed by hash rather than by certificate). */
  sha256?: string;
  /** shim's known quirks this event has (empty for a well-formed event). */
  quirks: ("bare-certificate" | "stray-byte")[];
}

export interface SecureBootState {
  /** true only for a SecureBoot variable of exactly one byte 01. */
  enabled: boolean;
  secureBootEvent?: number;
  secureBootValue?: string;
  pk?: SignatureDatabase;
  kek?: SignatureDatabase;
  db?: SignatureDatabase;
  dbx?: SignatureDatabase;
  separatorEvent?: number;
  preSeparatorAuthorities: Authority[];
  postSeparatorAuthorities: Authority[];
  /** shim's SbatLevel variable as measured (text), and its event. */
  sbatLevel?: { event: number; value: string };
  mokListTrusted?: { event: number; value: string };
  /**
   * shim's MokSBState as measured (hex), and its event. shim measures it into PCR 7 only when the variable is set;
   * 01 means the user disabled shim's signature validation (`mokutil --disable-validation`): shim then loads any
   * image, whatever db, MokList or its vendor certificate say.
   */
  mokSbState?: { event: number; value: string };
  dmaProtectionDisabled: boolean;
  debugMode: boolean;
  otherVariables: { event: number; guid: string; name: string }[];
}

const GLOBAL = new Set<string>([GUID.EFI_GLOBAL_VARIABLE, GUID.EFI_GLOBAL_VARIABLE_SWAPPED]);
const DB_VARS: Record<string, "PK" | "KEK" | "db" | "dbx"> = { PK: "PK", KEK: "KEK", db: "db", dbx: "dbx" };

/** Where a finding points: the event's PCR and index. */
function at(ev: TcgEvent): { pcr: number; event: number } {
  return { pcr: ev.pcr, event: ev.index };
}

function hex(b: Uint8Array): string {
  return bufferOf(b).toString("hex");
}

function databaseOf(ev: TcgEvent, v: UefiVariable, f: Findings): SignatureDatabase | undefined {
  const out: SignatureDatabase = { event: ev.index, certs: [], sha256: [], other: [] };
  let lists;
  try {
    lists = parseSignatureLists(v.data);
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
    f.error("signature-list", `${describeEvent(ev)}: ${v.name} is not a valid EFI_SIGNATURE_LIST: ${e.message}`, at(ev));
    return undefined;
  }
  for (const l of lists) {
    if (l.type === GUID.EFI_CERT_X509) {
      for (const [i, e] of l.entries.entries()) {
        const c = certSummary(e.data);
        if (!c) f.error("signature-list", `${describeEvent(ev)}: ${v.name} list at offset ${l.offset}, entry ${i} is not a DER certificate`, at(ev));
        else out.certs.push({ ...c, owner: e.owner });
      }
    } else if (l.type === GUID.EFI_CERT_SHA256) {
      for (const e of l.entries) out.sha256.push(hex(e.data));
    } else {
      const o = out.other.find((x) => x.type === l.type);
      if (o) o.count += l.entries.length;
      else out.other.push({ type: l.type, count: l.entries.length });
    }
  }
  return out;
}

/** The bytes of an authority event that its digests vouch for (shim's stray trailing byte tolerated). */
function vouchedAuthorityBytes(ev: TcgEvent): { bytes: Uint8Array; quirk?: "stray-byte" } | undefined {
  if (digestsCover(ev, ev.data) === "ok") return { bytes: ev.data };
  if (ev.data.length > 0 && digestsCover(ev, ev.data.subarray(0, ev.data.length - 1)) === "ok") {
    return { bytes: ev.data.subarray(0, ev.data.length - 1), quirk: "stray-byte" };
  }
  return undefined;
}

function authorityOf(ev: TcgEvent, f: Findings, state: SecureBootState): Authority | undefined {
  const vouched = vouchedAuthorityBytes(ev);
  if (!vouched) {
    f.error("event-digest", `${describeEvent(ev)}: digest does not match data`, at(ev));
    return undefined;
  }
  let v: UefiVariable;
  try {
    const { value, length } = decodePrefix(UEFI_VARIABLE_DATA, vouched.bytes, "le");
    const rest = vouched.bytes.subarray(length);
    if (rest.some((b) => b !== 0)) {
      f.error("authority-data", `${describeEvent(ev)}: ${rest.length} non-zero bytes after UEFI_VARIABLE_DATA`, at(ev));
      return undefined;
    }
    if (rest.length > 0 && !vouched.quirk) {
      f.error("authority-data", `${describeEvent(ev)}: ${rest.length} bytes after UEFI_VARIABLE_DATA`, at(ev));
      return undefined;
    }
    v = { guid: value.variableName, name: utf16le(value.unicodeName), data: value.variableData };
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
    f.error("authority-data", `${describeEvent(ev)}: not a UEFI_VARIABLE_DATA: ${e.message}`, at(ev));
    return undefined;
  }
  if (v.guid === GUID.SHIM_LOCK && v.name === "MokSBState") {
    judgeMokSbState(ev, v.data, f, state);
    return undefined;
  }
  if (v.guid === GUID.SHIM_LOCK && (v.name === "SbatLevel" || v.name === "MokListTrusted" || v.name === "MokListXTrusted")) {
    const value = v.name === "SbatLevel" ? bufferOf(v.data).toString("latin1").replace(/\0+$/, "") : hex(v.data);
    if (v.name === "SbatLevel") state.sbatLevel = { event: ev.index, value };
    if (v.name === "MokListTrusted") state.mokListTrusted = { event: ev.index, value };
    return undefined;
  }
  const base = { event: ev.index, variable: v.name, guid: v.guid, quirks: vouched.quirk ? [vouched.quirk] : [] };
  if (v.data.length > 16) {
    const c = certSummary(v.data.subarray(16));
    if (c) return { ...base, owner: guidToString(v.data.subarray(0, 16)), cert: c };
  }
  const bare = certSummary(v.data);
  if (bare) {
    f.warning("authority-quirk", `${describeEvent(ev)}: ${v.name} holds a bare certificate without the EFI_SIGNATURE_DATA owner GUID (shim quirk)`, at(ev));
    return { ...base, cert: bare, quirks: [...base.quirks, "bare-certificate"] };
  }
  if (v.data.length === 16 + 32) return { ...base, owner: guidToString(v.data.subarray(0, 16)), sha256: hex(v.data.subarray(16)) };
  f.error("authority-data", `${describeEvent(ev)}: ${v.name} is neither an EFI_SIGNATURE_DATA nor a certificate`, at(ev));
  return undefined;
}

/**
 * MokSBState, its own finding (issue 10): 01 is "shim-validation-disabled", an error in PCR 7, which every profile
 * enforces — so no profile can accept it; 00 is validation on; anything else, or a second measurement, is malformed
 * and refused too (fail closed: shim reads the first byte only, we do not guess).
 */
function judgeMokSbState(ev: TcgEvent, data: Uint8Array, f: Findings, state: SecureBootState): void {
  if (state.mokSbState) {
    f.error("shim-moksbstate", `${describeEvent(ev)}: MokSBState measured again (first at event ${state.mokSbState.event})`, at(ev));
    return;
  }
  state.mokSbState = { event: ev.index, value: hex(data) };
  if (data.length === 1 && data[0] === 1) {
    f.error("shim-validation-disabled", `${describeEvent(ev)}: MokSBState = 1: shim's signature validation is disabled, so shim loads any image`, at(ev));
  } else if (data.length !== 1 || data[0] !== 0) {
    f.error("shim-moksbstate", `${describeEvent(ev)}: MokSBState is ${hex(data) || "<empty>"} (must be one byte 00 or 01)`, at(ev));
  }
}

/** Interpret the PCR7 events of a log (in log order). Only call this when PCR7 replays. */
export function secureBootState(pcr7: TcgEvent[], f: Findings): SecureBootState {
  const state: SecureBootState = {
    enabled: false,
    preSeparatorAuthorities: [],
    postSeparatorAuthorities: [],
    dmaProtectionDisabled: false,
    debugMode: false,
    otherVariables: [],
  };
  const seen = new Map<string, number>();
  let separated = false;
  for (const ev of pcr7) {
    switch (ev.type) {
      case EV.NO_ACTION:
        break;
      case EV.SEPARATOR:
        // Separator data, digest and count are checked for PCRs 0-7 alike in interpret.ts.
        separated = true;
        state.separatorEvent ??= ev.index;
        break;
      case EV.EFI_VARIABLE_DRIVER_CONFIG: {
        if (digestsCover(ev, ev.data) !== "ok") {
          f.error("event-digest", `${describeEvent(ev)}: digest does not match data`, at(ev));
          break;
        }
        let v: UefiVariable;
        try {
          v = parseVariableData(ev.data);
        } catch (e) {
          if (!(e instanceof ParseError)) throw e;
          f.error("variable-data", `${describeEvent(ev)}: not a UEFI_VARIABLE_DATA: ${e.message}`, at(ev));
          break;
        }
        if (separated) {
          f.error("variable-after-separator", `${describeEvent(ev)}: ${v.name} measured after the PCR 7 separator`, at(ev));
          break;
        }
        const isGlobal = GLOBAL.has(v.guid);
        const isDb = v.guid === GUID.EFI_IMAGE_SECURITY_DATABASE;
        const known =
          (v.name === "SecureBoot" && isGlobal) || ((v.name === "PK" || v.name === "KEK") && isGlobal) || ((v.name === "db" || v.name === "dbx") && isDb);
        if (!known) {
          state.otherVariables.push({ event: ev.index, guid: v.guid, name: v.name });
          break;
        }
        const prev = seen.get(v.name);
        if (prev !== undefined) {
          f.error("variable-duplicate", `${describeEvent(ev)}: ${v.name} measured again (first at event ${prev})`, at(ev));
          break;
        }
        seen.set(v.name, ev.index);
        if (v.name === "SecureBoot") {
          state.secureBootEvent = ev.index;
          state.secureBootValue = hex(v.data);
          if (v.data.length === 0) f.warning("secureboot-variable", `${describeEvent(ev)}: SecureBoot variable is empty (taken as disabled)`, at(ev));
          else if (v.data.length !== 1 || (v.data[0] !== 0 && v.data[0] !== 1)) {
            f.error("secureboot-variable", `${describeEvent(ev)}: SecureBoot variable is ${hex(v.data)} (must be one byte 00 or 01)`, at(ev));
          } else state.enabled = v.data[0] === 1;
        } else {
          const which = DB_VARS[v.name];
          const db = databaseOf(ev, v, f);
          if (db && which) state[which === "PK" ? "pk" : which === "KEK" ? "kek" : which] = db;
        }
        break;
      }
      case EV.EFI_VARIABLE_AUTHORITY: {
        const a = authorityOf(ev, f, state);
        if (a) (separated ? state.postSeparatorAuthorities : state.preSeparatorAuthorities).push(a);
        break;
      }
      case EV.EFI_ACTION: {
        if (digestsCover(ev, ev.data) !== "ok") {
          f.error("event-digest", `${describeEvent(ev)}: digest does not match data`, at(ev));
          break;
        }
        const text = bufferOf(ev.data).toString("latin1");
        if (text === EFI_ACTION.UEFI_DEBUG_MODE) {
          state.debugMode = true;
          f.error("uefi-debug-mode", `${describeEvent(ev)}: firmware reports "UEFI Debug Mode"`, at(ev));
        } else if (text === EFI_ACTION.DMA_PROTECTION_DISABLED) {
          state.dmaProtectionDisabled = true;
          f.warning("dma-protection-disabled", `${describeEvent(ev)}: firmware reports "DMA Protection Disabled"`, at(ev));
        } else {
          f.error("unexpected-efi-action", `${describeEvent(ev)}: unexpected EV_EFI_ACTION ${JSON.stringify(text.slice(0, 80))}`, at(ev));
        }
        break;
      }
      default:
      // Other types are judged by the per-PCR whitelist in interpret.ts.
    }
  }
  if (!separated) f.error("separator-missing", "PCR 7 has no separator", { pcr: 7 });
  return state;
}
