export * from "./deps.js";
export * from "./context.js";
export * from "./challenge.js";
export * from "./evidence.js";
export * from "./confirm.js";
export * from "./service.js";
