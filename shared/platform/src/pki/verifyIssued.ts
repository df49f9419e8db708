/**
 * Does a leaf certificate chain to the bundle, and would SPIRE's tpm_devid (Go crypto/x509) accept it?
 * Both certificates are read by @fleetd/verify/x509; a bundle CA issued the leaf when its subject is the leaf's
 * issuer (as OpenSSL's X509_check_issued decides: names, AKI/SKI, keyCertSign) and the leaf's signature verifies
 * with its key over the leaf's exact TBS bytes. Returns a verdict: every failed check is a reason naming the
 * certificate.
 */
import { Checks, type Verdict } from "@fleetd/verify/attest";
import { namesIssuer, signedBy } from "@fleetd/verify/x509";
import { signatureAlgorithmByOid } from "./algorithms.js";
import { PkiError } from "./errors.js";
import { fingerprint } from "./issueLeaf.js";
import { parseIssuedCertificate, type CertificateInfo } from "./parseCertificate.js";
import { certificateDer } from "./pem.js";
import { DAY_MS, LAK_PROFILE, LDEVID_PROFILE, MAX_LEAF_LIFETIME_DAYS } from "./profiles.js";

/** Extensions a leaf may mark critical: the ones every verifier (Go's crypto/x509 included) handles. */
const CRITICAL_OK = new Set(["2.5.29.15", "2.5.29.19", "2.5.29.37"]);

export interface VerifyIssuedOptions {
  /** Also check the LDevID or LAK profile (EKU, subject shape). */
  profile?: "ldevid" | "lak";
}

export interface IssuedVerdict extends Verdict {
  /** SHA-256 of the CA certificate the leaf chains to. */
  issuerFingerprint?: string;
}

type CertInput = Uint8Array | string;

function validAt(c: CertificateInfo, now: Date): boolean {
  return now >= c.notBefore && now <= c.notAfter;
}

export function verifyIssued(cert: CertInput, bundle: readonly CertInput[], now: Date, options: VerifyIssuedOptions = {}): IssuedVerdict {
  const c = new Checks();
  let info: CertificateInfo;
  try {
    info = parseIssuedCertificate(certificateDer(cert, "leaf certificate"), "leaf certificate");
  } catch (e) {
    c.fail("pki.leaf.parse", e instanceof PkiError ? e.message : `leaf certificate does not parse: ${(e as Error).message}`);
    return c.verdict();
  }
  const who = `certificate "${info.subjectCn}" (serial ${Buffer.from(info.serial).toString("hex")})`;

  c.check(info.version === 3, "pki.leaf.version", `${who} is X.509 v${info.version}, not v3`);
  c.check(info.subjectCn.length > 0, "pki.leaf.subject", `${who} has no subject CN (SPIRE's subject:cn selector needs one)`);
  c.check((info.serial[0] ?? 0x80) < 0x80 && info.serial.some((b) => b !== 0), "pki.leaf.serial", `${who} serial is not positive`);
  c.check(
    signatureAlgorithmByOid(info.signatureAlgorithm) !== undefined,
    "pki.leaf.signatureAlgorithm",
    `${who} is signed with ${info.signatureAlgorithm}, not ECDSA/RSA with SHA-256/384`,
  );
  c.check(
    validAt(info, now),
    "pki.leaf.validity",
    `${who} is valid ${info.notBefore.toISOString()} .. ${info.notAfter.toISOString()}, not at ${now.toISOString()}`,
  );
  const lifetimeDays = (info.notAfter.getTime() - info.notBefore.getTime()) / DAY_MS;
  c.check(lifetimeDays <= MAX_LEAF_LIFETIME_DAYS, "pki.leaf.lifetime", `${who} lives ${lifetimeDays.toFixed(2)} days, more than ${MAX_LEAF_LIFETIME_DAYS}`);
  c.check(info.basicConstraints?.ca !== true, "pki.leaf.basicConstraints", `${who} is a CA certificate`);
  c.check(info.keyUsage?.includes("digitalSignature") === true, "pki.leaf.keyUsage", `${who} lacks KeyUsage digitalSignature`);
  for (const ext of info.extensions) {
    c.check(!ext.critical || CRITICAL_OK.has(ext.oid), "pki.leaf.criticalExtension", `${who} has critical extension ${ext.oid}, which Go's crypto/x509 rejects`);
  }
  if (options.profile) {
    const profile = options.profile === "ldevid" ? LDEVID_PROFILE : LAK_PROFILE;
    const eku = [...(info.extendedKeyUsage ?? [])].sort().join(",");
    c.check(eku === [...profile.extendedKeyUsage].sort().join(","), "pki.profile.eku", `${who} EKU is [${eku}], not the ${profile.name} profile's [${profile.extendedKeyUsage.join(",")}]`);
    const shape = options.profile === "ldevid" ? /\.g[1-9][0-9]*$/ : /\.g[1-9][0-9]*\.lak$/;
    c.check(shape.test(info.subjectCn), "pki.profile.subject", `${who} subject CN does not have the ${profile.name} form`);
  }

  let issuerFingerprint: string | undefined;
  let candidates = 0;
  for (const [i, entry] of bundle.entries()) {
    let caInfo: CertificateInfo;
    try {
      caInfo = parseIssuedCertificate(certificateDer(entry, `bundle certificate ${i + 1}`), `bundle certificate ${i + 1}`);
    } catch (e) {
      c.fail("pki.bundle.parse", `bundle certificate ${i + 1} does not parse: ${(e as Error).message}`);
      continue;
    }
    if (!namesIssuer(info.certificate, caInfo.certificate)) continue;
    candidates++;
    if (!signedBy(info.certificate, caInfo.certificate)) continue;
    const caWho = `CA "${caInfo.subjectCn}"`;
    c.check(caInfo.basicConstraints?.ca === true, "pki.issuer.ca", `${caWho} is not a CA (BasicConstraints)`);
    c.check(validAt(caInfo, now), "pki.issuer.validity", `${caWho} is valid ${caInfo.notBefore.toISOString()} .. ${caInfo.notAfter.toISOString()}, not at ${now.toISOString()}`);
    issuerFingerprint = fingerprint(caInfo.der);
    break;
  }
  c.check(
    issuerFingerprint !== undefined,
    "pki.chain",
    candidates > 0
      ? `${who} names a CA in the bundle but its signature does not verify`
      : `${who} was issued by "${info.issuerCn}", which is not in the bundle (${bundle.length} CAs)`,
  );
  return { ...c.verdict(), ...(issuerFingerprint ? { issuerFingerprint } : {}) };
}
