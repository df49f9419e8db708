/** What the `fleetd` command's modules offer to tests and embedders (the command itself is main.ts). */
export { listPending, type PendingRow, renderPending, type StateSource, stateSource } from "./pending.js";
export { csrGateManifest } from "./kubeSetup.js";
