/**
 * Reading an NV index whole: NV_ReadPublic for its size and attributes, then NV_Read in chunks of at most
 * TPM_PT_NV_BUFFER_MAX bytes, authorized by the index itself (TPMA_NV_AUTHREAD, empty auth — how EK
 * certificate indices are read) or by the owner (TPMA_NV_OWNERREAD).
 */
import { TPM_PT, TPMA_NV, type TPMS_NV_PUBLIC } from "@fleetd/verify/tpm";
import { TPM_RH } from "@fleetd/verify/tcg";
import type { TpmClient } from "./client.js";
import { TpmClientError } from "./errors.js";
import { TpmError } from "./rc.js";

/** Chunk size when the TPM does not report TPM_PT_NV_BUFFER_MAX (a conservative value every TPM accepts). */
const DEFAULT_NV_CHUNK = 512;
/** TPM2B_MAX_NV_BUFFER's bound in our declarations. */
const MAX_CHUNK = 2048;

export interface NvContents {
  nvPublic: TPMS_NV_PUBLIC;
  data: Uint8Array;
}

/** The NV index's public area, or undefined when the index is not defined (TPM_RC_HANDLE). */
export async function nvPublicIfDefined(tpm: TpmClient, index: number): Promise<TPMS_NV_PUBLIC | undefined> {
  try {
    return (await tpm.nvReadPublic(index)).nvPublic;
  } catch (e) {
    if (e instanceof TpmError && e.is("TPM_RC_HANDLE")) return undefined;
    throw e;
  }
}

export interface ReadNvOptions {
  /** Owner authorization for OWNERREAD-only indices (empty by default). */
  ownerAuth?: Uint8Array;
  /** Largest NV_Read to issue (default: the TPM's TPM_PT_NV_BUFFER_MAX). */
  chunk?: number;
}

/** Reads the whole index; undefined when it is not defined. */
export async function readNvIndex(tpm: TpmClient, index: number, opts: ReadNvOptions = {}): Promise<NvContents | undefined> {
  const nvPublic = await nvPublicIfDefined(tpm, index);
  if (!nvPublic) return undefined;
  const hex = `0x${index.toString(16).padStart(8, "0")}`;
  if (!(nvPublic.attributes & TPMA_NV.WRITTEN)) throw new TpmClientError("nv-unreadable", `NV index ${hex} is defined but was never written`);
  let authHandle: number;
  if (nvPublic.attributes & TPMA_NV.AUTHREAD) authHandle = index;
  else if (nvPublic.attributes & TPMA_NV.OWNERREAD) authHandle = TPM_RH.OWNER;
  else throw new TpmClientError("nv-unreadable", `NV index ${hex} allows neither AUTHREAD nor OWNERREAD`);
  const props = await tpm.getProperties(TPM_PT.NV_BUFFER_MAX, 1);
  const chunk = Math.max(1, Math.min(opts.chunk ?? Infinity, props.get(TPM_PT.NV_BUFFER_MAX) ?? DEFAULT_NV_CHUNK, MAX_CHUNK));
  const out = new Uint8Array(nvPublic.dataSize);
  for (let offset = 0; offset < nvPublic.dataSize; ) {
    const size = Math.min(chunk, nvPublic.dataSize - offset);
    const data = await tpm.nvRead(authHandle, index, size, offset, authHandle === TPM_RH.OWNER ? opts.ownerAuth : undefined);
    if (data.length !== size) throw new TpmClientError("unexpected", `NV_Read of ${hex} returned ${data.length} bytes at offset ${offset}, asked for ${size}`);
    out.set(data, offset);
    offset += size;
  }
  return { nvPublic, data: out };
}
