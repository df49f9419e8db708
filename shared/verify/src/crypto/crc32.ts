/**
 * CRC-32 as used by GPT (UEFI 2.10 §5.3.2: the IEEE 802.3 polynomial, reflected 0xEDB88320, initial value
 * and final XOR 0xFFFFFFFF — the same as zlib's crc32 and Go's crc32.ChecksumIEEE). Node 20.11 has no
 * zlib.crc32, so it is computed here.
 */
const TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32(data: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < data.length; i++) c = (TABLE[(c ^ data[i]!) & 0xff]! ^ (c >>> 8)) >>> 0;
  return (c ^ 0xffffffff) >>> 0;
}
