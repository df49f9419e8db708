/**
 * MAC addresses as Tinkerbell needs them: lowercase, colon-separated. The Hardware CRD's pattern
 * `([0-9a-f]{2}[:]){5}([0-9a-f]{2})` is not anchored (a value with extra characters around a lowercase MAC
 * passes it), so fleetd checks the whole string itself.
 */
import { TinkerbellError } from "./errors.js";

export const CANONICAL_MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;

/** `AA-BB-CC-DD-EE-FF`, `aa:bb:…`, `AABB.CCDD.EEFF` (NetBox prints uppercase) → `aa:bb:cc:dd:ee:ff`. */
export function canonicalMac(input: string): string {
  const hex = input.trim().toLowerCase().replace(/[:.-]/g, "");
  if (!/^[0-9a-f]{12}$/.test(hex) || !/^[0-9a-fA-F]{2}([:.-]?[0-9a-fA-F]{2}){5}$|^[0-9a-fA-F]{4}(\.[0-9a-fA-F]{4}){2}$/.test(input.trim())) {
    throw new TinkerbellError("mac-not-canonical", `"${input}" is not a MAC address`);
  }
  return [0, 2, 4, 6, 8, 10].map((i) => hex.slice(i, i + 2)).join(":");
}

/** Refuses anything but the canonical form (builders take only what canonicalMac returned). */
export function requireCanonicalMac(mac: string, what: string): string {
  if (!CANONICAL_MAC.test(mac)) throw new TinkerbellError("mac-not-canonical", `${what}: "${mac}" is not a lowercase colon-separated MAC address (Tinkerbell matches MACs lowercase)`);
  return mac;
}
