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
export { type CaStore, type StoreCertificate, caStoreFrom, certificatesInFile } from "./store.js";
export {
  type ChainOptions,
  type ChainVerdict,
  type ChainLink,
  type ChainReason,
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
export * from "./der.js";
export * from "./binding.js";
export * from "./certificate.js";
export * from "./certificateInput.js";
export * from "./chain.js";
export * from "./ekPublic.js";
export * from "./ekPublicInput.js";
export * from "./errors.js";
export * from "./extensions.js";
export * from "./names.js";
export * from "./oids.js";
export * from "./pem.js";
export * from "./signature.js";
export * from "./spki.js";
export * from "./store.js";
export * from "./templateCheck.js";
export * from "./templates.js";
export * from "./tpmInfo.js";
export * from "./verifyEkCertificate.js";
