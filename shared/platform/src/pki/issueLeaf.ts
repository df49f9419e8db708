/**
 * Issuing a leaf certificate (LDevID or LAK) under a profile. Refuses, with a reason, before anything is
 * signed: a lifetime over 30 days, a leaf outliving its CA or starting before it, a key the profile does
 * not allow, a CA certificate that is not a CA or whose key is not the signer's.
 */
import { createHash } from "node:crypto";
import { authorityKeyIdentifierExtension, basicConstraintsExtension, extendedKeyUsageExtension, keyUsageExtension, subjectKeyIdentifierExtension, commonNameName, certificateToPem } from "@fleetd/verify/x509";
import { describePublicKey } from "./algorithms.js";
import { signCertificate, wholeSeconds } from "./buildCertificate.js";
import { PkiError } from "./errors.js";
import { parseIssuedCertificate, type CertificateInfo } from "./parseCertificate.js";
import { DAY_MS, MAX_LEAF_LIFETIME_DAYS, type LeafProfile } from "./profiles.js";
import { keyIdentifier, publicKeyInfo, type PublicKeyInput } from "./publicKey.js";
import { checkSerial, randomSerial } from "./serial.js";
import type { CertificateSigner } from "./signer.js";

export interface IssuingCa {
  /** The CA certificate (DER or PEM) whose key the signer holds. */
  certificate: Uint8Array | string;
  signer: CertificateSigner;
}

export interface LeafRequest {
  node: string;
  generation: number;
  /** DER SubjectPublicKeyInfo, or the key's TPMT_PUBLIC. */
  publicKey: PublicKeyInput;
  /** Backdate a few minutes for clock skew; Go checks validity at every SPIRE re-attestation. */
  notBefore: Date;
  /** At most 30 (MAX_LEAF_LIFETIME_DAYS). */
  lifetimeDays: number;
  /** Positive DER INTEGER body; default 16 random bytes. */
  serial?: Uint8Array;
}

export interface IssuedCertificate {
  der: Uint8Array;
  pem: string;
  serialHex: string;
  subjectCn: string;
  notBefore: Date;
  notAfter: Date;
  /** SHA-256 of the issuing CA certificate's DER, lowercase hex (the bundle's key for `recordIssuance`). */
  issuerFingerprint: string;
}

export function fingerprint(der: Uint8Array): string {
  return createHash("sha256").update(der).digest("hex");
}

/** The CA certificate must be a CA (BasicConstraints cA, keyCertSign when KeyUsage is present). */
export function checkCaCertificate(ca: CertificateInfo): void {
  if (ca.basicConstraints?.ca !== true) throw new PkiError("not-a-ca", `certificate "${ca.subjectCn}" is not a CA (BasicConstraints cA is not true)`);
  if (ca.keyUsage && !ca.keyUsage.includes("keyCertSign")) throw new PkiError("not-a-ca", `CA "${ca.subjectCn}" lacks KeyUsage keyCertSign`);
}

export function leafValidity(notBefore: Date, lifetimeDays: number): { notBefore: Date; notAfter: Date } {
  if (!(notBefore instanceof Date) || Number.isNaN(notBefore.getTime())) throw new PkiError("invalid-validity", "notBefore is not a valid date");
  if (!Number.isFinite(lifetimeDays) || lifetimeDays <= 0) throw new PkiError("invalid-lifetime", `lifetime ${lifetimeDays} days is not a positive number`);
  if (lifetimeDays > MAX_LEAF_LIFETIME_DAYS) {
    throw new PkiError("lifetime-too-long", `lifetime ${lifetimeDays} days exceeds the ${MAX_LEAF_LIFETIME_DAYS}-day maximum`);
  }
  const start = wholeSeconds(notBefore);
  return { notBefore: start, notAfter: wholeSeconds(new Date(start.getTime() + lifetimeDays * DAY_MS)) };
}

export async function issueLeaf(profile: LeafProfile, ca: IssuingCa, request: LeafRequest, subjectCn: string): Promise<IssuedCertificate> {
  const { notBefore, notAfter } = leafValidity(request.notBefore, request.lifetimeDays);
  const caInfo = parseIssuedCertificate(ca.certificate, "CA certificate");
  checkCaCertificate(caInfo);
  if (!Buffer.from(caInfo.spki).equals(Buffer.from(ca.signer.publicKey.spki))) {
    throw new PkiError("ca-key-mismatch", `the signer's key is not the key of CA "${caInfo.subjectCn}"`);
  }
  if (notBefore < caInfo.notBefore) {
    throw new PkiError("invalid-validity", `notBefore ${notBefore.toISOString()} is before CA "${caInfo.subjectCn}" is valid (${caInfo.notBefore.toISOString()})`);
  }
  if (notAfter > caInfo.notAfter) {
    throw new PkiError("outlives-ca", `the ${profile.name} would be valid until ${notAfter.toISOString()}, after CA "${caInfo.subjectCn}" expires (${caInfo.notAfter.toISOString()})`);
  }
  const key = publicKeyInfo(request.publicKey);
  if (!profile.keyAllowed(key)) throw new PkiError("unsupported-key", `${describePublicKey(key)} keys are not allowed for an ${profile.name} (RSA-2048 or ECC P-256)`);
  if (Buffer.from(key.spki).equals(Buffer.from(caInfo.spki))) throw new PkiError("invalid-key", `the ${profile.name} key is the CA's own key`);
  const serial = request.serial ?? randomSerial();
  checkSerial(serial);

  const der = await signCertificate(
    {
      serial,
      issuer: caInfo.subject,
      subject: commonNameName(subjectCn),
      notBefore,
      notAfter,
      spki: key.spki,
      extensions: [
        basicConstraintsExtension(false),
        keyUsageExtension(profile.keyUsage),
        extendedKeyUsageExtension(profile.extendedKeyUsage),
        subjectKeyIdentifierExtension(keyIdentifier(key.spki)),
        authorityKeyIdentifierExtension(caInfo.subjectKeyIdentifier ?? keyIdentifier(caInfo.spki)),
      ],
    },
    ca.signer,
  );
  return {
    der,
    pem: certificateToPem(der),
    serialHex: Buffer.from(serial).toString("hex"),
    subjectCn,
    notBefore,
    notAfter,
    issuerFingerprint: fingerprint(caInfo.der),
  };
}
