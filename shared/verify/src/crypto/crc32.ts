/**
 * CRC-32 as used by GPT (UEFI 2.10 §5.3.2: the IEEE 802.3 polynomial, reflected 0xEDB88320, initial value and final
 * XOR 0xFFFFFFFF): Node's zlib.crc32, the same function as Go's crc32.ChecksumIEEE.
 */
import { crc32 as zlibCrc32 } from "node:zlib";

export function crc32(data: Uint8Array): number {
  return zlibCrc32(data) >>> 0;
}
