/**
 * A manufacturer CA store (the certificates of a directory of PEM or DER files, read by the platform's trust/ekCaStore.ts), each file one certificate or a bundle of PEM
 * blocks (like tpm-ca-certificates' MIRROR.*.pem). Non-certificate PEM blocks (private keys next to a
 * local CA) are ignored; files that hold no usable certificate are listed in `skipped`, never fatal.
 * Duplicates (by SHA-256 fingerprint) are kept once.
 */
import { type Certificate, parseCertificate } from "../x509/certificate.js";
import { nameKey } from "../x509/names.js";
import { CERTIFICATE_LABELS, looksLikePem, pemBlocks } from "../x509/pem.js";

export interface StoreCertificate {
  cert: Certificate;
  /** Where it came from: "file" or "file#block". */
  source: string;
}

export interface CaStore {
  certs: StoreCertificate[];
  skipped: { source: string; reason: string }[];
  /** Certificates by normalised subject name (names.ts nameKey). */
  bySubject: Map<string, StoreCertificate[]>;
  byFingerprint: Map<string, StoreCertificate>;
}


export function caStoreFrom(entries: StoreCertificate[], skipped: CaStore["skipped"] = []): CaStore {
  const store: CaStore = { certs: [], skipped, bySubject: new Map(), byFingerprint: new Map() };
  for (const e of entries) {
    if (store.byFingerprint.has(e.cert.fingerprint)) continue;
    store.certs.push(e);
    store.byFingerprint.set(e.cert.fingerprint, e);
    const k = nameKey(e.cert.subject);
    const list = store.bySubject.get(k);
    if (list) list.push(e);
    else store.bySubject.set(k, [e]);
  }
  return store;
}

/** Certificates in one file's bytes; problems are appended to `skipped`. */
export function certificatesInFile(bytes: Uint8Array, name: string, skipped: CaStore["skipped"]): StoreCertificate[] {
  const out: StoreCertificate[] = [];
  if (looksLikePem(bytes)) {
    let blocks;
    try {
      blocks = pemBlocks(Buffer.from(bytes).toString("latin1"));
    } catch (e) {
      skipped.push({ source: name, reason: (e as Error).message });
      return out;
    }
    const certBlocks = blocks.filter((b) => CERTIFICATE_LABELS.has(b.label));
    if (certBlocks.length === 0) skipped.push({ source: name, reason: "no CERTIFICATE block" });
    for (const b of certBlocks) {
      const source = blocks.length > 1 ? `${name}#${b.index}` : name;
      try {
        out.push({ cert: parseCertificate(b.der), source });
      } catch (e) {
        skipped.push({ source, reason: (e as Error).message });
      }
    }
    return out;
  }
  try {
    out.push({ cert: parseCertificate(bytes), source: name });
  } catch (e) {
    skipped.push({ source: name, reason: `not a PEM or DER certificate: ${(e as Error).message}` });
  }
  return out;
}
