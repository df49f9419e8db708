/**
 * Which TPM is behind a transport: TPM_GetCapability(TPM_CAP_VERSION_VAL) with the TPM 1.2 tag 0x00C1.
 *  - a TPM 1.2 answers tag 0x00C4, return code 0, a TPM_CAP_VERSION_INFO saying 1.2;
 *  - a TPM 2.0 answers either TPM_RC_BAD_TAG (0x01E, TPM 2.0 Part 1 §18.1's rule for 1.2 tags) in a 0x00C4
 *    response, or — libtpms 0.9 does this — with a TPM 2.0 response tag (0x8001/0x8002) and its own code.
 * Anything else is an error, never a guess.
 */
import { Reader, decodeExact } from "@fleetd/verify/codec";
import { TPM_GetCapability, TPM12, TPM_CAP_VERSION_INFO } from "@fleetd/verify/tpm12";
import type { TpmTransport } from "../tpmclient/transport.js";
import { encodeParams, marshalCommand12, parseResponse12 } from "./command.js";

export type TpmFamily = "1.2" | "2.0";

const TPM_RC_BAD_TAG = 0x01e;

export class TpmFamilyError extends Error {
  override readonly name = "TpmFamilyError";
}

export async function detectTpmFamily(transport: TpmTransport): Promise<TpmFamily> {
  const cmd = marshalCommand12(TPM_GetCapability, [], encodeParams(TPM_GetCapability, { capArea: TPM12.CAP_VERSION_VAL, subCap: new Uint8Array(0) }), []);
  const resp = await transport.send(cmd);
  const r = new Reader(resp, "be", { path: ["TPM_GetCapability response"] });
  const tag = r.u16();
  r.u32();
  const rc = r.u32();
  if (tag === 0x8001 || tag === 0x8002) return "2.0";
  if (tag === 0x00c4 && rc === TPM_RC_BAD_TAG) return "2.0";
  const info = decodeExact(TPM_CAP_VERSION_INFO, parseResponse12(TPM_GetCapability, resp).params.resp);
  if (info.tag === TPM12.TAG_CAP_VERSION_INFO && info.version[0] === 1 && info.version[1] === 2) return "1.2";
  throw new TpmFamilyError(`the TPM reports version ${info.version[0]}.${info.version[1]} (tag 0x${info.tag.toString(16)}) for TPM_CAP_VERSION_VAL: neither 1.2 nor 2.0`);
}
