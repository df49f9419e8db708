/**
 * Parse a TCG event log into plain events (no judging here).
 *
 * Two formats (PFP §10.2): the SHA-1 format (every record a TCG_PCR_EVENT) and the crypto-agile format (a
 * first TCG_PCR_EVENT whose data is a "Spec ID Event03" header, then TCG_PCR_EVENT2 records carrying a digest
 * per declared algorithm). A first record that is an EV_NO_ACTION but not a Spec ID Event03 header — e.g. a lone
 * 17-byte StartupLocality event — is an ordinary event of a SHA-1 format log (go-attestation commit b89180c).
 */
import { type Codec, ParseError, Reader } from "../codec/codec.js";
import { algName, DIGEST_SIZES, isHashAlg, TPM_ALG } from "../tcg/constants.js";
import { EV, eventTypeName } from "./events.js";
import {
  SPEC_ID_EVENT03,
  type TaggedDigest,
  TCG_EfiSpecIDEvent,
  TCG_PCR_EVENT,
  TCG_PCR_EVENT2,
} from "./structures.js";

export type LogFormat = "crypto-agile" | "sha1";

/** A digest algorithm the log declares ("bank"), and whether we can compute it. */
export interface LogBank {
  alg: number;
  name: string;
  size: number;
  computable: boolean;
}

export interface TcgEvent {
  /** Position in the log, counting the Spec ID header as event 0 (as tpm2_eventlog does). */
  index: number;
  /** Byte offset of the record in the log. */
  offset: number;
  pcr: number;
  type: number;
  /** Digests in log order. For the SHA-1 format (and the Spec ID header record) one SHA-1 digest. */
  digests: TaggedDigest[];
  data: Uint8Array;
}

export interface SpecIdHeader {
  platformClass: number;
  specVersionMinor: number;
  specVersionMajor: number;
  specErrata: number;
  uintnSize: number;
  algorithms: { algorithmId: number; digestSize: number }[];
  vendorInfo: Uint8Array;
}

export interface EventLog {
  format: LogFormat;
  specId?: SpecIdHeader;
  banks: LogBank[];
  events: TcgEvent[];
  byteLength: number;
  /** Tolerated deviations from the spec, for people. */
  warnings: string[];
}

const MAX_DIGEST_SIZE = 128;

function isSpecIdRecord(ev: { pcrIndex: number; eventType: number; event: Uint8Array }): boolean {
  if (ev.eventType !== EV.NO_ACTION || ev.pcrIndex !== 0 || ev.event.length < SPEC_ID_EVENT03.length) return false;
  for (let i = 0; i < SPEC_ID_EVENT03.length; i++) if (ev.event[i] !== SPEC_ID_EVENT03[i]) return false;
  return true;
}

function readRecord<T>(r: Reader, index: number, codec: Codec<T>): T {
  return r.field(`event ${index}`, () => r.decodeField(codec.typeName, codec));
}

/**
 * Decode and check the Spec ID Event03 header that starts at `dataOffset` in `buf` (`length` = the record's
 * eventSize). Returns how many bytes the header ran past eventSize: tpm2-tools' `specid-vendordata.bin`
 * fixture declares a vendorInfo that follows the record instead of lying inside it, and tpm2_eventlog reads it
 * from there; we do the same (the header is never measured) and say so in a warning. Anything shorter than the
 * record is an error.
 */
function parseSpecId(buf: Uint8Array, dataOffset: number, length: number): { header: SpecIdHeader; overrun: number } {
  const r = new Reader(buf, "le", { start: dataOffset, path: ["event 0", "TCG_EfiSpecIDEvent"] });
  const at = r.offset;
  const h = TCG_EfiSpecIDEvent.decode(r);
  const consumed = r.offset - at;
  if (consumed < length) r.fail("trailing-bytes", `${length - consumed} bytes after the Spec ID Event03 header inside its record`);
  // The fixed part and the algorithm list must lie inside the record; only vendorInfo may run past it.
  const fixedPart = 16 + 4 + 4 + 4 + 4 * h.digestSizes.length + 1;
  if (fixedPart > length) r.fail("truncated", `Spec ID Event03 header needs ${fixedPart} bytes, its record has ${length}`, at);
  if (h.specVersionMajor !== 2 || h.specVersionMinor !== 0) {
    r.fail("invalid-value", `Spec ID Event03 version ${h.specVersionMajor}.${h.specVersionMinor} (need 2.0)`, at + 20);
  }
  if (h.uintnSize !== 1 && h.uintnSize !== 2) r.fail("invalid-value", `uintnSize ${h.uintnSize} (need 1 or 2)`, at + 23);
  if (h.digestSizes.length === 0) r.fail("invalid-value", "Spec ID Event03 declares no digest algorithm", at + 24);
  const seen = new Set<number>();
  h.digestSizes.forEach((a, i) => {
    const off = at + 28 + 4 * i;
    if (seen.has(a.algorithmId)) r.fail("invalid-value", `algorithm ${algName(a.algorithmId)} declared twice`, off);
    seen.add(a.algorithmId);
    const known = DIGEST_SIZES[a.algorithmId];
    if (known !== undefined && known !== a.digestSize) {
      r.fail("invalid-value", `${algName(a.algorithmId)} digest size ${a.digestSize} (must be ${known})`, off);
    }
    if (a.digestSize === 0 || a.digestSize > MAX_DIGEST_SIZE) {
      r.fail("invalid-value", `digest size ${a.digestSize} of ${algName(a.algorithmId)} out of range 1..${MAX_DIGEST_SIZE}`, off);
    }
  });
  return {
    header: {
      platformClass: h.platformClass,
      specVersionMinor: h.specVersionMinor,
      specVersionMajor: h.specVersionMajor,
      specErrata: h.specErrata,
      uintnSize: h.uintnSize,
      algorithms: h.digestSizes,
      vendorInfo: h.vendorInfo,
    },
    overrun: consumed - length,
  };
}

function bankName(alg: number): string {
  return algName(alg).toLowerCase();
}

/**
 * Parse a whole event log; any structural problem is a ParseError naming the event, field and byte offset.
 * Digests and data of the events are views of `buf`, not copies (a log is most of the evidence's bytes): do not
 * modify `buf` while the parsed log is in use.
 */
export function parseEventLog(buf: Uint8Array): EventLog {
  const r = new Reader(buf, "le", { path: ["TCG_EVENT_LOG"] });
  if (buf.length === 0) r.fail("truncated", "the event log is empty");
  const firstOffset = r.offset;
  const first = readRecord(r, 0, TCG_PCR_EVENT);
  const events: TcgEvent[] = [
    {
      index: 0,
      offset: firstOffset,
      pcr: first.pcrIndex,
      type: first.eventType,
      digests: [{ hashAlg: TPM_ALG.SHA1, digest: first.digest }],
      data: first.event,
    },
  ];

  if (!isSpecIdRecord(first)) {
    while (r.remaining > 0) {
      const offset = r.offset;
      const e = readRecord(r, events.length, TCG_PCR_EVENT);
      events.push({
        index: events.length,
        offset,
        pcr: e.pcrIndex,
        type: e.eventType,
        digests: [{ hashAlg: TPM_ALG.SHA1, digest: e.digest }],
        data: e.event,
      });
    }
    return {
      format: "sha1",
      banks: [{ alg: TPM_ALG.SHA1, name: "sha1", size: 20, computable: true }],
      events,
      byteLength: buf.length,
      warnings: [],
    };
  }

  const { header: specId, overrun } = parseSpecId(buf, firstOffset + 32, first.event.length);
  const warnings: string[] = [];
  if (overrun > 0) {
    r.skip(overrun);
    warnings.push(`event 0: the Spec ID Event03 vendorInfo runs ${overrun} bytes past the record's eventSize (${first.event.length}); read from the bytes that follow, as tpm2_eventlog does`);
  }
  const sizes = new Map(specId.algorithms.map((a) => [a.algorithmId, a.digestSize]));
  const codec = TCG_PCR_EVENT2(sizes);
  while (r.remaining > 0) {
    const offset = r.offset;
    const e = readRecord(r, events.length, codec);
    const ds = e.digests;
    for (let i = 1; i < ds.length; i++) {
      for (let j = 0; j < i; j++) {
        if (ds[i]!.hashAlg !== ds[j]!.hashAlg) continue;
        throw new ParseError("invalid-value", `TCG_EVENT_LOG.event ${events.length}.TCG_PCR_EVENT2.digests`, offset + 12, `digest for ${algName(ds[i]!.hashAlg)} appears twice`);
      }
    }
    events.push({ index: events.length, offset, pcr: e.pcrIndex, type: e.eventType, digests: e.digests, data: e.event });
  }
  return {
    format: "crypto-agile",
    specId,
    banks: specId.algorithms.map((a) => ({
      alg: a.algorithmId,
      name: bankName(a.algorithmId),
      size: a.digestSize,
      computable: isHashAlg(a.algorithmId),
    })),
    events,
    byteLength: buf.length,
    warnings,
  };
}

/** The event's digest for one bank, if it carries one. */
export function eventDigest(ev: TcgEvent, alg: number): Uint8Array | undefined {
  for (const d of ev.digests) if (d.hashAlg === alg) return d.digest;
  return undefined;
}

/** "event 47 (PCR 7, EV_EFI_VARIABLE_AUTHORITY)" — how every message names an event. */
export function describeEvent(ev: Pick<TcgEvent, "index" | "pcr" | "type">): string {
  return `event ${ev.index} (PCR ${ev.pcr}, ${eventTypeName(ev.type)})`;
}
