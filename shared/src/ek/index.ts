/** EK identity: certificates as TPMs ship them, chains to manufacturer CAs, EK binding, EK templates. */
export { CertificateError, type CertificateErrorCode } from "./errors.js";
export { pemBlocks, toPem, type PemBlock } from "./pem.js";
export { OID as X509_OID } from "./oids.js";
export { type Name as X509Name, type NameAttribute as X509NameAttribute, formatName } from "./names.js";
export {
  type Extension,
  type ParsedExtensions,
  type BasicConstraints,
  type GeneralName,
  type KeyUsage,
  UNDERSTOOD_EXTENSIONS,
} from "./extensions.js";
export {
  type Certificate,
  type AlgorithmIdentifier,
  type SubjectPublicKeyInfo,
  parseCertificate,
  parseSubjectPublicKeyInfo,
  serialHex,
} from "./certificate.js";
export { type CertificateInput, type CertificateForm, readCertificate } from "./certificateInput.js";
export { type CanonicalKey, canonicalKey, describeCanonicalKey, keyObjectFromCanonical } from "./spki.js";
export { ekBinding, ekBindingFromCertificate, ekBindingFromSpki, ekBindingFromTpmPublic } from "./binding.js";
export { type EkPublicInput, readEkPublic } from "./ekPublicInput.js";
export { type SignatureScheme, type SignatureCheck, signatureScheme, verifyCertificateSignature } from "./signature.js";
export { type CaStore, type StoreCertificate, loadCaStore, caStoreFrom, certificatesInFile } from "./store.js";
export {
  type ChainOptions,
  type ChainVerdict,
  type ChainLink,
  type Reason as EkReason,
  verifyCertificateChain,
  describeCertificate,
  isSelfIssued,
} from "./chain.js";
export { type TpmInfo, tpmInfoFromCertificate } from "./tpmInfo.js";
export { type EkCertificateVerdict, verifyEkCertificate, ekLeafChecks } from "./verifyEkCertificate.js";
export {
  type EkTemplate,
  type EkTemplateId,
  EK_TEMPLATES,
  POLICY_C,
  ekTemplate,
  ekTemplateForNvIndex,
  policyA,
  policyB,
} from "./templates.js";
export { type TemplateComparison, compareToTemplate, identifyEkTemplate, templateDifferences } from "./templateCheck.js";
export {
  type BuiltEkPublic,
  type KeyMatch,
  defaultTemplateFor,
  ekPublicFromCertificate,
  ekPublicMatchesCertificate,
} from "./ekPublic.js";
