/**
 * EK identity: certificates as TPMs ship them (NV padding, the TCG wrapper, PEM bundles), chains to manufacturer
 * CAs, EK binding, EK templates. Certificates themselves are read by `../x509` (`@fleetd/verify/x509`).
 */
export * from "./binding.js";
export * from "./certificateInput.js";
export * from "./chain.js";
export * from "./ekPublic.js";
export * from "./ekPublicInput.js";
export * from "./store.js";
export * from "./templateCheck.js";
export * from "./templates.js";
export * from "./tpmInfo.js";
export * from "./verifyEkCertificate.js";
