/**
 * EK public areas and certificates:
 *  - build the EK TPMT_PUBLIC from a certificate alone (template + the certificate's key), so the EK Name
 *    (nameAlg ‖ H(TPMT_PUBLIC)) is known without asking the TPM;
 *  - check that a presented EK public area holds the certificate's key.
 */
import { encode } from "../codec/codec.js";
import { CURVES, isCurve } from "../tcg/constants.js";
import { objectName } from "../tpm/name.js";
import { spkiFromTpmPublic } from "../tpm/publicKey.js";
import { TPMT_PUBLIC } from "../tpm/structures.js";
import type { Certificate } from "../x509/certificate.js";
import { ekBinding } from "./binding.js";
import { CertificateError } from "../x509/errors.js";
import { canonicalKey, describeCanonicalKey } from "../x509/spki.js";
import { ekTemplate, type EkTemplate, type EkTemplateId } from "./templates.js";

export interface BuiltEkPublic {
  template: EkTemplate;
  public: TPMT_PUBLIC;
  /** Marshalled TPMT_PUBLIC. */
  bytes: Uint8Array;
  /** Object Name: nameAlg ‖ H_nameAlg(bytes). */
  name: Uint8Array;
}

/** Default template for a certificate key when the NV index is unknown: the low range where there is one. */
export function defaultTemplateFor(cert: Certificate): EkTemplateId {
  const k = canonicalKey(cert.spki);
  if (k.alg === "rsa") return k.bits === 2048 ? "L-1" : k.bits === 3072 ? "H-6" : k.bits === 4096 ? "H-7" : "L-1";
  return k.curve === "P-256" ? "L-2" : k.curve === "P-384" ? "H-3" : "H-4";
}

/** The EK public area a TPM creates from `template` for the key in `cert`. */
export function ekPublicFromCertificate(cert: Certificate, template: EkTemplateId | EkTemplate = defaultTemplateFor(cert)): BuiltEkPublic {
  const t = typeof template === "string" ? ekTemplate(template) : template;
  const k = canonicalKey(cert.spki);
  const p = t.public.parameters;
  let pub: TPMT_PUBLIC;
  if (k.alg === "rsa" && p.kind === "rsa") {
    if (k.bits !== p.keyBits) throw misfit(t, describeCanonicalKey(k));
    if (k.exponent !== 65537 && k.exponent !== p.exponent) throw misfit(t, describeCanonicalKey(k));
    pub = { ...t.public, unique: { kind: "rsa", n: leftPad(k.n, p.keyBits / 8) } };
  } else if (k.alg === "ecc" && p.kind === "ecc") {
    if (k.curveId !== p.curveID || !isCurve(p.curveID)) throw misfit(t, describeCanonicalKey(k));
    const size = CURVES[p.curveID].size;
    pub = { ...t.public, unique: { kind: "ecc", x: leftPad(k.x, size), y: leftPad(k.y, size) } };
  } else {
    throw misfit(t, describeCanonicalKey(k));
  }
  const bytes = encode(TPMT_PUBLIC, pub);
  return { template: t, public: pub, bytes, name: objectName(bytes) };
}

function misfit(t: EkTemplate, key: string): CertificateError {
  return new CertificateError("unsupported-key", `the certificate's ${key} key does not fit EK template ${t.id} (${t.key})`);
}

function leftPad(b: Uint8Array, size: number): Uint8Array {
  if (b.length >= size) return b;
  const out = new Uint8Array(size);
  out.set(b, size - b.length);
  return out;
}

export type KeyMatch = { ok: true; binding: string } | { ok: false; detail: string };

/** Does the EK public area hold the certificate's key? Compared as canonical SPKI (= EK binding). */
export function ekPublicMatchesCertificate(pub: TPMT_PUBLIC, cert: Certificate): KeyMatch {
  let fromPub: Uint8Array;
  try {
    fromPub = spkiFromTpmPublic(pub);
  } catch (e) {
    return { ok: false, detail: `EK public area: ${(e as Error).message}` };
  }
  let fromCert;
  try {
    fromCert = canonicalKey(cert.spki);
  } catch (e) {
    return { ok: false, detail: `EK certificate: ${(e as Error).message}` };
  }
  const a = ekBinding(fromPub);
  const b = ekBinding(fromCert.spki);
  return a === b ? { ok: true, binding: a } : { ok: false, detail: `EK public area key (binding ${a}) is not the certificate's ${describeCanonicalKey(fromCert)} key (binding ${b})` };
}
