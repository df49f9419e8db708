/**
 * Configuration of the PKCS#11 CA signer (a trust boundary: it comes from a file or the environment).
 *  - module: the PKCS#11 library (YubiKey: /usr/lib/x86_64-linux-gnu/libykcs11.so; SoftHSM2:
 *    /usr/lib/softhsm/libsofthsm2.so)
 *  - token: by label (CKA token label, up to 32 characters) or by slot id
 *  - key: the private key by CKA_LABEL and/or CKA_ID (hex); YubiKey PIV slot 9c is CKA_ID 02
 *  - pin: where to read the user PIN
 *  - rsaMechanism: "auto" uses CKM_SHA256_RSA_PKCS when the token lists it, else CKM_RSA_PKCS over a
 *    DigestInfo computed here
 */
import { z } from "zod";
import { PinSource } from "./pin.js";

const hexId = z
  .string()
  .regex(/^([0-9a-fA-F]{2})+$/, "hex bytes")
  .max(128)
  .transform((s) => s.toLowerCase());

export const Pkcs11SignerConfig = z
  .object({
    module: z.string().min(1),
    token: z.union([
      z.object({ label: z.string().min(1).max(32) }).strict(),
      z.object({ slot: z.number().int().nonnegative() }).strict(),
    ]),
    key: z
      .object({ label: z.string().min(1).optional(), id: hexId.optional() })
      .strict()
      .refine((k) => k.label !== undefined || k.id !== undefined, "key needs a label or an id"),
    pin: PinSource,
    rsaMechanism: z.enum(["auto", "CKM_SHA256_RSA_PKCS", "CKM_RSA_PKCS"]).default("auto"),
  })
  .strict();
export type Pkcs11SignerConfig = z.input<typeof Pkcs11SignerConfig>;
export type Pkcs11SignerSettings = z.output<typeof Pkcs11SignerConfig>;
