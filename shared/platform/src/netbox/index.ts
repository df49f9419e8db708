/** The `netbox` entry point of this package: everything its files export. */
export * from "./attestationInventory.js";
export * from "./bootMac.js";
export * from "./changelog.js";
export * from "./client.js";
export * from "./decide.js";
export * from "./device.js";
export * from "./fields.js";
export * from "./journal.js";
export * from "./outboxDelivery.js";
export * from "./platformFields.js";
export * from "./schema.js";
export * from "./setup.js";
export * from "./sync.js";
export * from "./webhook.js";
