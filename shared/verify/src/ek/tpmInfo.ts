/**
 * The TPM described by an EK certificate (TCG EK Credential Profile §3.2.9): manufacturer, model and
 * firmware version as attributes 2.23.133.2.1/2/3 of a directoryName in the (critical) subjectAltName —
 * or, in older certificates, in the subject.
 */
import type { Certificate } from "../x509/certificate.js";
import { type Name, nameValues } from "../x509/names.js";
import { OID } from "../x509/oids.js";

export interface TpmInfo {
  /** As written, e.g. "id:53544D20". */
  manufacturer?: string;
  /** The vendor ID decoded as ASCII when printable, e.g. "STM". */
  manufacturerId?: string;
  model?: string;
  version?: string;
  /** Where the attributes were found. */
  source?: "subjectAltName" | "subject";
}

export function tpmInfoFromCertificate(cert: Certificate): TpmInfo {
  for (const gn of cert.ext.subjectAltName ?? []) {
    if (gn.kind === "directoryName") {
      const info = fromName(gn.name);
      if (info) return { ...info, source: "subjectAltName" };
    }
  }
  const info = fromName(cert.subject);
  return info ? { ...info, source: "subject" } : {};
}

function fromName(n: Name): TpmInfo | undefined {
  const [manufacturer] = nameValues(n, OID.tpmManufacturer);
  const [model] = nameValues(n, OID.tpmModel);
  const [version] = nameValues(n, OID.tpmVersion);
  if (manufacturer === undefined && model === undefined && version === undefined) return undefined;
  const info: TpmInfo = {};
  if (manufacturer !== undefined) {
    info.manufacturer = manufacturer;
    const id = vendorAscii(manufacturer);
    if (id !== undefined) info.manufacturerId = id;
  }
  if (model !== undefined) info.model = model;
  if (version !== undefined) info.version = version;
  return info;
}

/** "id:53544D20" → "STM" (TPM_PT_MANUFACTURER is four ASCII characters, space/NUL padded). */
function vendorAscii(s: string): string | undefined {
  const m = /^id:([0-9a-fA-F]{8})$/.exec(s.trim());
  if (!m || !m[1]) return undefined;
  const text = Buffer.from(m[1], "hex").toString("latin1").replace(/[\0 ]+$/, "");
  return /^[\x20-\x7e]+$/.test(text) ? text : undefined;
}
