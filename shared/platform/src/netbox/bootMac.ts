/**
 * The node's boot MAC as TPM evidence proved it: the device's `boot_mac` custom field, which the attestation
 * server writes after a passing attestation (the MAC of the interface the measured HookOS booted from, bound by
 * the quote). It is accepted only when NetBox's change log shows the attestation account wrote exactly the
 * current value: a NetBox user who edits it (or the interface's primary MAC, which is only for display) cannot
 * point a Workflow — a wipe above all — at another machine. Lowercase aa:bb:cc:dd:ee:ff.
 */
import { checkAttribution } from "./changelog.js";
import type { NetBox } from "./client.js";
import { readDevice, type DeviceRecord } from "./device.js";

export type ProvenMac = { ok: true; mac: string } | { ok: false; code: "boot-mac-unproven"; reason: string };

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
export const BOOT_MAC_FIELD = "boot_mac";

/** The proven boot MAC of `device` (as read now), or why there is none. */
export async function provenBootMacOf(nb: NetBox, device: DeviceRecord, attestationAccount: string): Promise<ProvenMac> {
  const v = device.cf[BOOT_MAC_FIELD];
  if (v === null || v === undefined || v === "") {
    return { ok: false, code: "boot-mac-unproven", reason: "no boot MAC proven by TPM evidence yet (the machine has not passed an attestation)" };
  }
  if (typeof v !== "string" || !MAC.test(v)) return { ok: false, code: "boot-mac-unproven", reason: "the boot_mac field does not hold a lowercase MAC address" };
  const path = `custom_fields.${BOOT_MAC_FIELD}`;
  const a = (await checkAttribution(nb, device.id, [{ path, current: v, account: attestationAccount, code: "boot-mac-unproven", label: "boot MAC" }])).get(path);
  if (!a?.ok) return { ok: false, code: "boot-mac-unproven", reason: a ? a.reason : "boot MAC not checked" };
  return { ok: true, mac: v };
}

/** The same for a device id (read fresh). */
export async function provenBootMac(nb: NetBox, deviceId: number, attestationAccount: string): Promise<ProvenMac> {
  return provenBootMacOf(nb, (await readDevice(nb, deviceId)).device, attestationAccount);
}
