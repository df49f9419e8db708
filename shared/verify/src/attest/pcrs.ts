/**
 * PCR value sets: what a quote covers, the PCR digest a TPM computes, and the PCR files tpm2-tools writes.
 */
import { decodeExact, encode, Reader } from "../codec/codec.js";
import { digest } from "../crypto/hash.js";
import { algName, DIGEST_SIZES, HASHES, isHashAlg } from "../tcg/constants.js";
import { TPML_PCR_SELECTION } from "../tpm/structures.js";

/** bank (TPM_ALG_ID) → PCR index → value. */
export type PcrValues = Map<number, Map<number, Uint8Array>>;

export interface PcrSelection {
  hash: number;
  pcrs: number[];
}

export function selectionFromBitmaps(sel: TPML_PCR_SELECTION): PcrSelection[] {
  return sel.map((s) => {
    const pcrs: number[] = [];
    s.pcrSelect.forEach((byte, i) => {
      for (let bit = 0; bit < 8; bit++) if (byte & (1 << bit)) pcrs.push(i * 8 + bit);
    });
    return { hash: s.hash, pcrs };
  });
}

export function selectionToBitmaps(sel: PcrSelection[], sizeofSelect = 3): TPML_PCR_SELECTION {
  return sel.map((s) => {
    const max = Math.max(sizeofSelect * 8, ...s.pcrs.map((p) => p + 1));
    const bytes = new Uint8Array(Math.ceil(max / 8));
    for (const p of s.pcrs) bytes[p >> 3] = (bytes[p >> 3] ?? 0) | (1 << (p & 7));
    return { hash: s.hash, pcrSelect: bytes };
  });
}

/** The values in selection order: banks in list order, PCR index ascending (Part 1 §17.6.7 / Quote). */
export function orderedValues(sel: PcrSelection[], values: PcrValues): Uint8Array[] | { missing: string } {
  const out: Uint8Array[] = [];
  for (const s of sel) {
    const bank = values.get(s.hash);
    for (const p of s.pcrs) {
      const v = bank?.get(p);
      if (!v) return { missing: `${algName(s.hash).toLowerCase()}:${p}` };
      out.push(v);
    }
  }
  return out;
}

/** pcrDigest as the TPM computes it for a quote: H_sign(concatenated values). */
export function pcrDigest(signHash: number, sel: PcrSelection[], values: PcrValues): Uint8Array {
  const ordered = orderedValues(sel, values);
  if (!Array.isArray(ordered)) throw new Error(`PCR ${ordered.missing} has no value`);
  return digest(signHash, ...ordered);
}

export function bankName(alg: number): string {
  return isHashAlg(alg) ? HASHES[alg].bank : algName(alg).toLowerCase();
}

/**
 * PCR values as written by `tpm2_quote -o` / `tpm2_pcrread -o`:
 *  - "values": the digests concatenated in selection order (the selection comes from elsewhere: the quote);
 *  - "serialized": tpm2-tools' in-memory structs, little-endian: TPML_PCR_SELECTION (u32 count, 16 ×
 *    {u16 hash, u8 sizeofSelect, u8[4] pcrSelect, pad}) then u32 n and n × TPML_DIGEST (u32 count, 8 ×
 *    {u16 size, u8[64]}).
 * `format: "auto"` picks serialized when the size and header fit it exactly.
 */
export function parseTpm2ToolsPcrFile(
  bytes: Uint8Array,
  format: "values" | "serialized" | "auto",
  selectionForValues?: PcrSelection[],
): { selection: PcrSelection[]; values: PcrValues; format: "values" | "serialized" } {
  if (format === "serialized" || (format === "auto" && looksSerialized(bytes))) {
    return { ...parseSerialized(bytes), format: "serialized" };
  }
  if (!selectionForValues) throw new Error("a PCR file in values format needs the selection (from the quote)");
  const r: Reader = new Reader(bytes, "be", { path: ["PCR values file"] });
  const values: PcrValues = new Map();
  for (const s of selectionForValues) {
    const size = DIGEST_SIZES[s.hash];
    if (size === undefined) r.fail("unknown-enum", `bank ${algName(s.hash)} has no known digest size`);
    const bank = values.get(s.hash) ?? new Map<number, Uint8Array>();
    values.set(s.hash, bank);
    for (const p of s.pcrs) bank.set(p, r.field(`${bankName(s.hash)}:${p}`, () => r.bytes(size)));
  }
  r.expectEnd();
  return { selection: selectionForValues, values, format: "values" };
}

const SEL_ENTRY = 8;
const SEL_SIZE = 4 + 16 * SEL_ENTRY;
const DIGEST_LIST = 4 + 8 * (2 + 64);

function looksSerialized(b: Uint8Array): boolean {
  if (b.length < SEL_SIZE + 4) return false;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const count = dv.getUint32(0, true);
  const n = dv.getUint32(SEL_SIZE, true);
  return count >= 1 && count <= 16 && b.length === SEL_SIZE + 4 + n * DIGEST_LIST;
}

function parseSerialized(bytes: Uint8Array): { selection: PcrSelection[]; values: PcrValues } {
  const r: Reader = new Reader(bytes, "le", { path: ["tpm2-tools serialized PCRs"] });
  const count = r.field("TPML_PCR_SELECTION.count", () => r.u32());
  if (count > 16) r.fail("oversized", `selection count ${count} exceeds 16`);
  const selection: PcrSelection[] = [];
  for (let i = 0; i < 16; i++) {
    const entry = r.field(`TPML_PCR_SELECTION.${i}`, () => {
      const hash = r.u16();
      const sizeofSelect = r.u8();
      const bitmap = r.bytes(4);
      r.skip(1);
      return { hash, sizeofSelect, bitmap };
    });
    if (i >= count) continue;
    if (entry.sizeofSelect > 4) r.fail("oversized", `sizeofSelect ${entry.sizeofSelect} exceeds 4`);
    const [s] = selectionFromBitmaps([{ hash: entry.hash, pcrSelect: entry.bitmap.subarray(0, entry.sizeofSelect) }]);
    if (s) selection.push(s);
  }
  const lists = r.field("digest lists", () => r.u32());
  const digests: Uint8Array[] = [];
  for (let i = 0; i < lists; i++) {
    r.field(`TPML_DIGEST.${i}`, () => {
      const n = r.u32();
      if (n > 8) r.fail("oversized", `TPML_DIGEST count ${n} exceeds 8`);
      for (let j = 0; j < 8; j++) {
        const size = r.u16();
        const buf = r.bytes(64);
        if (j < n) {
          if (size > 64) r.fail("oversized", `digest size ${size} exceeds 64`);
          digests.push(buf.subarray(0, size));
        }
      }
    });
  }
  r.expectEnd();
  const values: PcrValues = new Map();
  let k = 0;
  for (const s of selection) {
    const bank = values.get(s.hash) ?? new Map<number, Uint8Array>();
    values.set(s.hash, bank);
    for (const p of s.pcrs) {
      const d = digests[k++];
      if (!d) r.fail("truncated", `no digest for ${bankName(s.hash)}:${p}`);
      const want = DIGEST_SIZES[s.hash];
      if (want !== undefined && d.length !== want) r.fail("invalid-value", `${bankName(s.hash)}:${p} digest is ${d.length} bytes, expected ${want}`);
      bank.set(p, d);
    }
  }
  if (k !== digests.length) r.fail("trailing-bytes", `${digests.length - k} digests beyond the selection`);
  return { selection, values };
}

/** Round-trip helper for tests: the TPML_PCR_SELECTION bytes of a selection. */
export function encodeSelection(sel: PcrSelection[]): Uint8Array {
  return encode(TPML_PCR_SELECTION, selectionToBitmaps(sel));
}
export function decodeSelection(bytes: Uint8Array): PcrSelection[] {
  return selectionFromBitmaps(decodeExact(TPML_PCR_SELECTION, bytes));
}
