/**
 * Decoders for the UEFI structures that events carry: UEFI_VARIABLE_DATA, EFI_SIGNATURE_LIST,
 * UEFI_IMAGE_LOAD_EVENT device paths. Bounds-checked (every size is checked against what is left before
 * anything is read), so a hostile size is a ParseError, never a huge allocation or an out-of-range read.
 */
import { decodeExact, decodePrefix, Reader } from "../codec/codec.js";
import { GUID, guidToString } from "./guid.js";
import {
  EFI_DEVICE_PATH_NODE,
  EFI_SIGNATURE_LIST_HEADER,
  EFI_SIGNATURE_LIST_HEADER_SIZE,
  UEFI_IMAGE_LOAD_EVENT,
  UEFI_VARIABLE_DATA,
} from "./structures.js";

export interface UefiVariable {
  guid: string;
  name: string;
  data: Uint8Array;
}

/** UTF-16LE to string; unpaired surrogates become U+FFFD (names are for display and exact comparison). */
export function utf16le(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("utf16le");
}

export function parseVariableData(data: Uint8Array): UefiVariable {
  const v = decodeExact(UEFI_VARIABLE_DATA, data, "le");
  return { guid: v.variableName, name: utf16le(v.unicodeName), data: v.variableData };
}

/** UEFI_VARIABLE_DATA at the start of `data`, and how many bytes follow it (shim pads some events). */
export function parseVariableDataPrefix(data: Uint8Array): { variable: UefiVariable; trailing: number } {
  const { value: v, length } = decodePrefix(UEFI_VARIABLE_DATA, data, "le");
  return { variable: { guid: v.variableName, name: utf16le(v.unicodeName), data: v.variableData }, trailing: data.length - length };
}

export interface SignatureEntry {
  owner: string;
  data: Uint8Array;
}
export interface SignatureList {
  type: string;
  /** Offset of the list inside the variable data. */
  offset: number;
  entries: SignatureEntry[];
}

/** EFI_SIGNATURE_LIST[] as stored in PK, KEK, db, dbx (UEFI §32.4.1). Entries are views of `data` (no copies). */
export function parseSignatureLists(data: Uint8Array): SignatureList[] {
  const r = new Reader(data, "le", { path: ["EFI_SIGNATURE_LIST[]"] });
  const lists: SignatureList[] = [];
  while (r.remaining > 0) {
    const offset = r.offset;
    const h = r.field(String(lists.length), () => EFI_SIGNATURE_LIST_HEADER.decode(r));
    const fail = (detail: string): never => r.fail("invalid-value", `list ${lists.length}: ${detail}`, offset);
    if (h.signatureListSize < EFI_SIGNATURE_LIST_HEADER_SIZE) fail(`SignatureListSize ${h.signatureListSize} is smaller than the header`);
    const body = h.signatureListSize - EFI_SIGNATURE_LIST_HEADER_SIZE;
    if (body > r.remaining) {
      r.fail("truncated", `list ${lists.length}: SignatureListSize ${h.signatureListSize} runs past the data (${r.remaining + EFI_SIGNATURE_LIST_HEADER_SIZE} left)`, offset);
    }
    if (h.signatureHeaderSize > body) fail(`SignatureHeaderSize ${h.signatureHeaderSize} exceeds the list body ${body}`);
    if (h.signatureSize < 16) fail(`SignatureSize ${h.signatureSize} cannot hold an owner GUID`);
    const sigBytes = body - h.signatureHeaderSize;
    if (sigBytes % h.signatureSize !== 0) fail(`${sigBytes} signature bytes are not a multiple of SignatureSize ${h.signatureSize}`);
    if (h.signatureType === GUID.EFI_CERT_SHA256 && h.signatureSize !== 16 + 32) fail(`SHA-256 entries must be 48 bytes, not ${h.signatureSize}`);
    r.skip(h.signatureHeaderSize);
    const entries: SignatureEntry[] = [];
    for (let i = 0; i < sigBytes / h.signatureSize; i++) {
      const owner = guidToString(r.view(16));
      entries.push({ owner, data: r.view(h.signatureSize - 16) });
    }
    lists.push({ type: h.signatureType, offset, entries });
  }
  return lists;
}

/** UEFI_IMAGE_LOAD_EVENT; real firmware sometimes pads after the device path, so trailing bytes are allowed. */
export function parseImageLoadEvent(data: Uint8Array): { imageLength: bigint; devicePath: Uint8Array } {
  const r = new Reader(data, "le", { path: [UEFI_IMAGE_LOAD_EVENT.typeName] });
  const v = UEFI_IMAGE_LOAD_EVENT.decode(r);
  return { imageLength: v.imageLengthInMemory, devicePath: v.devicePath };
}

export interface DevicePathNode {
  type: number;
  subType: number;
  data: Uint8Array;
}

/** Split an EFI_DEVICE_PATH into nodes up to (not including) the End-Entire node. */
export function parseDevicePath(path: Uint8Array): DevicePathNode[] {
  const r = new Reader(path, "le", { path: ["EFI_DEVICE_PATH"] });
  const nodes: DevicePathNode[] = [];
  while (r.remaining > 0) {
    const at = r.offset;
    const n = r.field(String(nodes.length), () => EFI_DEVICE_PATH_NODE.decode(r));
    if (n.length < 4) r.fail("invalid-value", `device path node ${nodes.length} has length ${n.length} (< 4)`, at);
    if (n.type === 0x7f && n.subType === 0xff) return nodes;
    nodes.push({ type: n.type, subType: n.subType, data: n.data });
  }
  return nodes;
}

function u16(b: Uint8Array, o: number): number {
  return (b[o] ?? 0) | ((b[o + 1] ?? 0) << 8);
}
function u32(b: Uint8Array, o: number): number {
  return (u16(b, o) | (u16(b, o + 2) << 16)) >>> 0;
}
function hexStr(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("hex");
}

/**
 * The text form of the nodes we meet in boot logs, as efivar / tpm2_eventlog print them (close to UEFI §10.6);
 * others print as Path(type,sub,hex).
 */
export function devicePathNodeText(n: DevicePathNode): string {
  const d = n.data;
  const key = `${n.type}/${n.subType}`;
  switch (key) {
    case "1/1":
      if (d.length === 2) return `Pci(0x${d[1]!.toString(16)},0x${d[0]!.toString(16)})`;
      break;
    case "1/4":
      if (d.length >= 16) return `VenHw(${guidToString(d.subarray(0, 16))}${d.length > 16 ? "," + hexStr(d.subarray(16)) : ""})`;
      break;
    case "2/1":
      if (d.length === 8) {
        const hid = u32(d, 0);
        const uid = u32(d, 4);
        if (hid === 0x0a0341d0) return `PciRoot(0x${uid.toString(16)})`;
        if (hid === 0x0a0841d0) return `PcieRoot(0x${uid.toString(16)})`;
        return `Acpi(0x${hid.toString(16)},0x${uid.toString(16)})`;
      }
      break;
    case "3/1":
      if (d.length === 2) return `Ata(${d[0]},${d[1]})`;
      break;
    case "3/2":
      if (d.length === 4) return `SCSI(${u16(d, 0)},${u16(d, 2)})`;
      break;
    case "3/5":
      if (d.length === 2) return `USB(${d[0]},${d[1]})`;
      break;
    case "3/11":
      if (d.length >= 33) return `MAC(${hexStr(d.subarray(0, 6))},${d[32]})`;
      break;
    case "3/12":
      if (d.length >= 15) return `IPv4(${Array.from(d.subarray(4, 8)).join(".")})`;
      break;
    case "3/13":
      return "IPv6()";
    case "3/18":
      if (d.length === 6) return `Sata(${u16(d, 0)},${u16(d, 2)},${u16(d, 4)})`;
      break;
    case "3/23":
      if (d.length === 12) return `NVMe(0x${u32(d, 0).toString(16)},${hexStr(d.subarray(4, 12))})`;
      break;
    case "3/24":
      return `Uri(${Buffer.from(d).toString("latin1")})`;
    case "4/1":
      if (d.length === 38) {
        const part = u32(d, 0);
        const sigType = d[37];
        const sig = sigType === 2 ? guidToString(d.subarray(20, 36)) : `0x${u32(d, 20).toString(16)}`;
        const start = Buffer.from(d.subarray(4, 12)).readBigUInt64LE();
        const size = Buffer.from(d.subarray(12, 20)).readBigUInt64LE();
        return `HD(${part},${sigType === 2 ? "GPT" : sigType === 1 ? "MBR" : String(sigType)},${sig},0x${start.toString(16)},0x${size.toString(16)})`;
      }
      break;
    case "4/2":
      return "CDROM()";
    case "4/3":
      if (d.length >= 16) return `VenMedia(${guidToString(d.subarray(0, 16))})`;
      break;
    case "4/4":
      return `File(${utf16le(d).replace(/\0+$/, "")})`;
    case "4/6":
      if (d.length === 16) return `FvFile(${guidToString(d)})`;
      break;
    case "4/7":
      if (d.length === 16) return `FvVol(${guidToString(d)})`;
      break;
    case "4/8":
      if (d.length >= 20) return `Offset(0x${Buffer.from(d.subarray(4, 12)).readBigUInt64LE().toString(16)},0x${Buffer.from(d.subarray(12, 20)).readBigUInt64LE().toString(16)})`;
      break;
  }
  return `Path(${n.type},${n.subType},${hexStr(d)})`;
}

export function devicePathText(nodes: DevicePathNode[]): string {
  return nodes.map(devicePathNodeText).join("/");
}
