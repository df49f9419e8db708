/** The attestation session modes (what a session may lead to; see the protocol). */
export const MODES = ["intake", "provision", "attest", "wipe"] as const;
export type Mode = (typeof MODES)[number];
