/**
 * EK certificate verification: the EK profile checks on the leaf (TCG EK Credential Profile), then the
 * chain to the manufacturer CA store. Returns a verdict as data, with the EK binding and TPM description.
 *
 * Leaf checks: extendedKeyUsage, when present, must include tcg-kp-EKCertificate (2.23.133.8.1); the leaf
 * must not be a CA; its key must be RSA or EC on P-256/384/521 so that it has an EK binding. The critical
 * subjectAltName carrying the TPM directoryName is understood (chain.ts), not stripped.
 */
import type { Certificate } from "../x509/certificate.js";
import { ekBinding } from "./binding.js";
import { type ChainOptions, type ChainVerdict, type ChainReason, verifyCertificateChain } from "./chain.js";
import { OID } from "../x509/oids.js";
import { canonicalKey, describeCanonicalKey } from "../x509/spki.js";
import type { CaStore } from "./store.js";
import { type TpmInfo, tpmInfoFromCertificate } from "./tpmInfo.js";

export interface EkCertificateVerdict extends ChainVerdict {
  /** EK binding (absent when the key has none; a reason says why). */
  binding?: string;
  /** "RSA-2048", "ECC P-384". */
  key?: string;
  tpm: TpmInfo;
}

export function ekLeafChecks(cert: Certificate): ChainReason[] {
  const reasons: ChainReason[] = [];
  const eku = cert.ext.extKeyUsage;
  if (eku && !eku.includes(OID.tcgKpEkCertificate)) {
    reasons.push({ check: "ek-eku", detail: `extendedKeyUsage ${eku.join(", ")} does not include tcg-kp-EKCertificate (${OID.tcgKpEkCertificate})` });
  }
  if (cert.ext.basicConstraints?.cA) reasons.push({ check: "ek-ca", detail: "the EK certificate has basicConstraints cA=TRUE" });
  return reasons;
}

export function verifyEkCertificate(cert: Certificate, store: CaStore, opts: ChainOptions = {}): EkCertificateVerdict {
  const reasons = ekLeafChecks(cert);
  let binding: string | undefined;
  let key: string | undefined;
  try {
    const k = canonicalKey(cert.spki);
    binding = ekBinding(k.spki);
    key = describeCanonicalKey(k);
  } catch (e) {
    reasons.push({ check: "ek-key", detail: (e as Error).message });
  }
  const chain = verifyCertificateChain(cert, store, opts);
  const all = [...reasons, ...chain.reasons];
  const out: EkCertificateVerdict = {
    verdict: all.length === 0 && chain.verdict === "pass" ? "pass" : "fail",
    chain: chain.chain,
    reasons: all,
    warnings: chain.warnings,
    tpm: tpmInfoFromCertificate(cert),
  };
  if (binding !== undefined) out.binding = binding;
  if (key !== undefined) out.key = key;
  return out;
}
