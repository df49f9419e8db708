/**
 * X.509 v3 extensions the CA writes (RFC 5280 §4.2). Only extensions every verifier handles are ever
 * critical (KeyUsage, BasicConstraints), because Go's crypto/x509 — SPIRE — refuses a certificate with
 * an unhandled critical extension.
 */
import { AsnConvert, OctetString } from "@peculiar/asn1-schema";
import {
  AuthorityKeyIdentifier,
  BasicConstraints,
  ExtendedKeyUsage,
  Extension,
  id_ce_authorityKeyIdentifier,
  id_ce_basicConstraints,
  id_ce_extKeyUsage,
  id_ce_keyUsage,
  id_ce_subjectKeyIdentifier,
  KeyIdentifier,
  KeyUsage,
  KeyUsageFlags,
  SubjectKeyIdentifier,
} from "@peculiar/asn1-x509";

export const OID_EKU_CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";
/** TCG tcg-kp-AIKCertificate (2.23.133.8.3): the key purpose of attestation-key certificates. */
export const OID_EKU_TCG_AIK_CERTIFICATE = "2.23.133.8.3";

export type KeyUsageName = "digitalSignature" | "keyCertSign" | "cRLSign";

function extension(extnID: string, critical: boolean, value: unknown): Extension {
  return new Extension({ extnID, critical, extnValue: new OctetString(AsnConvert.serialize(value)) });
}

export function basicConstraintsExtension(ca: boolean, pathLen?: number): Extension {
  return extension(id_ce_basicConstraints, true, new BasicConstraints(ca ? { cA: true, ...(pathLen !== undefined ? { pathLenConstraint: pathLen } : {}) } : {}));
}

export function keyUsageExtension(usages: KeyUsageName[]): Extension {
  const flags = usages.reduce((acc, u) => acc | KeyUsageFlags[u], 0);
  return extension(id_ce_keyUsage, true, new KeyUsage(flags));
}

export function extendedKeyUsageExtension(purposes: string[]): Extension {
  return extension(id_ce_extKeyUsage, false, new ExtendedKeyUsage(purposes));
}

export function subjectKeyIdentifierExtension(id: Uint8Array): Extension {
  return extension(id_ce_subjectKeyIdentifier, false, new SubjectKeyIdentifier(id));
}

export function authorityKeyIdentifierExtension(id: Uint8Array): Extension {
  return extension(id_ce_authorityKeyIdentifier, false, new AuthorityKeyIdentifier({ keyIdentifier: new KeyIdentifier(id) }));
}
