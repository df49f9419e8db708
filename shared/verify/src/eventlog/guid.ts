/**
 * EFI_GUID (UEFI spec, Appendix A): 16 bytes, the first three fields little-endian (u32, u16, u16), the last
 * eight as they are. Printed in the usual 8-4-4-4-12 lowercase form.
 */
import { type Codec, fixed } from "../codec/codec.js";

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

export function guidToString(b: Uint8Array): string {
  if (b.length !== 16) throw new Error(`EFI_GUID needs 16 bytes, got ${b.length}`);
  const h = (i: number) => HEX[b[i]!]!;
  // Data1 (u32 LE), Data2 and Data3 (u16 LE), then Data4 as stored: no intermediate hex string, no memo needed.
  return `${h(3)}${h(2)}${h(1)}${h(0)}-${h(5)}${h(4)}-${h(7)}${h(6)}-${h(8)}${h(9)}-${h(10)}${h(11)}${h(12)}${h(13)}${h(14)}${h(15)}`;
}

export function guidFromString(s: string): Uint8Array {
  const m = /^([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})$/i.exec(s);
  if (!m) throw new Error(`not a GUID: ${s}`);
  const hexBytes = (x: string) => Array.from(Buffer.from(x, "hex"));
  return new Uint8Array([
    ...hexBytes(m[1]!).reverse(),
    ...hexBytes(m[2]!).reverse(),
    ...hexBytes(m[3]!).reverse(),
    ...hexBytes(m[4]!),
    ...hexBytes(m[5]!),
  ]);
}

const raw = fixed(16, "EFI_GUID", { view: true });
/** EFI_GUID as a codec that yields the string form. */
export const EFI_GUID: Codec<string> = {
  typeName: "EFI_GUID",
  decode: (r) => guidToString(raw.decode(r)),
  encode: (w, v) => {
    const b = (() => {
      try {
        return guidFromString(v);
      } catch (e) {
        return w.fail((e as Error).message);
      }
    })();
    raw.encode(w, b);
  },
};

/** GUIDs named by the UEFI spec, shim and the TCG PFP. */
export const GUID = {
  /** EFI_GLOBAL_VARIABLE: SecureBoot, PK, KEK, Boot####, BootOrder. */
  EFI_GLOBAL_VARIABLE: "8be4df61-93ca-11d2-aa0d-00e098032b8c",
  /** The same GUID with its first three fields byte-swapped, as some firmware writes it (keylime accepts both). */
  EFI_GLOBAL_VARIABLE_SWAPPED: "61dfe48b-ca93-d211-aa0d-00e098032b8c",
  /** EFI_IMAGE_SECURITY_DATABASE_GUID: db, dbx, dbt, dbr. */
  EFI_IMAGE_SECURITY_DATABASE: "d719b2cb-3d3a-4596-a3bc-dad00e67656f",
  /** shim's SHIM_LOCK_GUID: Shim, MokList, MokListTrusted, SbatLevel. */
  SHIM_LOCK: "605dab50-e046-4300-abb6-3dd810dd8b23",
  /** EFI_CERT_X509_GUID: an EFI_SIGNATURE_LIST of DER certificates. */
  EFI_CERT_X509: "a5c059a1-94e4-4aa7-87b5-ab155c2bf072",
  /** EFI_CERT_SHA256_GUID: an EFI_SIGNATURE_LIST of SHA-256 image digests. */
  EFI_CERT_SHA256: "c1c41626-504c-4092-aca9-41f936934328",
  EFI_CERT_SHA1: "826ca512-cf10-4ac9-b187-be01496631bd",
  EFI_CERT_RSA2048: "3c5766e8-269c-4e34-aa14-ed776e85b3b6",
  EFI_CERT_X509_SHA256: "3bd2a492-96c0-4079-b420-fcf98ef103ed",
  EFI_CERT_X509_SHA384: "7076876e-80c2-4ee6-aad2-28b349a6865b",
  EFI_CERT_X509_SHA512: "446dbf63-2502-4cda-bcfa-2465d2b0fe9d",
} as const;
