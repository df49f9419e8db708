/** The `fleet` entry point of this package: everything its files export. */
export * from "./ipv4.js";
export * from "./modes.js";
export * from "./nodesFile.js";
export * from "./ports.js";
export * from "./siteConfig.js";
export * from "./tinkerbellSiteConfig.js";
export * from "./ownership.js";
