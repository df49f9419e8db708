/**
 * TCG event types (TCG PC Client Platform Firmware Profile, §10.4.1 "Event Types"; names as in the spec,
 * values cross-checked with google/go-attestation attest/internal/events.go and google/go-eventlog tcg/events.go).
 */
export const EV = {
  PREBOOT_CERT: 0x00000000,
  POST_CODE: 0x00000001,
  UNUSED: 0x00000002,
  NO_ACTION: 0x00000003,
  SEPARATOR: 0x00000004,
  ACTION: 0x00000005,
  EVENT_TAG: 0x00000006,
  S_CRTM_CONTENTS: 0x00000007,
  S_CRTM_VERSION: 0x00000008,
  CPU_MICROCODE: 0x00000009,
  PLATFORM_CONFIG_FLAGS: 0x0000000a,
  TABLE_OF_DEVICES: 0x0000000b,
  COMPACT_HASH: 0x0000000c,
  IPL: 0x0000000d,
  IPL_PARTITION_DATA: 0x0000000e,
  NONHOST_CODE: 0x0000000f,
  NONHOST_CONFIG: 0x00000010,
  NONHOST_INFO: 0x00000011,
  OMIT_BOOT_DEVICE_EVENTS: 0x00000012,
  POST_CODE2: 0x00000013,
  EFI_EVENT_BASE: 0x80000000,
  EFI_VARIABLE_DRIVER_CONFIG: 0x80000001,
  EFI_VARIABLE_BOOT: 0x80000002,
  EFI_BOOT_SERVICES_APPLICATION: 0x80000003,
  EFI_BOOT_SERVICES_DRIVER: 0x80000004,
  EFI_RUNTIME_SERVICES_DRIVER: 0x80000005,
  EFI_GPT_EVENT: 0x80000006,
  EFI_ACTION: 0x80000007,
  EFI_PLATFORM_FIRMWARE_BLOB: 0x80000008,
  EFI_HANDOFF_TABLES: 0x80000009,
  EFI_PLATFORM_FIRMWARE_BLOB2: 0x8000000a,
  EFI_HANDOFF_TABLES2: 0x8000000b,
  EFI_VARIABLE_BOOT2: 0x8000000c,
  EFI_GPT_EVENT2: 0x8000000d,
  EFI_HCRTM_EVENT: 0x80000010,
  EFI_VARIABLE_AUTHORITY: 0x800000e0,
  EFI_SPDM_FIRMWARE_BLOB: 0x800000e1,
  EFI_SPDM_FIRMWARE_CONFIG: 0x800000e2,
  EFI_SPDM_DEVICE_POLICY: 0x800000e3,
  EFI_SPDM_DEVICE_AUTHORITY: 0x800000e4,
} as const;
export type EventTypeName = keyof typeof EV;

const NAMES = new Map<number, string>(Object.entries(EV).map(([k, v]) => [v, `EV_${k}`]));

/** Whether the type value is one the spec defines (unknown types are refused in enforced PCRs). */
export function isKnownEventType(type: number): boolean {
  return NAMES.has(type) && type !== EV.EFI_EVENT_BASE;
}

/** `EV_EFI_ACTION`, or `EV_UNKNOWN_0x1234abcd` for a value the spec does not define. */
export function eventTypeName(type: number): string {
  return NAMES.get(type) ?? `EV_UNKNOWN_0x${type.toString(16).padStart(8, "0")}`;
}

/** Well-known EV_EFI_ACTION / EV_ACTION strings (PFP §10.4.4 and §9.4.4). */
export const EFI_ACTION = {
  CALLING_EFI_APPLICATION: "Calling EFI Application from Boot Option",
  RETURNING_FROM_EFI_APPLICATION: "Returning from EFI Application from Boot Option",
  EXIT_BOOT_SERVICES_INVOCATION: "Exit Boot Services Invocation",
  EXIT_BOOT_SERVICES_SUCCESS: "Exit Boot Services Returned with Success",
  EXIT_BOOT_SERVICES_FAILURE: "Exit Boot Services Returned with Failure",
  UEFI_DEBUG_MODE: "UEFI Debug Mode",
  DMA_PROTECTION_DISABLED: "DMA Protection Disabled",
} as const;
