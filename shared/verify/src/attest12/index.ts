/** The `attest12` entry point of this package: everything its files export. */
export * from "./makeIdentityCredential.js";
export * from "./verifyIdentityBinding.js";
export * from "./verifyQuote12.js";
