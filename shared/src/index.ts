export * from "./codec/codec.js";
export * from "./tpm/constants.js";
export * from "./tpm/structures.js";
export * from "./tpm/commands.js";
export * from "./tpmclient/index.js";
