/**
 * PKCS#10 certification requests (RFC 2986 §4), decoded from strict DER with the same reader as certificates.
 * Parsing only: the self-signature is checked by `verifyRequestSignature`, over the exact
 * certificationRequestInfo bytes received; whether a request is acceptable is its caller's judgement.
 *
 *   CertificationRequest ::= SEQUENCE { certificationRequestInfo, signatureAlgorithm, signature BIT STRING }
 *   CertificationRequestInfo ::= SEQUENCE { version INTEGER { v1(0) }, subject Name,
 *     subjectPKInfo SubjectPublicKeyInfo, attributes [0] IMPLICIT SET OF Attribute }
 */
import { type KeyObject, verify } from "node:crypto";
import { type AlgorithmIdentifier, type SubjectPublicKeyInfo, readAlgorithmIdentifier, readSubjectPublicKeyInfo } from "./certificate.js";
import { DerReader, TAG, contextTag, tlvBytes } from "./der.js";
import { CertificateError } from "./errors.js";
import { type Extension, type ParsedExtensions, extensionName, parseExtensions, readExtensions } from "./extensions.js";
import { type Name, readName } from "./names.js";

/** PKCS#9 extensionRequest (RFC 2985 §5.4.2): the extensions a request asks for. */
export const OID_EXTENSION_REQUEST = "1.2.840.113549.1.9.14";

export interface RequestAttribute {
  type: string;
  /** Each value's whole DER element. */
  values: Uint8Array[];
}

export interface CertificationRequest {
  der: Uint8Array;
  /** certificationRequestInfo exactly as received: what the signature covers. */
  info: Uint8Array;
  /** The version INTEGER (0 is v1, the only one defined). */
  version: number;
  subject: Name;
  spki: SubjectPublicKeyInfo;
  /** Attributes other than extensionRequest, in order. */
  attributes: RequestAttribute[];
  /** The requested extensions (every extensionRequest value, in order). */
  extensions: Extension[];
  /** The requested extensions fleetd interprets, decoded. */
  ext: ParsedExtensions;
  signatureAlgorithm: AlgorithmIdentifier;
  signature: Uint8Array;
}

/** Decode exactly one request from `der` (strict DER, no trailing bytes); structural problems are ParseErrors. */
export function parseCertificationRequest(der: Uint8Array): CertificationRequest {
  const top = DerReader.of(der, "CertificationRequest", { strict: true });
  const req = top.enter(TAG.SEQUENCE, "CertificationRequest SEQUENCE");
  top.expectEnd("certification request");
  const { inner: info, tlv: infoTlv } = req.field("certificationRequestInfo", () => req.enterTlv(TAG.SEQUENCE, "CertificationRequestInfo"));
  const version = info.field("version", () => info.smallInteger());
  const subject = info.field("subject", () => readName(info));
  const spki = info.field("subjectPKInfo", () => readSubjectPublicKeyInfo(info));
  const attributes: RequestAttribute[] = [];
  const extensions: Extension[] = [];
  info.field("attributes", () => {
    const set = info.enter(contextTag(0, true), "attributes [0]");
    while (!set.atEnd) {
      set.field(String(attributes.length + extensions.length), () => {
        const a = set.enter(TAG.SEQUENCE, "Attribute");
        const type = a.field("type", () => a.oid());
        const vs = a.enter(TAG.SET, "Attribute values");
        a.expectEnd("Attribute");
        const values: Uint8Array[] = [];
        while (!vs.atEnd) {
          if (type === OID_EXTENSION_REQUEST) extensions.push(...vs.field("extensionRequest", () => readExtensions(vs)));
          else values.push(tlvBytes(vs.any()));
        }
        if (type !== OID_EXTENSION_REQUEST) attributes.push({ type, values });
      });
    }
  });
  info.expectEnd("CertificationRequestInfo");
  const oids = extensions.map((e) => e.oid);
  const dup = oids.find((o, i) => oids.indexOf(o) !== i);
  if (dup) throw new CertificateError("duplicate-extension", `requested extension ${extensionName(dup)} appears twice`);
  const signatureAlgorithm = req.field("signatureAlgorithm", () => readAlgorithmIdentifier(req));
  const signature = req.field("signature", () => req.bitStringBytes());
  req.expectEnd("CertificationRequest");
  return {
    der,
    info: tlvBytes(infoTlv),
    version,
    subject,
    spki,
    attributes,
    extensions,
    ext: parseExtensions(extensions, { strict: true }),
    signatureAlgorithm,
    signature,
  };
}

/** Signature algorithms a request may use: ECDSA and RSA PKCS#1 v1.5 with SHA-2, and Ed25519 (what kubelets and openssl write). */
export const REQUEST_SIGNATURE_ALGORITHMS: Readonly<Record<string, { name: string; hash: string | null; key: "ec" | "rsa" | "ed25519" }>> = {
  "1.2.840.10045.4.3.2": { name: "ecdsa-with-SHA256", hash: "sha256", key: "ec" },
  "1.2.840.10045.4.3.3": { name: "ecdsa-with-SHA384", hash: "sha384", key: "ec" },
  "1.2.840.10045.4.3.4": { name: "ecdsa-with-SHA512", hash: "sha512", key: "ec" },
  "1.2.840.113549.1.1.11": { name: "sha256WithRSAEncryption", hash: "sha256", key: "rsa" },
  "1.2.840.113549.1.1.12": { name: "sha384WithRSAEncryption", hash: "sha384", key: "rsa" },
  "1.2.840.113549.1.1.13": { name: "sha512WithRSAEncryption", hash: "sha512", key: "rsa" },
  "1.3.101.112": { name: "Ed25519", hash: null, key: "ed25519" },
};

/**
 * Does the request's self-signature verify with `key` (the request's own public key) over the exact
 * certificationRequestInfo bytes? False for an algorithm outside REQUEST_SIGNATURE_ALGORITHMS, or one that
 * does not match the key's type.
 */
export function verifyRequestSignature(req: CertificationRequest, key: KeyObject): boolean {
  const alg = REQUEST_SIGNATURE_ALGORITHMS[req.signatureAlgorithm.oid];
  if (!alg || alg.key !== key.asymmetricKeyType) return false;
  try {
    return verify(alg.hash, req.info, alg.key === "ec" ? { key, dsaEncoding: "der" } : key, req.signature);
  } catch {
    return false;
  }
}
