/**
 * The Authenticode SHA-256 of a PE/COFF image ("Windows Authenticode Portable Executable Signature Format",
 * "Calculating the PE Image Hash"): what UEFI firmware extends into PCR 4 for an EV_EFI_BOOT_SERVICES_APPLICATION
 * (EDK2's Tcg2Dxe `MeasurePeImage`). The tests compare the firmware's PCR 4 event with the image the lab served.
 *
 * Hashed: the headers without the CheckSum field and the Certificate Table directory entry, then each section's raw
 * data in file order, then whatever follows the last section except the attribute certificate table (the
 * signature). PE32+ only (x86-64 images).
 */
import { createHash } from "node:crypto";

export function authenticodeSha256(image: Uint8Array): string {
  const b = Buffer.from(image.buffer, image.byteOffset, image.byteLength);
  const need = (end: number, what: string) => {
    if (end > b.length) throw new Error(`PE image: ${what} ends at ${end}, past the file's ${b.length} bytes`);
  };
  need(0x40, "DOS header");
  if (b.readUInt16LE(0) !== 0x5a4d) throw new Error("PE image: no MZ signature");
  const pe = b.readUInt32LE(0x3c);
  need(pe + 24, "PE header");
  if (b.readUInt32LE(pe) !== 0x00004550) throw new Error("PE image: no PE signature");
  const sections = b.readUInt16LE(pe + 6);
  const optSize = b.readUInt16LE(pe + 20);
  const opt = pe + 24;
  need(opt + optSize, "optional header");
  if (b.readUInt16LE(opt) !== 0x20b) throw new Error("PE image: not PE32+");
  const sizeOfHeaders = b.readUInt32LE(opt + 60);
  const checksum = opt + 64;
  const certEntry = opt + 112 + 4 * 8; // DataDirectory[IMAGE_DIRECTORY_ENTRY_SECURITY]
  need(certEntry + 8, "certificate table entry");
  const certOffset = b.readUInt32LE(certEntry);
  const certSize = b.readUInt32LE(certEntry + 4);

  const h = createHash("sha256");
  h.update(b.subarray(0, checksum));
  h.update(b.subarray(checksum + 4, certEntry));
  h.update(b.subarray(certEntry + 8, sizeOfHeaders));
  const table = opt + optSize;
  need(table + 40 * sections, "section table");
  const raw = Array.from({ length: sections }, (_, i) => ({ size: b.readUInt32LE(table + 40 * i + 16), ptr: b.readUInt32LE(table + 40 * i + 20) }))
    .filter((s) => s.size > 0)
    .sort((x, y) => x.ptr - y.ptr);
  let end = sizeOfHeaders;
  for (const s of raw) {
    need(s.ptr + s.size, "section data");
    h.update(b.subarray(s.ptr, s.ptr + s.size));
    end = Math.max(end, s.ptr + s.size);
  }
  const tail = certSize > 0 ? certOffset : b.length;
  if (tail > end) h.update(b.subarray(end, tail));
  return h.digest("hex");
}
