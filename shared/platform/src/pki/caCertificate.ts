/**
 * The self-signed CA certificate, signed by the CA key through the signer (the key never leaves the token).
 * Profile: subject = issuer = CN=<commonName>; BasicConstraints CA:TRUE, pathLen 0 (critical) — it signs
 * leaves only; KeyUsage keyCertSign + cRLSign (critical); SubjectKeyIdentifier. Validity is the caller's
 * choice, but leaves cannot outlive it, so a CA is replaced (rolled over) well before it expires.
 */
import { basicConstraintsExtension, keyUsageExtension, subjectKeyIdentifierExtension, commonNameName, certificateToPem } from "@fleetd/verify/x509";
import { describePublicKey } from "./algorithms.js";
import { signCertificate, wholeSeconds } from "./buildCertificate.js";
import { PkiError } from "./errors.js";
import { fingerprint } from "./issueLeaf.js";
import { caKeyAllowed, DAY_MS, MAX_LEAF_LIFETIME_DAYS } from "./profiles.js";
import { keyIdentifier } from "./publicKey.js";
import { checkSerial, randomSerial } from "./serial.js";
import type { CertificateSigner } from "./signer.js";

export interface CaCertificateRequest {
  signer: CertificateSigner;
  commonName: string;
  notBefore: Date;
  lifetimeDays: number;
  serial?: Uint8Array;
}

export interface CaCertificate {
  der: Uint8Array;
  pem: string;
  fingerprint: string;
  notBefore: Date;
  notAfter: Date;
}

export async function createCaCertificate(req: CaCertificateRequest): Promise<CaCertificate> {
  if (req.commonName.length === 0 || req.commonName.length > 64) throw new PkiError("invalid-node-name", "CA common name must be 1..64 characters");
  if (!Number.isFinite(req.lifetimeDays) || req.lifetimeDays <= MAX_LEAF_LIFETIME_DAYS) {
    throw new PkiError("invalid-lifetime", `a CA must live longer than the ${MAX_LEAF_LIFETIME_DAYS}-day leaf maximum (asked ${req.lifetimeDays} days)`);
  }
  if (Number.isNaN(req.notBefore.getTime())) throw new PkiError("invalid-validity", "notBefore is not a valid date");
  const key = req.signer.publicKey;
  if (!caKeyAllowed(key)) throw new PkiError("unsupported-key", `${describePublicKey(key)} is not allowed as a CA key`);
  const serial = req.serial ?? randomSerial();
  checkSerial(serial);
  const notBefore = wholeSeconds(req.notBefore);
  const notAfter = wholeSeconds(new Date(notBefore.getTime() + req.lifetimeDays * DAY_MS));
  const name = commonNameName(req.commonName);
  const der = await signCertificate(
    {
      serial,
      issuer: name,
      subject: name,
      notBefore,
      notAfter,
      spki: key.spki,
      extensions: [basicConstraintsExtension(true, 0), keyUsageExtension(["keyCertSign", "cRLSign"]), subjectKeyIdentifierExtension(keyIdentifier(key.spki))],
    },
    req.signer,
  );
  return { der, pem: certificateToPem(der), fingerprint: fingerprint(der), notBefore, notAfter };
}
