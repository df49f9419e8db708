/** An EK public area from a TPM2B_PUBLIC file (tpm2_createek -u). */
import type { TPMT_PUBLIC } from "../tpm/structures.js";
import { readPublicOption } from "./inputs.js";

export function ekPublicFromFile(path: string): TPMT_PUBLIC {
  return readPublicOption(path, "--ek-public").pub;
}
