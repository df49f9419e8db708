/** Object identifiers used by EK certificates and their chains (RFC 5280, RFC 4055, RFC 5758, TCG EK Credential Profile). */
export const OID = {
  // Public key algorithms
  rsaEncryption: "1.2.840.113549.1.1.1",
  rsaesOaep: "1.2.840.113549.1.1.7", // id-RSAES-OAEP: how many TPM vendors label an RSA EK
  rsassaPss: "1.2.840.113549.1.1.10", // id-RSASSA-PSS: key label and signature algorithm
  ecPublicKey: "1.2.840.10045.2.1",
  // Signature algorithms
  sha1WithRSAEncryption: "1.2.840.113549.1.1.5",
  sha224WithRSAEncryption: "1.2.840.113549.1.1.14",
  sha256WithRSAEncryption: "1.2.840.113549.1.1.11",
  sha384WithRSAEncryption: "1.2.840.113549.1.1.12",
  sha512WithRSAEncryption: "1.2.840.113549.1.1.13",
  ecdsaWithSHA1: "1.2.840.10045.4.1",
  ecdsaWithSHA224: "1.2.840.10045.4.3.1",
  ecdsaWithSHA256: "1.2.840.10045.4.3.2",
  ecdsaWithSHA384: "1.2.840.10045.4.3.3",
  ecdsaWithSHA512: "1.2.840.10045.4.3.4",
  mgf1: "1.2.840.113549.1.1.8",
  // Hashes
  sha1: "1.3.14.3.2.26",
  sha224: "2.16.840.1.101.3.4.2.4",
  sha256: "2.16.840.1.101.3.4.2.1",
  sha384: "2.16.840.1.101.3.4.2.2",
  sha512: "2.16.840.1.101.3.4.2.3",
  // Extensions
  subjectDirectoryAttributes: "2.5.29.9",
  subjectKeyIdentifier: "2.5.29.14",
  keyUsage: "2.5.29.15",
  subjectAltName: "2.5.29.17",
  issuerAltName: "2.5.29.18",
  basicConstraints: "2.5.29.19",
  certificatePolicies: "2.5.29.32",
  authorityKeyIdentifier: "2.5.29.35",
  extKeyUsage: "2.5.29.37",
  // TCG (EK Credential Profile §3)
  tpmManufacturer: "2.23.133.2.1",
  tpmModel: "2.23.133.2.2",
  tpmVersion: "2.23.133.2.3",
  tcgKpEkCertificate: "2.23.133.8.1",
  anyExtendedKeyUsage: "2.5.29.37.0",
} as const;

/** Short names for attribute types in distinguished names (RFC 4514 plus the TCG TPM attributes). */
export const NAME_ATTRIBUTES: Record<string, string> = {
  "2.5.4.3": "CN",
  "2.5.4.5": "serialNumber",
  "2.5.4.6": "C",
  "2.5.4.7": "L",
  "2.5.4.8": "ST",
  "2.5.4.10": "O",
  "2.5.4.11": "OU",
  "0.9.2342.19200300.100.1.25": "DC",
  "1.2.840.113549.1.9.1": "emailAddress",
  [OID.tpmManufacturer]: "TPMManufacturer",
  [OID.tpmModel]: "TPMModel",
  [OID.tpmVersion]: "TPMVersion",
};
