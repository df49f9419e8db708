/** The `crypto` entry point of this package: everything its files export. */
export * from "./crc32.js";
export * from "./hash.js";
export * from "./kdf.js";
export * from "./oaep.js";
export * from "./seal.js";
