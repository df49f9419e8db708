export * from "./client.js";
export * from "./command.js";
export * from "./detect.js";
export * from "./identity.js";
export * from "./rc.js";
