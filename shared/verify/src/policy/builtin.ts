/**
 * Built-in Secure Boot authorities (for the `ubuntu` profile): identified by the SHA-256 fingerprint of the
 * DER certificate, with subject CN and issuer CN as a cross-check. We hold no copy of the certificates: each
 * fingerprint was computed from a certificate that a real event log in shared/conformance/eventlogs carries
 * (cited below), and the conformance tests extract the certificate from that log again and compare.
 */
export interface BuiltinCertificate {
  commonName: string;
  issuerCommonName: string;
  sha256: string;
  /** Where the certificate is found: conformance log, event index, variable. */
  citedFrom: string;
}

export const BUILTIN_AUTHORITIES: Readonly<Record<string, readonly BuiltinCertificate[]>> = {
  /** Signs third-party UEFI images, among them every shim. */
  "microsoft-uefi-ca-2011": [
    {
      commonName: "Microsoft Corporation UEFI CA 2011",
      issuerCommonName: "Microsoft Corporation Third Party Marketplace Root",
      sha256: "48e99b991f57fc52f76149599bff0a58c47154229b9f8d603ac40d3500248507",
      citedFrom: "go-tpm-tools/rhel8-uefi.bin event 6 (db) and event 21 (EV_EFI_VARIABLE_AUTHORITY); in db of 20+ conformance logs",
    },
  ],
  /** Successor of the 2011 CA for third-party UEFI images. */
  "microsoft-uefi-ca-2023": [
    {
      commonName: "Microsoft UEFI CA 2023",
      issuerCommonName: "Microsoft RSA Devices Root CA 2021",
      sha256: "f6124e34125bee3fe6d79a574eaa7b91c0e7bd9d929c1a321178efd611dad901",
      citedFrom: "keylime/binary_bios_measurements-secureboot.bin event 7 (db)",
    },
  ],
  /** The CA in Ubuntu's shim that signs grub and kernels (shim logs it as a bare certificate, variable "Shim"). */
  "canonical-master-ca": [
    {
      commonName: "Canonical Ltd. Master Certificate Authority",
      issuerCommonName: "Canonical Ltd. Master Certificate Authority",
      sha256: "ed1fe72cb9ca31c9af5b757afcd733323d675825032e6ced7fe1ae9eb767998c",
      citedFrom: "go-attestation/sb_cert_eventlog.bin events 12 and 14; tpm2-tools/event-postcode.bin event 40 (Shim authority)",
    },
  ],
  /** Microsoft's KEKs (for profiles that constrain KEK on vendor-keyed machines). */
  "microsoft-kek-ca-2011": [
    {
      commonName: "Microsoft Corporation KEK CA 2011",
      issuerCommonName: "Microsoft Corporation Third Party Marketplace Root",
      sha256: "a1117f516a32cefcba3f2d1ace10a87972fd6bbe8fe0d0b996e09e65d802a503",
      citedFrom: "go-tpm-tools/rhel8-uefi.bin event 5 (KEK)",
    },
  ],
  "microsoft-kek-2k-ca-2023": [
    {
      commonName: "Microsoft Corporation KEK 2K CA 2023",
      issuerCommonName: "Microsoft RSA Devices Root CA 2021",
      sha256: "3cd3f0309edae228767a976dd40d9f4affc4fbd5218f2e8cc3c9dd97e8ac6f9d",
      citedFrom: "keylime/binary_bios_measurements-secureboot.bin event 6 (KEK)",
    },
  ],
  /** Signs Windows Boot Manager: listed so reports can name it; no shipped profile allows it. */
  "microsoft-windows-pca-2011": [
    {
      commonName: "Microsoft Windows Production PCA 2011",
      issuerCommonName: "Microsoft Root Certificate Authority 2010",
      sha256: "e8e95f0733a55e8bad7be0a1413ee23c51fcea64b3c8fa6a786935fddcc71961",
      citedFrom: "go-tpm-tools/rhel8-uefi.bin event 6 (db)",
    },
  ],
};
