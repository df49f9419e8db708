/**
 * An EK public area from a file: a TPM2B_PUBLIC/TPMT_PUBLIC (`tpm2_createek -u`), or an EK certificate
 * (PEM, DER, NV-padded, TCG-wrapped) whose key is placed into the EK template it fits, so the EK's nameAlg and
 * symmetric definition are known without the TPM (e.g. swtpm's P-384 EK: template H-3, SHA-384, AES-256).
 */
import { ParseError } from "@fleetd/verify/codec";
import { ekPublicFromCertificate, readCertificate } from "@fleetd/verify/ek";
import { CertificateError } from "@fleetd/verify/x509";
import { readPublicArea, type TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { CliUsageError, readInput } from "@fleetd/platform/cmd";

export function ekPublicFromFile(path: string): TPMT_PUBLIC {
  const bytes = readInput(path, "--ek-public");
  let asPublic: string;
  try {
    return readPublicArea(bytes).pub;
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
    asPublic = e.message;
  }
  try {
    return ekPublicFromCertificate(readCertificate(bytes).cert).public;
  } catch (e) {
    if (!(e instanceof CertificateError || e instanceof ParseError)) throw e;
    throw new CliUsageError(`--ek-public ${path} is neither a TPM2B_PUBLIC (${asPublic}) nor a usable EK certificate (${e.message})`);
  }
}
