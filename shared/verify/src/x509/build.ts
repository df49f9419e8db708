/**
 * Building certificates: names, extensions and the TBSCertificate are encoded with @peculiar/asn1-x509 (pure
 * ASN.1 schema code), the caller signs the TBS bytes (fleetd's CA signs with a PKCS#11 key, in
 * @fleetd/platform/pki), and the certificate wraps exactly those bytes. The signature algorithm appears in
 * both the TBS `signature` field and the outer `signatureAlgorithm` (RFC 5280 §4.1.1.2).
 */
import { AsnConvert, OctetString } from "@peculiar/asn1-schema";
import {
  AlgorithmIdentifier as AsnAlgorithmIdentifier,
  AttributeTypeAndValue,
  AttributeValue,
  AuthorityKeyIdentifier,
  BasicConstraints as AsnBasicConstraints,
  Certificate as AsnCertificate,
  ExtendedKeyUsage,
  Extension as AsnExtension,
  Extensions,
  KeyIdentifier,
  KeyUsage as AsnKeyUsage,
  KeyUsageFlags,
  Name as AsnName,
  RelativeDistinguishedName,
  SubjectKeyIdentifier,
  SubjectPublicKeyInfo as AsnSubjectPublicKeyInfo,
  TBSCertificate,
  Validity,
  Version,
} from "@peculiar/asn1-x509";
import type { Extension, KeyUsage } from "./extensions.js";
import type { Name } from "./names.js";
import { OID } from "./oids.js";

const OID_CN = "2.5.4.3";

/** A Name with a single CN attribute, as a UTF8String (RFC 5280 §4.1.2.4). */
export function commonNameName(cn: string): Name {
  const der = AsnConvert.serialize(
    new AsnName([new RelativeDistinguishedName([new AttributeTypeAndValue({ type: OID_CN, value: new AttributeValue({ utf8String: cn }) })])]),
  );
  return { der: new Uint8Array(der), rdns: [[{ type: OID_CN, value: cn }]] };
}

function extension(oid: string, critical: boolean, value: unknown): Extension {
  return { oid, critical, value: new Uint8Array(AsnConvert.serialize(value)) };
}

export function basicConstraintsExtension(ca: boolean, pathLen?: number): Extension {
  return extension(OID.basicConstraints, true, new AsnBasicConstraints(ca ? { cA: true, ...(pathLen !== undefined ? { pathLenConstraint: pathLen } : {}) } : {}));
}

export function keyUsageExtension(usages: readonly KeyUsage[]): Extension {
  const flags = usages.reduce((acc, u) => acc | KeyUsageFlags[u], 0);
  return extension(OID.keyUsage, true, new AsnKeyUsage(flags));
}

export function extendedKeyUsageExtension(purposes: readonly string[]): Extension {
  return extension(OID.extKeyUsage, false, new ExtendedKeyUsage([...purposes]));
}

export function subjectKeyIdentifierExtension(id: Uint8Array): Extension {
  return extension(OID.subjectKeyIdentifier, false, new SubjectKeyIdentifier(id));
}

export function authorityKeyIdentifierExtension(id: Uint8Array): Extension {
  return extension(OID.authorityKeyIdentifier, false, new AuthorityKeyIdentifier({ keyIdentifier: new KeyIdentifier(id) }));
}

export interface CertificateFields {
  /** Positive DER INTEGER content bytes. */
  serial: Uint8Array;
  issuer: Name;
  subject: Name;
  notBefore: Date;
  notAfter: Date;
  /** DER SubjectPublicKeyInfo. */
  spki: Uint8Array;
  extensions: readonly Extension[];
  /** The signature algorithm's OID, and whether its parameters are NULL (RSA, RFC 4055 §5) or absent (ECDSA, RFC 5758 §3.2). */
  signatureAlgorithm: { oid: string; nullParameters: boolean };
}

function toArrayBuffer(b: Uint8Array): ArrayBuffer {
  return new Uint8Array(b).buffer;
}

/** Encode the TBSCertificate, have `sign` sign its DER, and return the certificate's DER. */
export async function buildCertificate(fields: CertificateFields, sign: (tbs: Uint8Array) => Promise<Uint8Array>): Promise<Uint8Array> {
  const alg = fields.signatureAlgorithm;
  const algorithm = (): AsnAlgorithmIdentifier =>
    new AsnAlgorithmIdentifier(alg.nullParameters ? { algorithm: alg.oid, parameters: null } : { algorithm: alg.oid });
  const tbs = new TBSCertificate({
    version: Version.v3,
    serialNumber: toArrayBuffer(fields.serial),
    signature: algorithm(),
    issuer: AsnConvert.parse(fields.issuer.der, AsnName),
    validity: new Validity({ notBefore: fields.notBefore, notAfter: fields.notAfter }),
    subject: AsnConvert.parse(fields.subject.der, AsnName),
    subjectPublicKeyInfo: AsnConvert.parse(fields.spki, AsnSubjectPublicKeyInfo),
    extensions: new Extensions(fields.extensions.map((e) => new AsnExtension({ extnID: e.oid, critical: e.critical, extnValue: new OctetString(e.value) }))),
  });
  const tbsDer = new Uint8Array(AsnConvert.serialize(tbs));
  const signature = await sign(tbsDer);
  const cert = new AsnCertificate({ tbsCertificate: tbs, signatureAlgorithm: algorithm(), signatureValue: toArrayBuffer(signature) });
  return new Uint8Array(AsnConvert.serialize(cert));
}
