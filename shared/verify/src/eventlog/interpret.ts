/**
 * Interpret what the replay and the digests vouch for — and nothing else.
 *
 * The caller says which PCRs replayed to quote-verified values (`trusted`); events of other PCRs are not
 * looked at. Within trusted PCRs: event types are whitelisted per PCR (PFP §3.3.4 PCR usage, widened to what
 * real firmware in the conformance set logs), a separator look-alike is detected by its digest
 * (go-eventlog checkIfValidSeparator), data is used only when digest == H(data), and PCR7 is turned into the
 * Secure Boot state. Judging (pass/fail) is the policy's job: this returns facts and findings.
 */
import { bufferOf } from "../crypto/hash.js";
import { algName } from "../tcg/constants.js";
import { anyDigestIs, digestsCover } from "./digests.js";
import { EFI_ACTION, EV, eventTypeName, isKnownEventType } from "./events.js";
import { type Finding, Findings } from "./findings.js";
import { describeEvent, type EventLog, type TcgEvent } from "./parse.js";
import { secureBootState, type SecureBootState } from "./secureboot.js";
import { devicePathText, parseDevicePath, parseImageLoadEvent } from "./uefi.js";

/** Event types allowed in PCRs 0-7 (EV_NO_ACTION is allowed everywhere: it is never extended). */
export const PCR_EVENT_TYPES: Readonly<Record<number, readonly number[]>> = {
  // EV_POST_CODE is not here: UEFI firmware measures its code as EV_EFI_PLATFORM_FIRMWARE_BLOB(2) or EV_POST_CODE2;
  // vendors that still log firmware volumes as EV_POST_CODE need the profile tolerance "pcr0-post-code".
  0: [
    EV.S_CRTM_VERSION, EV.S_CRTM_CONTENTS, EV.POST_CODE2, EV.EFI_PLATFORM_FIRMWARE_BLOB, EV.EFI_PLATFORM_FIRMWARE_BLOB2,
    EV.EFI_HCRTM_EVENT, EV.NONHOST_CODE, EV.NONHOST_CONFIG, EV.NONHOST_INFO, EV.EFI_HANDOFF_TABLES, EV.EFI_HANDOFF_TABLES2,
    EV.CPU_MICROCODE, EV.EFI_SPDM_FIRMWARE_BLOB, EV.EFI_SPDM_FIRMWARE_CONFIG, EV.SEPARATOR,
  ],
  1: [
    EV.PLATFORM_CONFIG_FLAGS, EV.TABLE_OF_DEVICES, EV.CPU_MICROCODE, EV.EFI_VARIABLE_DRIVER_CONFIG, EV.EFI_VARIABLE_BOOT,
    EV.EFI_VARIABLE_BOOT2, EV.EFI_HANDOFF_TABLES, EV.EFI_HANDOFF_TABLES2, EV.NONHOST_CONFIG, EV.NONHOST_INFO,
    EV.EFI_SPDM_FIRMWARE_CONFIG, EV.SEPARATOR,
  ],
  2: [
    EV.EFI_BOOT_SERVICES_DRIVER, EV.EFI_RUNTIME_SERVICES_DRIVER, EV.EFI_PLATFORM_FIRMWARE_BLOB, EV.EFI_PLATFORM_FIRMWARE_BLOB2,
    EV.NONHOST_CODE, EV.NONHOST_INFO, EV.EFI_SPDM_FIRMWARE_BLOB, EV.SEPARATOR,
  ],
  3: [EV.EFI_VARIABLE_DRIVER_CONFIG, EV.EFI_HANDOFF_TABLES, EV.EFI_HANDOFF_TABLES2, EV.NONHOST_CONFIG, EV.EFI_SPDM_FIRMWARE_CONFIG, EV.SEPARATOR],
  4: [EV.EFI_BOOT_SERVICES_APPLICATION, EV.EFI_BOOT_SERVICES_DRIVER, EV.EFI_ACTION, EV.ACTION, EV.IPL, EV.COMPACT_HASH, EV.SEPARATOR],
  5: [EV.EFI_GPT_EVENT, EV.EFI_GPT_EVENT2, EV.EFI_ACTION, EV.ACTION, EV.IPL_PARTITION_DATA, EV.OMIT_BOOT_DEVICE_EVENTS, EV.SEPARATOR],
  6: [EV.COMPACT_HASH, EV.EVENT_TAG, EV.ACTION, EV.EFI_ACTION, EV.SEPARATOR],
  7: [EV.EFI_VARIABLE_DRIVER_CONFIG, EV.EFI_VARIABLE_AUTHORITY, EV.EFI_ACTION, EV.EFI_SPDM_DEVICE_POLICY, EV.EFI_SPDM_DEVICE_AUTHORITY, EV.SEPARATOR],
};

const SEPARATOR_OK = new Uint8Array([0, 0, 0, 0]);
const SEPARATOR_ERROR = new Uint8Array([0xff, 0xff, 0xff, 0xff]);

export interface BootImage {
  event: number;
  pcr: number;
  type: string;
  /** Authenticode digests by bank name: what a reference list would compare (we pin none). */
  digests: Record<string, string>;
  devicePath?: string;
  /** PCR2 drivers loaded from a PCI option ROM (a PCI node followed by a relative-offset media node). */
  pciOptionRom?: boolean;
}

export interface BootInterpretation {
  interpretedPcrs: number[];
  /** Present when PCR7 is trusted. */
  secureBoot?: SecureBootState;
  bootApplications: BootImage[];
  bootDrivers: BootImage[];
  /** Event index of a digest-verified "Exit Boot Services Invocation" in PCR5. */
  exitBootServices?: number;
  findings: Finding[];
}

function bankDigests(ev: TcgEvent): Record<string, string> {
  const out: Record<string, string> = {};
  for (const d of ev.digests) out[algName(d.hashAlg).toLowerCase()] = bufferOf(d.digest).toString("hex");
  return out;
}

function bootImage(ev: TcgEvent, f: Findings): BootImage {
  const img: BootImage = { event: ev.index, pcr: ev.pcr, type: eventTypeName(ev.type), digests: bankDigests(ev) };
  try {
    const nodes = parseDevicePath(parseImageLoadEvent(ev.data).devicePath);
    img.devicePath = devicePathText(nodes);
    const pci = nodes.findIndex((n) => n.type === 1 && n.subType === 1);
    if (pci >= 0 && nodes.slice(pci + 1).some((n) => n.type === 4 && n.subType === 8)) img.pciOptionRom = true;
  } catch (e) {
    f.warning("image-load-event", `${describeEvent(ev)}: device path unreadable (${(e as Error).message}); the digest still counts`, ev);
  }
  return img;
}

/**
 * Narrow exceptions a policy may grant (its firmware-quirk tolerances, policy/tolerances.ts), each with the
 * tolerance's name so that what was accepted is reported as such.
 */
export interface InterpretOptions {
  /** Event types allowed in a PCR beyond PCR_EVENT_TYPES. */
  extraEventTypes?: readonly { pcr: number; types: readonly number[]; tolerance: string }[];
  /** EV_S_CRTM_CONTENTS in PCR 0 may carry a separator's digest (Intel Boot Guard measures such a component). */
  scrtmSeparatorDigest?: { tolerance: string };
}

/** Interpret the events of the trusted PCRs. */
export function interpretLog(log: EventLog, trusted: ReadonlySet<number>, opts: InterpretOptions = {}): BootInterpretation {
  const f = new Findings();
  const out: BootInterpretation = { interpretedPcrs: [...trusted].sort((a, b) => a - b), bootApplications: [], bootDrivers: [], findings: f.list };
  const separators = new Map<number, number>();
  const pcr7: TcgEvent[] = [];
  for (const ev of log.events) {
    if (!trusted.has(ev.pcr) || ev.type === EV.NO_ACTION) continue;
    const at = { pcr: ev.pcr, event: ev.index };
    if (!isKnownEventType(ev.type)) {
      f.error("event-type", `${describeEvent(ev)}: unknown event type`, at);
      continue;
    }
    if (ev.pcr > 23) f.error("pcr-index", `${describeEvent(ev)}: PCR ${ev.pcr} does not exist`, at);
    const allowed = PCR_EVENT_TYPES[ev.pcr];
    if (allowed && !allowed.includes(ev.type)) {
      const tolerated = opts.extraEventTypes?.find((x) => x.pcr === ev.pcr && x.types.includes(ev.type));
      if (!tolerated) {
        f.error("event-type", `${describeEvent(ev)}: ${eventTypeName(ev.type)} is not expected in PCR ${ev.pcr}`, at);
        continue;
      }
      f.warning("tolerated", `${describeEvent(ev)}: ${eventTypeName(ev.type)} is not expected in PCR ${ev.pcr}; accepted by tolerance ${tolerated.tolerance}`, at);
    }
    if (ev.pcr <= 7 && ev.type !== EV.SEPARATOR && (anyDigestIs(ev, SEPARATOR_OK) || anyDigestIs(ev, SEPARATOR_ERROR))) {
      const detail = `${describeEvent(ev)}: digest is that of a separator but the type is ${eventTypeName(ev.type)}`;
      // Real Intel Boot Guard firmware measures an S-CRTM component whose digest is H(00000000) (glinux-alex.bin
      // event 4, "FIT Type 0x2D"); PCR 0 events are never interpreted, so a profile may tolerate exactly that.
      const tolerance = ev.pcr === 0 && ev.type === EV.S_CRTM_CONTENTS ? opts.scrtmSeparatorDigest?.tolerance : undefined;
      if (tolerance) f.warning("separator-lookalike", `${detail}; accepted by tolerance ${tolerance} (PCR 0 events are not interpreted)`, at);
      else {
        f.error("separator-disguised", detail, at);
        continue;
      }
    }
    switch (ev.type) {
      case EV.SEPARATOR: {
        if (digestsCover(ev, ev.data) !== "ok") {
          f.error("event-digest", `${describeEvent(ev)}: digest does not match data`, at);
          break;
        }
        if (ev.pcr > 7) break; // e.g. Windows' "WBCL" separators in PCR12-14
        const prev = separators.get(ev.pcr);
        if (prev !== undefined) f.error("separator-count", `${describeEvent(ev)}: second separator in PCR ${ev.pcr} (first: event ${prev})`, at);
        else separators.set(ev.pcr, ev.index);
        if (Buffer.compare(ev.data, SEPARATOR_ERROR) === 0) f.error("separator-error", `${describeEvent(ev)}: firmware logged an error separator (FFFFFFFF)`, at);
        else if (Buffer.compare(ev.data, SEPARATOR_OK) !== 0) f.error("separator-data", `${describeEvent(ev)}: separator data is ${bufferOf(ev.data).toString("hex")}, not 00000000`, at);
        break;
      }
      case EV.EFI_ACTION:
        if (ev.pcr === 7) break; // judged with the Secure Boot state
        if (digestsCover(ev, ev.data) !== "ok") {
          f.error("event-digest", `${describeEvent(ev)}: digest does not match data`, at);
          break;
        }
        if (ev.pcr === 5 && bufferOf(ev.data).toString("latin1") === EFI_ACTION.EXIT_BOOT_SERVICES_INVOCATION) out.exitBootServices ??= ev.index;
        break;
      case EV.EFI_BOOT_SERVICES_APPLICATION:
        if (ev.pcr === 4) out.bootApplications.push(bootImage(ev, f));
        break;
      case EV.EFI_BOOT_SERVICES_DRIVER:
      case EV.EFI_RUNTIME_SERVICES_DRIVER:
        if (ev.pcr === 2) out.bootDrivers.push(bootImage(ev, f));
        break;
    }
    if (ev.pcr === 7) pcr7.push(ev);
  }
  if (trusted.has(7)) out.secureBoot = secureBootState(pcr7, f);
  return out;
}
