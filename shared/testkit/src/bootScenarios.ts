/**
 * Measured-boot scenarios for tests: a good boot per profile (hookos, talos, ubuntu) and the refusals the
 * policy must produce, built with the log writer so that the same extends can be sent to a real TPM (swtpm).
 *
 * Lab keys are made at test time. The `ubuntu` boot needs the real Microsoft UEFI CA 2011 and Canonical
 * Master CA certificates (the profile identifies them by fingerprint): they are extracted from conformance
 * logs at run time, never stored in the repository.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { digest } from "@fleetd/verify/crypto";
import { EFI_ACTION, EV, GUID, interpretLog, parseEventLog, replayLog } from "@fleetd/verify/eventlog";
import { EventLogWriter, signatureDatabase, variableData } from "./eventlogWriter.js";
import { TPM_ALG, type HashAlgId } from "@fleetd/verify/tcg";
import { conformance } from "./conformance.js";
import { makeTestCa, type TestCert } from "./certs.js";

export interface LabKeys {
  pk: TestCert;
  kek: TestCert;
  labDb: TestCert;
  hookosSigner: TestCert;
  rogue: TestCert;
  /** Real certificates taken from conformance logs. */
  microsoftUefiCa2011: Uint8Array;
  canonicalMasterCa: Uint8Array;
}

/** A certificate as logged in a conformance log: from an EV_EFI_VARIABLE_AUTHORITY event (or db list). */
export function certificateFromLog(rel: string, commonName: string): Uint8Array {
  const log = parseEventLog(new Uint8Array(readFileSync(conformance(rel))));
  const sb = interpretLog(log, new Set(replayLog(log).extended.keys())).secureBoot;
  const all = [...(sb?.db?.certs ?? []), ...(sb?.postSeparatorAuthorities ?? []).flatMap((a) => (a.cert ? [a.cert] : []))];
  const c = all.find((x) => x.commonName === commonName);
  if (!c) throw new Error(`${rel} holds no certificate "${commonName}"`);
  return c.der;
}

export async function makeLabKeys(): Promise<LabKeys> {
  return {
    pk: await makeTestCa("fleetd lab PK"),
    kek: await makeTestCa("fleetd lab KEK"),
    labDb: await makeTestCa("fleetd lab Secure Boot signing"),
    hookosSigner: await makeTestCa("fleetd HookOS signer"),
    rogue: await makeTestCa("Rogue Secure Boot CA"),
    microsoftUefiCa2011: certificateFromLog("eventlogs/go-tpm-tools/rhel8-uefi.bin", "Microsoft Corporation UEFI CA 2011"),
    canonicalMasterCa: certificateFromLog("eventlogs/go-attestation/sb_cert_eventlog.bin", "Canonical Ltd. Master Certificate Authority"),
  };
}

/** The site authority directory the profiles read: lab-pk.pem, lab-kek.pem, lab-db.pem, hookos-signer.pem. */
export function writeSiteAuthorities(dir: string, keys: LabKeys): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "lab-pk.pem"), keys.pk.pem);
  writeFileSync(join(dir, "lab-kek.pem"), keys.kek.pem);
  writeFileSync(join(dir, "lab-db.pem"), keys.labDb.pem);
  writeFileSync(join(dir, "hookos-signer.pem"), keys.hookosSigner.pem);
  return dir;
}

export type ScenarioProfile = "hookos" | "talos" | "ubuntu";

export interface ScenarioOptions {
  format?: "crypto-agile" | "sha1";
  banks?: HashAlgId[];
  secureBoot?: 0 | 1;
  /** Replace the certificate that verifies the first image after the separator. */
  imageAuthority?: Uint8Array;
  /** Log "UEFI Debug Mode" in PCR 7. */
  debugMode?: boolean;
  /** Log "DMA Protection Disabled" in PCR 7. */
  dmaProtectionDisabled?: boolean;
  /** The first post-separator authority event carries a rogue certificate while its digest covers the real one. */
  tamperAuthority?: boolean;
  /** Extend PCR 4 once more without logging it. */
  unloggedExtend?: boolean;
  /** Log the PCR 7 separator as an EV_EFI_ACTION (same digest, so it still replays). */
  disguiseSeparator?: boolean;
}

const owner = "77fa9abd-0359-4d32-bd60-28f4e78f784b"; // Microsoft's owner GUID, as real db entries carry
const image = (name: string) => digest(TPM_ALG.SHA256, new Uint8Array(Buffer.from(`fleetd test image ${name}`)));

/** Build the log (and the extends) of one boot. */
export function bootScenario(profile: ScenarioProfile, keys: LabKeys, o: ScenarioOptions = {}): EventLogWriter {
  const w = new EventLogWriter(o.format ?? "crypto-agile", o.banks ?? [TPM_ALG.SHA1, TPM_ALG.SHA256]);
  const dbCerts = profile === "ubuntu" ? [keys.microsoftUefiCa2011] : [keys.hookosSigner.der, keys.labDb.der, keys.microsoftUefiCa2011];
  const dbx = Array.from({ length: 80 }, (_, i) => digest(TPM_ALG.SHA256, new Uint8Array([i, 0xdb, 0x78])));

  w.add(0, EV.S_CRTM_VERSION, new Uint8Array(Buffer.from("fleetd test firmware 1.0\0", "utf16le")));
  w.add(0, EV.EFI_PLATFORM_FIRMWARE_BLOB, new Uint8Array(16), { hashOf: image("firmware volume") });
  w.secureBootVariables({
    secureBoot: o.secureBoot ?? 1,
    pk: signatureDatabase(owner, [profile === "ubuntu" ? keys.rogue.der : keys.pk.der]),
    kek: signatureDatabase(owner, [keys.kek.der]),
    db: signatureDatabase(owner, dbCerts),
    dbx: signatureDatabase(owner, [], dbx),
  });
  if (o.debugMode) w.efiAction(7, EFI_ACTION.UEFI_DEBUG_MODE);
  if (o.dmaProtectionDisabled) w.efiAction(7, EFI_ACTION.DMA_PROTECTION_DISABLED);
  if (o.disguiseSeparator) w.add(7, EV.EFI_ACTION, new Uint8Array(4), { hashOf: new Uint8Array(4) });
  else w.separator(7);
  w.variable(1, EV.EFI_VARIABLE_BOOT, GUID.EFI_GLOBAL_VARIABLE, "BootOrder", new Uint8Array([0, 0]));
  w.variable(1, EV.EFI_VARIABLE_BOOT, GUID.EFI_GLOBAL_VARIABLE, "Boot0000", new Uint8Array(Buffer.from("fleetd test boot entry")));
  w.efiAction(4, EFI_ACTION.CALLING_EFI_APPLICATION);
  w.separators([0, 1, 2, 3, 4, 5, 6]);

  const first = o.imageAuthority ?? (profile === "hookos" ? keys.hookosSigner.der : profile === "talos" ? keys.labDb.der : keys.microsoftUefiCa2011);
  if (o.tamperAuthority) {
    const honest = variableData(GUID.EFI_IMAGE_SECURITY_DATABASE, "db", Buffer.concat([Buffer.from(guidBytes(owner)), first]));
    w.dbAuthority(owner, keys.rogue.der, { hashOf: honest });
  } else {
    w.dbAuthority(owner, first);
  }
  if (profile === "hookos") {
    w.bootApplication("\\EFI\\BOOT\\BOOTX64.EFI", image("hookos uki"));
  } else if (profile === "talos") {
    w.bootApplication("\\EFI\\BOOT\\BOOTX64.EFI", image("systemd-boot"));
    w.bootApplication("\\EFI\\Linux\\Talos-v1.9.efi", image("talos uki"));
    for (const section of [".linux", ".osrel", ".cmdline", ".initrd"]) w.add(11, EV.IPL, new Uint8Array(Buffer.from(section + "\0")), { hashOf: image(section) });
    for (const phase of ["enter-initrd", "leave-initrd", "enter-machined"]) w.add(11, EV.IPL, new Uint8Array(Buffer.from(phase)));
  } else {
    w.bootApplication("\\EFI\\BOOT\\BOOTX64.EFI", image("shimx64"));
    w.sbatLevel("sbat,1,2023012900\nshim,2\ngrub,3\ngrub.debian,4\n");
    w.shimAuthority(keys.canonicalMasterCa);
    w.bootApplication("\\EFI\\ubuntu\\grubx64.efi", image("grubx64"));
    w.add(8, EV.IPL, new Uint8Array(Buffer.from("grub_cmd: linux /vmlinuz root=/dev/sda1\0")));
    w.add(9, EV.IPL, new Uint8Array(Buffer.from("/vmlinuz\0")), { hashOf: image("vmlinuz") });
    w.bootApplication("\\vmlinuz", image("vmlinuz"));
  }
  if (o.unloggedExtend) w.add(4, EV.EFI_BOOT_SERVICES_APPLICATION, new Uint8Array(), { hashOf: image("hidden"), logged: false });
  w.efiAction(5, EFI_ACTION.EXIT_BOOT_SERVICES_INVOCATION);
  w.efiAction(5, EFI_ACTION.EXIT_BOOT_SERVICES_SUCCESS);
  return w;
}

function guidBytes(g: string): Uint8Array {
  // Same layout as guid.ts guidFromString; kept local so the tampered bytes are built independently.
  const h = g.replace(/-/g, "");
  const b = Buffer.from(h, "hex");
  return new Uint8Array([b[3]!, b[2]!, b[1]!, b[0]!, b[5]!, b[4]!, b[7]!, b[6]!, ...b.subarray(8)]);
}

/** The refusals the issue lists, each with the check code that must appear among the verdict's reasons. */
export const REFUSALS: readonly { name: string; profile: ScenarioProfile; options: ScenarioOptions; check: string }[] = [
  { name: "Secure Boot off", profile: "hookos", options: { secureBoot: 0 }, check: "secure-boot" },
  { name: "image verified by the lab's Talos key is not HookOS", profile: "hookos", options: { imageAuthority: new Uint8Array() }, check: "authority" },
  { name: "image verified by a rogue CA", profile: "ubuntu", options: { imageAuthority: new Uint8Array() }, check: "authority" },
  { name: "tampered authority event (digest ≠ data)", profile: "talos", options: { tamperAuthority: true }, check: "event-digest" },
  { name: "log does not replay to the quoted PCRs", profile: "talos", options: { unloggedExtend: true }, check: "pcr-replay" },
  { name: "disguised separator", profile: "hookos", options: { disguiseSeparator: true }, check: "separator-disguised" },
  { name: "UEFI Debug Mode", profile: "ubuntu", options: { debugMode: true }, check: "uefi-debug-mode" },
  { name: "SHA-1-only evidence", profile: "talos", options: { format: "sha1" }, check: "bank" },
];

/** Fill in the certificates of REFUSALS entries that need the generated keys. */
export function refusalOptions(r: (typeof REFUSALS)[number], keys: LabKeys): ScenarioOptions {
  if (r.options.imageAuthority) return { ...r.options, imageAuthority: r.profile === "hookos" ? keys.labDb.der : keys.rogue.der };
  return r.options;
}
