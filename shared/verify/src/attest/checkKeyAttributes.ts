/**
 * Attribute checks for keys whose evidence fleetd trusts. Each refusal is a named reason.
 *  - AK / LAK: a restricted signing key that never left the TPM (fixedTPM, fixedParent, sensitiveDataOrigin,
 *    restricted, sign, not decrypt). Only a restricted key refuses to sign data that starts with
 *    TPM_GENERATED_VALUE, so only it can vouch for a quote.
 *  - LDevID: an unrestricted sign-only key that never left the TPM, usable with its auth value
 *    (SPIRE tpm_devid's rules): fixedTPM, fixedParent, sensitiveDataOrigin, userWithAuth, sign; not
 *    restricted, not decrypt, adminWithPolicy clear.
 */
import { algName, CURVES, isCurve, TPMA_OBJECT, TPM_ALG, type ObjectAttributeName } from "../tcg/constants.js";
import type { TPMT_PUBLIC } from "../tpm/structures.js";
import { keySigningScheme } from "./verifySignature.js";
import type { Checks } from "./verdict.js";

export interface KeyPolicy {
  mustSet: ObjectAttributeName[];
  mustClear: ObjectAttributeName[];
  /** Minimum RSA modulus bits. */
  minRsaBits: number;
  /** Minimum ECC coordinate bits. */
  minEccBits: number;
  /** Minimum nameAlg digest size in bytes. */
  minNameAlgSize: number;
  /** The key must carry a signing scheme (not NULL) so its signatures cannot be reinterpreted. */
  requireScheme: boolean;
}

export const AK_POLICY: KeyPolicy = {
  mustSet: ["fixedTPM", "fixedParent", "sensitiveDataOrigin", "restricted", "sign"],
  mustClear: ["decrypt"],
  minRsaBits: 2048,
  minEccBits: 256,
  minNameAlgSize: 32,
  requireScheme: true,
};

export const LDEVID_POLICY: KeyPolicy = {
  mustSet: ["fixedTPM", "fixedParent", "sensitiveDataOrigin", "userWithAuth", "sign"],
  mustClear: ["restricted", "decrypt", "adminWithPolicy"],
  minRsaBits: 2048,
  minEccBits: 256,
  minNameAlgSize: 32,
  requireScheme: false,
};

const NAME_ALG_SIZES: Record<number, number> = {
  [TPM_ALG.SHA1]: 20,
  [TPM_ALG.SHA256]: 32,
  [TPM_ALG.SHA384]: 48,
  [TPM_ALG.SHA512]: 64,
};

/** Adds a reason to `c` for every attribute rule `pub` breaks, under `prefix` (e.g. "ak"). */
export function checkKeyAttributes(c: Checks, prefix: string, pub: TPMT_PUBLIC, policy: KeyPolicy): boolean {
  const before = c.reasons.length;
  const attrs = pub.objectAttributes;
  for (const name of policy.mustSet) {
    c.check((attrs & TPMA_OBJECT[name]) !== 0, `${prefix}.attributes.${name}`, `${prefix} must have ${name} set`);
  }
  for (const name of policy.mustClear) {
    c.check((attrs & TPMA_OBJECT[name]) === 0, `${prefix}.attributes.${name}`, `${prefix} must have ${name} clear`);
  }
  const nameSize = NAME_ALG_SIZES[pub.nameAlg] ?? 0;
  c.check(nameSize >= policy.minNameAlgSize, `${prefix}.nameAlg`, `${prefix} nameAlg ${algName(pub.nameAlg)} is weaker than ${policy.minNameAlgSize * 8} bits`);
  if (pub.parameters.kind === "rsa") {
    c.check(pub.parameters.keyBits >= policy.minRsaBits, `${prefix}.keySize`, `${prefix} RSA key has ${pub.parameters.keyBits} bits, needs ${policy.minRsaBits}`);
  } else if (pub.parameters.kind === "ecc") {
    const curve = pub.parameters.curveID;
    const bits = isCurve(curve) ? CURVES[curve].size * 8 : 0;
    c.check(bits >= policy.minEccBits, `${prefix}.keySize`, `${prefix} ECC curve 0x${curve.toString(16)} is not an allowed curve of ≥ ${policy.minEccBits} bits`);
  } else {
    c.fail(`${prefix}.type`, `${prefix} must be an RSA or ECC key, not ${pub.parameters.kind}`);
  }
  if (policy.requireScheme) {
    c.check(keySigningScheme(pub) !== undefined, `${prefix}.scheme`, `${prefix} must name its signing scheme (RSASSA, RSAPSS or ECDSA)`);
  }
  return c.reasons.length === before;
}
