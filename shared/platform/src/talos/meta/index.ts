/** The `talos/meta` entry point of this package: everything its files export. */
export * from "./adv.js";
export * from "./disk.js";
export * from "./errors.js";
export * from "./gpt.js";
export * from "./gptStructures.js";
export * from "./meta.js";
export * from "./partition.js";
export * from "./writeMeta.js";
