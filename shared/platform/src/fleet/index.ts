/**
 * The `fleet` entry point of this package: everything its files export. `fleet/` is the domain core: `Node`
 * (node.ts) is fleetd's one model of a node — the inventory port returns it, the protocol engine, admission and
 * the Tinkerbell effects take it (or a `Pick` of it). The wire schemas stay at the adapters' edges, each with one
 * conversion: nodes file `NodeEntry` → NetBox (inventory/netboxView.ts `deviceFieldsFromEntry`), NetBox
 * `DeviceRecord` → `Node` (netbox/attestationInventory.ts `nodeFromDevice`), nodes file → `PlatformNode`
 * (node.ts `platformNodeFromEntry`); Tinkerbell checks a node once (tinkerbell/node.ts `checkNode`). This folder
 * imports no adapter.
 */
export * from "./codedError.js";
export * from "./ipv4.js";
export * from "./modes.js";
export * from "./node.js";
export * from "./nodesFile.js";
export * from "./ports.js";
export * from "./journalOnlyAdmission.js";
export * from "./siteConfig.js";
export * from "./tinkerbellSiteConfig.js";
export * from "./ownership.js";
