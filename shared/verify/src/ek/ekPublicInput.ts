/**
 * An EK public key as operators and tools hand it over: a TPM2B_PUBLIC (`tpm2_createek -u`, the default
 * "tss" format), a bare TPMT_PUBLIC, a PEM "PUBLIC KEY" (`tpm2_createek -f pem`) or "RSA PUBLIC KEY", or a
 * DER SubjectPublicKeyInfo.
 */
import { decodeExact } from "../codec/codec.js";
import { der, derOid, spkiFromTpmPublic } from "../tpm/publicKey.js";
import { TPM2B_PUBLIC, TPMT_PUBLIC } from "../tpm/structures.js";
import { ekBinding } from "./binding.js";
import { parseSubjectPublicKeyInfo } from "../x509/certificate.js";
import { DerReader, TAG, tlvBytes } from "../x509/der.js";
import { CertificateError } from "../x509/errors.js";
import { OID } from "../x509/oids.js";
import { looksLikePem, pemBlocks } from "../x509/pem.js";
import { type CanonicalKey, canonicalKey, keyObjectFromCanonical } from "../x509/spki.js";

export type EkPublicInput =
  | {
      form: "tpm2b_public" | "tpmt_public";
      public: TPMT_PUBLIC;
      /** The marshalled TPMT_PUBLIC exactly as received (the Name is computed over these bytes). */
      publicBytes: Uint8Array;
      spki: Uint8Array;
      binding: string;
    }
  | { form: "pem" | "der"; key: CanonicalKey; spki: Uint8Array; binding: string };

export function readEkPublic(bytes: Uint8Array): EkPublicInput {
  if (bytes.length === 0) throw new CertificateError("not-an-ek-public", "input is empty");
  if (looksLikePem(bytes)) {
    const blocks = pemBlocks(Buffer.from(bytes).toString("latin1"));
    const pub = blocks.find((b) => b.label === "PUBLIC KEY");
    const rsa = blocks.find((b) => b.label === "RSA PUBLIC KEY");
    let key: CanonicalKey;
    if (pub) key = canonicalKey(parseSubjectPublicKeyInfo(pub.der));
    else if (rsa) key = canonicalKey(pkcs1ToSpki(rsa.der));
    else throw new CertificateError("not-an-ek-public", `PEM input has no PUBLIC KEY block (found: ${blocks.map((b) => b.label).join(", ") || "none"})`);
    return { form: "pem", key, spki: key.spki, binding: ekBinding(key.spki) };
  }
  if (bytes[0] === TAG.SEQUENCE) {
    const key = canonicalKey(parseSubjectPublicKeyInfo(bytes));
    return { form: "der", key, spki: key.spki, binding: ekBinding(key.spki) };
  }
  // TPM2B_PUBLIC if its size prefix covers the rest exactly, else a bare TPMT_PUBLIC.
  const sized = bytes.length >= 2 && ((bytes[0] ?? 0) << 8 | (bytes[1] ?? 0)) === bytes.length - 2;
  const publicBytes = sized ? bytes.subarray(2) : bytes;
  const pub = sized ? decodeExact(TPM2B_PUBLIC, bytes) : decodeExact(TPMT_PUBLIC, bytes);
  const spki = spkiFromTpmPublic(pub);
  keyObjectFromCanonical(spki);
  return { form: sized ? "tpm2b_public" : "tpmt_public", public: pub, publicBytes, spki, binding: ekBinding(spki) };
}

/** Wrap a PKCS#1 RSAPublicKey in an rsaEncryption SubjectPublicKeyInfo. */
function pkcs1ToSpki(rsaPublicKey: Uint8Array) {
  const d = DerReader.of(rsaPublicKey, "RSAPublicKey");
  const t = d.next(TAG.SEQUENCE, "RSAPublicKey");
  d.expectEnd("RSAPublicKey");
  const alg = der(0x30, derOid(OID.rsaEncryption), Uint8Array.of(0x05, 0x00));
  return parseSubjectPublicKeyInfo(der(0x30, alg, der(0x03, Uint8Array.of(0), tlvBytes(t))));
}
