/**
 * PCR value files (a trust boundary: validated with zod):
 *  - YAML or JSON maps bank → PCR → hex, as `tpm2_pcrread` prints them (`sha256:\n  0 : 0x3D45…`) or as
 *    {"pcrs": {"sha256": {"0": "…"}}} (the conformance `.pcrs.json` files). Scalars are read as strings
 *    (YAML failsafe schema) so a 0x… value never turns into a number.
 */
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { TPM_ALG } from "../tcg/constants.js";
import type { PcrValues } from "../attest/pcrs.js";

const BANKS: Record<string, { alg: number; size: number }> = {
  sha1: { alg: TPM_ALG.SHA1, size: 20 },
  sha256: { alg: TPM_ALG.SHA256, size: 32 },
  sha384: { alg: TPM_ALG.SHA384, size: 48 },
  sha512: { alg: TPM_ALG.SHA512, size: 64 },
};

export class PcrFileError extends Error {
  override readonly name = "PcrFileError";
}

const PcrMap = z.record(z.string().regex(/^\d{1,2}$/, "PCR index"), z.string().regex(/^(0x)?[0-9a-fA-F]+$/, "hex value"));
const BankMap = z.partialRecord(z.enum(["sha1", "sha256", "sha384", "sha512"]), PcrMap);
const File = z.union([z.strictObject({ pcrs: BankMap }), BankMap]);

export function parsePcrFile(text: string, what = "PCR file"): PcrValues {
  let raw: unknown;
  try {
    raw = parseYaml(text, { schema: "failsafe", uniqueKeys: true });
  } catch (e) {
    throw new PcrFileError(`${what}: ${(e as Error).message.split("\n")[0]}`);
  }
  // The conformance files carry metadata beside "pcrs"; keep only that key when present.
  if (raw && typeof raw === "object" && "pcrs" in raw) raw = { pcrs: (raw as { pcrs: unknown }).pcrs };
  const r = File.safeParse(raw);
  if (!r.success) throw new PcrFileError(`${what}: ${r.error.issues.map((i) => `${i.path.join(".") || "<root>"}: ${i.message}`).join("; ")}`);
  const banks = "pcrs" in r.data ? (r.data.pcrs as z.infer<typeof BankMap>) : (r.data as z.infer<typeof BankMap>);
  const out: PcrValues = new Map();
  for (const [name, pcrs] of Object.entries(banks)) {
    const bank = BANKS[name]!;
    const m = new Map<number, Uint8Array>();
    for (const [idx, value] of Object.entries(pcrs ?? {})) {
      const pcr = Number(idx);
      if (pcr > 23) throw new PcrFileError(`${what}: ${name} PCR ${idx} does not exist`);
      const h = value.replace(/^0x/, "");
      if (h.length !== bank.size * 2) throw new PcrFileError(`${what}: ${name} PCR ${idx} has ${h.length / 2} bytes, need ${bank.size}`);
      m.set(pcr, new Uint8Array(Buffer.from(h, "hex")));
    }
    out.set(bank.alg, m);
  }
  return out;
}
