/**
 * X.509: the one place certificates, certification requests (PKCS#10) and PEM are read and written.
 * Reading uses the exact-bytes DER reader (signatures cover the received bytes); building uses
 * @peculiar/asn1-x509.
 */
export * from "./der.js";
export * from "./errors.js";
export * from "./oids.js";
export * from "./names.js";
export * from "./extensions.js";
export * from "./certificate.js";
export * from "./csr.js";
export * from "./pem.js";
export * from "./spki.js";
export * from "./signature.js";
export * from "./issued.js";
export * from "./hostname.js";
export * from "./build.js";
