/**
 * Key templates fleetd creates from. Each is a TPMT_PUBLIC value (encoded by the TPMT_PUBLIC declaration).
 *
 *  - EK: the TCG EK Credential Profile templates of ../ek/templates.ts (L-1 RSA-2048, L-2 P-256, H-1…H-7).
 *  - SRK, SPIRE tpm_devid's `SRKTemplateHighRSA/ECC()` (= go-tpm-tools SRKTemplateRSA/ECC with an **empty**
 *    unique — the high-range H-1/H-2 shape): SHA-256, fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|
 *    noDA|restricted|decrypt (0x00030472), empty authPolicy, AES-128-CFB, scheme NULL, RSA-2048 (exponent 0)
 *    or P-256 with kdf NULL. A DevID made under any other SRK does not load in SPIRE's agent.
 *  - AK and LAK (go-tpm-tools AKTemplateRSA/ECC): SHA-256, fixedTPM|fixedParent|sensitiveDataOrigin|
 *    userWithAuth|restricted|sign (0x00050072), symmetric NULL, RSASSA-SHA256 RSA-2048 or ECDSA-SHA256 P-256.
 *  - LDevID (SPIRE's DevID test template: AK parameters, attributes sign|fixedTPM|fixedParent|
 *    sensitiveDataOrigin|userWithAuth = 0x00040072): unrestricted sign-only, adminWithPolicy clear.
 */
import { objectAttributes, TPM_ALG, TPM_ECC } from "@fleetd/verify/tcg";
import type { TPMT_PUBLIC } from "@fleetd/verify/tpm";

export type KeyAlg = "rsa" | "ecc";

const AES128CFB = { algorithm: TPM_ALG.AES, details: { kind: "aes", keyBits: 128, mode: TPM_ALG.CFB } } as const;
const SYM_NULL = { algorithm: TPM_ALG.NULL, details: { kind: "null" } } as const;
const EMPTY = new Uint8Array(0);

export const SRK_ATTRIBUTES = objectAttributes("fixedTPM", "fixedParent", "sensitiveDataOrigin", "userWithAuth", "noDA", "restricted", "decrypt");
export const AK_ATTRIBUTES = objectAttributes("fixedTPM", "fixedParent", "sensitiveDataOrigin", "userWithAuth", "restricted", "sign");
export const LDEVID_ATTRIBUTES = objectAttributes("fixedTPM", "fixedParent", "sensitiveDataOrigin", "userWithAuth", "sign");

/**
 * RSA-2048 or P-256 under SHA-256 with an empty unique: a storage key (AES-128-CFB, scheme NULL) or a signing key
 * (symmetric NULL, RSASSA-SHA256 / ECDSA-SHA256).
 */
function keyTemplate(alg: KeyAlg, attributes: number, use: "storage" | "signing"): TPMT_PUBLIC {
  const symmetric = use === "storage" ? AES128CFB : SYM_NULL;
  const base = { nameAlg: TPM_ALG.SHA256, objectAttributes: attributes, authPolicy: EMPTY };
  if (alg === "rsa") {
    const scheme =
      use === "storage"
        ? ({ scheme: TPM_ALG.NULL, details: { kind: "null" } } as const)
        : ({ scheme: TPM_ALG.RSASSA, details: { kind: "rsassa", hashAlg: TPM_ALG.SHA256 } } as const);
    return { ...base, type: TPM_ALG.RSA, parameters: { kind: "rsa", symmetric, scheme, keyBits: 2048, exponent: 0 }, unique: { kind: "rsa", n: EMPTY } };
  }
  const scheme =
    use === "storage"
      ? ({ scheme: TPM_ALG.NULL, details: { kind: "null" } } as const)
      : ({ scheme: TPM_ALG.ECDSA, details: { kind: "ecdsa", hashAlg: TPM_ALG.SHA256 } } as const);
  return {
    ...base,
    type: TPM_ALG.ECC,
    parameters: { kind: "ecc", symmetric, scheme, curveID: TPM_ECC.NIST_P256, kdf: { scheme: TPM_ALG.NULL, details: { kind: "null" } } },
    unique: { kind: "ecc", x: EMPTY, y: EMPTY },
  };
}

/** SPIRE tpm_devid's SRK: SRKTemplateHighRSA() / SRKTemplateHighECC(). */
export function srkTemplate(alg: KeyAlg): TPMT_PUBLIC {
  return keyTemplate(alg, SRK_ATTRIBUTES, "storage");
}

/** AK: restricted signing key (one per attestation session). */
export function akTemplate(alg: KeyAlg): TPMT_PUBLIC {
  return keyTemplate(alg, AK_ATTRIBUTES, "signing");
}

/** LAK: the long-lived restricted signing key certified at admission, same shape as the AK. */
export function lakTemplate(alg: KeyAlg): TPMT_PUBLIC {
  return keyTemplate(alg, AK_ATTRIBUTES, "signing");
}

/** LDevID: unrestricted sign-only key, adminWithPolicy clear (SPIRE tpm_devid). */
export function ldevidTemplate(alg: KeyAlg): TPMT_PUBLIC {
  return keyTemplate(alg, LDEVID_ATTRIBUTES, "signing");
}
