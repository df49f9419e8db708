/**
 * TCG event log and UEFI structures, declared once with the codec vocabulary (all little-endian).
 * References: TCG PC Client Platform Firmware Profile (PFP) §10 "Event Logging"; UEFI spec §8.2 (variables),
 * §32.4.1 (EFI_SIGNATURE_LIST), §10.3 (device paths).
 */
import { type Codec, type Ctx, fixed, list, struct, u16, u32, u64, u8, type Infer } from "../codec/codec.js";
import { EFI_GUID } from "./guid.js";

/** Sanity bounds: nothing real comes close; they stop a hostile length from meaning "allocate 4 GiB". */
export const MAX_EVENT_DATA = 16 * 1024 * 1024;
export const MAX_SPEC_ID_ALGORITHMS = 64;
export const MAX_UNICODE_NAME_CHARS = 1024;

/**
 * A byte string whose length was read before it as a `count` field (UINT8 / UINT32 prefixes). Decoded as a view
 * of the log (no copy): parseEventLog's callers do not modify the log while they use it.
 */
export function lengthPrefixed(typeName: string, count: Codec<number>, max: number): Codec<Uint8Array> {
  return {
    typeName,
    decode: (r) => {
      const at = r.offset;
      const n = r.decodeField("size", count);
      if (n > max) r.fail("oversized", `${typeName} size ${n} exceeds maximum ${max}`, at);
      return r.viewField("data", n);
    },
    encode: (w, v) => {
      if (v.length > max) w.fail(`${typeName} size ${v.length} exceeds maximum ${max}`);
      count.encode(w, v.length);
      w.bytes(v);
    },
  };
}

/** Bytes whose length is a function of fields already decoded in the enclosing struct (a view, as above). */
export function dependentBytes(typeName: string, length: (ctx: Ctx) => bigint | number, max: number): Codec<Uint8Array> {
  const len = (ctx: Ctx | undefined): number | string => {
    const n = length(ctx ?? {});
    if (typeof n === "bigint") return n > BigInt(max) ? `${n}` : Number(n);
    return n > max ? `${n}` : n;
  };
  return {
    typeName,
    decode: (r, ctx) => {
      const n = len(ctx);
      if (typeof n === "string") return r.fail("oversized", `${typeName} length ${n} exceeds maximum ${max}`);
      return r.view(n);
    },
    encode: (w, v, ctx) => {
      const n = len(ctx);
      if (n !== v.length) w.fail(`${typeName} has ${v.length} bytes, the length field says ${n}`);
      w.bytes(v);
    },
  };
}

/** TCG_PCR_EVENT (PFP §10.2.1): the SHA-1 log format, also the first record of a crypto-agile log. */
export const TCG_PCR_EVENT = struct("TCG_PCR_EVENT", {
  pcrIndex: u32,
  eventType: u32,
  digest: fixed(20, "TCG_DIGEST", { view: true }),
  event: lengthPrefixed("event", u32, MAX_EVENT_DATA),
});
export type TCG_PCR_EVENT = Infer<typeof TCG_PCR_EVENT>;

/** TCG_EfiSpecIdEventAlgorithmSize (PFP §10.4.5.1). */
export const TCG_EfiSpecIdEventAlgorithmSize = struct("TCG_EfiSpecIdEventAlgorithmSize", {
  algorithmId: u16,
  digestSize: u16,
});

/** TCG_EfiSpecIDEventStruct (PFP §10.4.5.1): the data of the first, EV_NO_ACTION, record of a crypto-agile log. */
export const TCG_EfiSpecIDEvent = struct("TCG_EfiSpecIDEvent", {
  signature: fixed(16, "signature"),
  platformClass: u32,
  specVersionMinor: u8,
  specVersionMajor: u8,
  specErrata: u8,
  uintnSize: u8,
  digestSizes: list("digestSizes", u32, TCG_EfiSpecIdEventAlgorithmSize, MAX_SPEC_ID_ALGORITHMS),
  vendorInfo: lengthPrefixed("vendorInfo", u8, 0xff),
});
export type TCG_EfiSpecIDEvent = Infer<typeof TCG_EfiSpecIDEvent>;

/** "Spec ID Event03\0": the signature that makes a log crypto-agile. */
export const SPEC_ID_EVENT03 = new Uint8Array(Buffer.from("Spec ID Event03\0", "latin1"));

/** One TPMT_HA whose digest size comes from the log's Spec ID header (PFP §10.2.2). */
export interface TaggedDigest {
  hashAlg: number;
  digest: Uint8Array;
}

/**
 * TPML_DIGEST_VALUES as logged in TCG_PCR_EVENT2: the digest size of each algorithm is the one the
 * Spec ID header declares, so algorithms we cannot compute (SM3_256) are skipped by size, not refused.
 */
export function TPML_DIGEST_VALUES(sizes: ReadonlyMap<number, number>): Codec<TaggedDigest[]> {
  const item: Codec<TaggedDigest> = {
    typeName: "TPMT_HA",
    decode: (r) => {
      const at = r.offset;
      const hashAlg = r.decodeField("hashAlg", u16);
      const size = sizes.get(hashAlg);
      if (size === undefined) {
        return r.fail("unknown-enum", `digest algorithm 0x${hashAlg.toString(16).padStart(4, "0")} is not declared in the Spec ID header`, at);
      }
      return { hashAlg, digest: r.viewField("digest", size) };
    },
    encode: (w, v) => {
      const size = sizes.get(v.hashAlg);
      if (size === undefined || size !== v.digest.length) w.fail(`digest for 0x${v.hashAlg.toString(16)} does not fit the header`);
      w.u16(v.hashAlg).bytes(v.digest);
    },
  };
  return list("TPML_DIGEST_VALUES", u32, item, sizes.size);
}

/** TCG_PCR_EVENT2 (PFP §10.2.2). */
export function TCG_PCR_EVENT2(sizes: ReadonlyMap<number, number>) {
  return struct("TCG_PCR_EVENT2", {
    pcrIndex: u32,
    eventType: u32,
    digests: TPML_DIGEST_VALUES(sizes),
    event: lengthPrefixed("event", u32, MAX_EVENT_DATA),
  });
}
export type TCG_PCR_EVENT2 = Infer<ReturnType<typeof TCG_PCR_EVENT2>>;

/** UEFI_VARIABLE_DATA (PFP §10.4.6.1): the data of EV_EFI_VARIABLE_* events. */
export const UEFI_VARIABLE_DATA = struct("UEFI_VARIABLE_DATA", {
  variableName: EFI_GUID,
  unicodeNameLength: u64,
  variableDataLength: u64,
  unicodeName: dependentBytes("UnicodeName", (c) => (c["unicodeNameLength"] as bigint) * 2n, MAX_UNICODE_NAME_CHARS * 2),
  variableData: dependentBytes("VariableData", (c) => c["variableDataLength"] as bigint, MAX_EVENT_DATA),
});
export type UEFI_VARIABLE_DATA = Infer<typeof UEFI_VARIABLE_DATA>;

/** EFI_SIGNATURE_LIST header (UEFI §32.4.1); the body is cut into EFI_SIGNATURE_DATA by `parseSignatureLists`. */
export const EFI_SIGNATURE_LIST_HEADER = struct("EFI_SIGNATURE_LIST", {
  signatureType: EFI_GUID,
  signatureListSize: u32,
  signatureHeaderSize: u32,
  signatureSize: u32,
});
export const EFI_SIGNATURE_LIST_HEADER_SIZE = 28;

/** UEFI_IMAGE_LOAD_EVENT (PFP §10.4.3): data of EV_EFI_BOOT_SERVICES_APPLICATION/DRIVER, EV_EFI_RUNTIME_SERVICES_DRIVER. */
export const UEFI_IMAGE_LOAD_EVENT = struct("UEFI_IMAGE_LOAD_EVENT", {
  imageLocationInMemory: u64,
  imageLengthInMemory: u64,
  imageLinkTimeAddress: u64,
  lengthOfDevicePath: u64,
  devicePath: dependentBytes("DevicePath", (c) => c["lengthOfDevicePath"] as bigint, MAX_EVENT_DATA),
});
export type UEFI_IMAGE_LOAD_EVENT = Infer<typeof UEFI_IMAGE_LOAD_EVENT>;

/** EFI_DEVICE_PATH_PROTOCOL node (UEFI §10.3.1): type, sub-type, total length (≥ 4), node data. */
export const EFI_DEVICE_PATH_NODE = struct("EFI_DEVICE_PATH_PROTOCOL", {
  type: u8,
  subType: u8,
  length: u16,
  data: dependentBytes("data", (c) => Math.max(0, (c["length"] as number) - 4), 0xffff),
});
export type EFI_DEVICE_PATH_NODE = Infer<typeof EFI_DEVICE_PATH_NODE>;

/** UEFI_PLATFORM_FIRMWARE_BLOB (PFP §10.4.2). */
export const UEFI_PLATFORM_FIRMWARE_BLOB = struct("UEFI_PLATFORM_FIRMWARE_BLOB", {
  blobBase: u64,
  blobLength: u64,
});
