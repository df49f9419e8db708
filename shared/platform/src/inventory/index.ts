/** The `inventory` entry point of this package: everything its files export. */
export * from "./apply.js";
export * from "./check.js";
export * from "./netboxView.js";
