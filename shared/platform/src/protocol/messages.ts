/**
 * The attestation protocol's messages (attestation-protocol.md "Messages"), as zod schemas: the trust
 * boundary between a machine and the server. Binary fields are base64; every size is bounded so an
 * oversized body is refused before any work is done.
 */
import type { Reason } from "@fleetd/verify/attest";
import { OUTAGE_REASONS, type OutageReason } from "../outage/outage.js";
import { z } from "zod";

/** A size as people say it: 64 bytes, 1 KiB, 1 MiB. */
const sizeName = (n: number) => (n >= 1024 * 1024 && n % (1024 * 1024) === 0 ? `${n / (1024 * 1024)} MiB` : n >= 1024 && n % 1024 === 0 ? `${n / 1024} KiB` : `${n} bytes`);

/**
 * A binary field a machine sends: standard base64 (RFC 4648 §4) of at most `max` bytes, at most
 * `ceil(max / 3) * 4 + 4` characters. Padding is optional (`={0,2}`): Node's decoder takes both, and this is
 * the rule the server enforces.
 */
const b64 = (max: number, what: string) =>
  z
    .string()
    .max(Math.ceil(max / 3) * 4 + 4, `${what} is larger than ${max} bytes`)
    .regex(/^[A-Za-z0-9+/]*={0,2}$/, `${what} is not base64`)
    .meta({ contentEncoding: "base64" })
    .transform((s) => new Uint8Array(Buffer.from(s, "base64")))
    .meta({ description: `base64 of at most ${sizeName(max)} (padding optional)` });

/** Base64 the server produces: canonical, padded, non-empty (Buffer.toString("base64") of a non-empty value). */
const b64Out = (description: string) =>
  z
    .string()
    .min(4)
    .regex(/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$/)
    .meta({ contentEncoding: "base64", description });

const hex32 = z.string().regex(/^[0-9a-f]{64}$/, "must be 32 bytes of lowercase hex");
const mac = z
  .string()
  .regex(/^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/, "must be a MAC address aa:bb:cc:dd:ee:ff")
  .transform((m) => m.toLowerCase());

import { MODES, type Mode } from "../fleet/modes.js";
export { MODES, type Mode };

/** The modes a session may be in (fleet/modes.ts). */
export const ModeSchema = z.enum(MODES);

/** What the machine says about itself. Claims, until TPM evidence vouches for them. */
export const Claims = z
  .object({
    serial: z.string().min(1).max(128),
    uuid: z
      .string()
      .regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/, "must be a UUID")
      .transform((u) => u.toLowerCase())
      .meta({ description: "SMBIOS UUID (compared case-insensitively, in both byte orders of the first three fields)." }),
    macs: z.array(mac).min(1).max(32),
    lldp: z
      .object({ chassisId: z.string().min(1).max(256), portId: z.string().min(1).max(256) })
      .strict()
      .nullable()
      .meta({ description: "LLDP as seen on the boot interface (host network namespace), or null when none was seen." }),
    mode: ModeSchema,
    workflow: z.string().min(1).max(253),
    /**
     * The MAC of the interface the machine booted from (the action's boot interface: configured, default
     * route, or first up), one of `macs`. Bound by the quote like every claim; recorded as the node's boot MAC
     * (NetBox `boot_mac`, Hardware, the Talos link selector) instead of whichever MAC sorts first.
     */
    bootMac: mac.optional().meta({ description: "The MAC of the interface the machine booted from, one of `macs` (recorded as the node's proven boot MAC)." }),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.bootMac !== undefined && !c.macs.includes(c.bootMac)) ctx.addIssue({ code: "custom", path: ["bootMac"], message: "must be one of macs" });
  })
  .meta({ description: "What the machine says about itself; `claimsHash` = SHA-256 of its canonical JSON. `bootMac`, when given, must be one of `macs` (the server checks it; JSON Schema cannot say it)." });
export type Claims = z.infer<typeof Claims>;

export const ChallengeRequest = z
  .object({
    claims: Claims,
    /** Every EK the TPM has: its TPM2B_PUBLIC and, where the TPM holds one, its certificate (DER). */
    eks: z
      .array(z.object({ public: b64(1024, "eks[].public"), certificate: b64(8192, "eks[].certificate").optional() }).strict())
      .min(1)
      .max(8)
      .meta({ description: "Every EK the TPM has — its TPM2B_PUBLIC and, where the TPM holds one, its DER certificate." }),
    /** A fresh AK: TPM2B_PUBLIC. */
    akPublic: b64(1024, "akPublic").meta({ description: "TPM2B_PUBLIC of a fresh, restricted signing AK (base64, at most 1 KiB)." }),
  })
  .strict();
export type ChallengeRequest = z.infer<typeof ChallengeRequest>;

/** A session ID the server made: 16 random bytes, lowercase hex. */
const SessionIdOut = z.string().regex(/^[0-9a-f]{32}$/);
/** 32 random bytes, base64 (always 43 characters and one `=`). */
const NonceOut = z
  .string()
  .regex(/^[A-Za-z0-9+/]{43}=$/)
  .meta({ contentEncoding: "base64", description: "32 random bytes, single use." });
const ExpiresAt = z.iso.datetime();

export const ChallengeResponse = z.strictObject({
  sessionId: SessionIdOut,
  nonce: NonceOut,
  expiresAt: ExpiresAt,
  /** One credential per approved EK, in the node's order; each for Name(AK) with its own secret. */
  credentials: z
    .array(z.strictObject({ ekBinding: hex32, idObject: b64Out("TPM2B_ID_OBJECT of MakeCredential."), encryptedSecret: b64Out("TPM2B_ENCRYPTED_SECRET of MakeCredential.") }))
    .min(1)
    .max(8)
    .meta({ description: "One credential per approved EK, in the node's order; each for Name(AK) with its own 32-byte secret." }),
});
export type ChallengeResponse = z.infer<typeof ChallengeResponse>;

export const CertifiedKey = z
  .object({
    /** TPMT_PUBLIC of the key (exactly as the TPM returned it). */
    public: b64(1024, "public").meta({ description: "TPMT_PUBLIC of the key, exactly as the TPM returned it (base64, at most 1 KiB)." }),
    /** TPM2B_PRIVATE payload (sealed to the SRK; useless outside this TPM), seeded into the Talos config. */
    private: b64(4096, "private").meta({ description: "TPM2B_PRIVATE payload (sealed to the SRK), seeded into the Talos config (base64, at most 4 KiB)." }),
    /** TPMS_ATTEST of TPM2_Certify by the AK over this key. */
    certifyInfo: b64(1024, "certifyInfo").meta({ description: "TPMS_ATTEST of TPM2_Certify by the AK over this key (base64, at most 1 KiB)." }),
    signature: b64(1024, "signature").meta({ description: "TPMT_SIGNATURE of the certify (base64, at most 1 KiB)." }),
  })
  .strict();

/**
 * Each bank's digest size, in bytes. A PCR value is exactly its bank's size: the quote's pcrDigest covers only the
 * concatenation of the values, so a value of any other length would let the machine choose where one value ends
 * and the next begins (issue 10). verifyQuote checks the same again; this refuses such a body with a 400 before
 * any work is done (and so does odd-length hex, which cannot be bytes at all).
 */
export const PCR_BANK_SIZES = { sha1: 20, sha256: 32, sha384: 48, sha512: 64 } as const;
export type PcrBank = keyof typeof PCR_BANK_SIZES;

const pcrValueOf = <B extends PcrBank>(bank: B) =>
  z
    .object({
      bank: z.literal(bank),
      pcr: z.number().int().min(0).max(23),
      value: z
        .string()
        .regex(new RegExp(`^[0-9a-f]{${2 * PCR_BANK_SIZES[bank]}}$`), `a ${bank} PCR value is ${PCR_BANK_SIZES[bank]} bytes: exactly ${2 * PCR_BANK_SIZES[bank]} lowercase hex digits`),
    })
    .strict()
    .meta({ description: `A ${bank} PCR value (${PCR_BANK_SIZES[bank]} bytes).` });

/** One quoted PCR value: its bank, its index, and exactly that bank's digest size in lowercase hex. */
export const PcrValue = z.discriminatedUnion("bank", [pcrValueOf("sha1"), pcrValueOf("sha256"), pcrValueOf("sha384"), pcrValueOf("sha512")]);

export const Evidence = z
  .object({
    sessionId: z.string().min(1).max(128),
    /** ActivateCredential results, in the order of the challenge's credentials. */
    secrets: z
      .array(b64(64, "secrets[]"))
      .min(1)
      .max(8)
      .meta({ description: "ActivateCredential results, in the order of the challenge's credentials." }),
    quote: z
      .object({
        message: b64(1024, "quote.message").meta({ description: "TPMS_ATTEST of TPM2_Quote (base64, at most 1 KiB)." }),
        signature: b64(1024, "quote.signature").meta({ description: "TPMT_SIGNATURE of the quote (base64, at most 1 KiB)." }),
        pcrs: z
          .array(PcrValue)
          .min(1)
          .max(4 * 24)
          .meta({
            description:
              "One value per (bank, PCR), each exactly its bank's digest size in lowercase hex (sha1 20 bytes, sha256 32, sha384 48, sha512 64): pcrDigest covers only the concatenation, so the size is what ties a value to its PCR. A value given twice is refused (403 quote.pcrDuplicate).",
          }),
      })
      .strict(),
    /** The TCG event log (binary_bios_measurements), at most 1 MiB. */
    eventLog: b64(1024 * 1024, "eventLog").meta({ description: "The TCG event log (binary_bios_measurements), base64 of at most 1 MiB." }),
    ldevid: CertifiedKey,
    lak: CertifiedKey,
  })
  .strict();
export type Evidence = z.infer<typeof Evidence>;

/** The CA bundle: one or more PEM certificates. */
const PemBundle = z.string().regex(/^(-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----\r?\n)+$/);

/** A pass with a fresh LDevID/LAK pair for the keys certified in this session. */
export const EvidenceIssued = z.strictObject({
  verdict: z.literal("pass"),
  issued: z.literal("new"),
  ldevidCertificate: b64Out("DER X.509 LDevID certificate, subject `CN=<node>.g<generation>`, valid at most 30 days."),
  lakCertificate: b64Out("DER X.509 LAK certificate, subject `CN=<node>.g<generation>.lak`."),
  /** The CA bundle (PEM) the certificates chain to. */
  caBundle: PemBundle.meta({ description: "The CA bundle (PEM) the certificates chain to, as SPIRE's `devid_ca_path`." }),
});

/** A pass that releases nothing (and has no confirm). */
export const PassNone = z.strictObject({ verdict: z.literal("pass"), issued: z.literal("none") });

/**
 * A passing verdict. `issued` says whether certificates come with it: "new" (a fresh LDevID/LAK pair for the
 * keys certified in this session), "none" (wipe mode, a device being retired, or an attest whose LDevID is not
 * due for renewal). Without certificates there is no confirm.
 */
export const EvidenceResponse = z.discriminatedUnion("issued", [EvidenceIssued, PassNone]).meta({
  description:
    "A passing verdict. `issued: new` carries a fresh LDevID/LAK pair for the keys certified in this session (intake, provision, and attest when the LDevID is due for renewal); `issued: none` carries nothing — wipe mode, a `decommissioning`/`offline` device, or an attest whose LDevID is not due — and has no confirm.",
});
export type EvidenceResponse = z.infer<typeof EvidenceResponse>;

export const Confirm = z
  .object({
    sessionId: z.string().min(1).max(128),
    /** TPMT_SIGNATURE by the LDevID over confirmDigest(sessionId, H(LDevID cert), H(LAK cert)). */
    signature: b64(1024, "signature").meta({ description: "TPMT_SIGNATURE by the LDevID over the confirm digest (base64, at most 1 KiB)." }),
  })
  .strict();
export type Confirm = z.infer<typeof Confirm>;

/** provision: the install code wrapped to the first approved EK for Name(AK). */
export const WrappedInstallCode = z
  .strictObject({ idObject: b64Out("TPM2B_ID_OBJECT of MakeCredential."), encryptedSecret: b64Out("TPM2B_ENCRYPTED_SECRET of MakeCredential.") })
  .meta({
    description:
      "The install code (32 random bytes) wrapped by MakeCredential to the first approved EK for Name(AK): the machine recovers it with TPM2_ActivateCredential; the Talos code is the lowercase hex of the bytes.",
  });
export type WrappedInstallCode = z.infer<typeof WrappedInstallCode>;

/** The confirm's answer on the wire: `installCode` is present exactly when `mode` is `provision`. */
export const ConfirmResponseBody = z
  .discriminatedUnion("mode", [z.strictObject({ mode: z.literal("provision"), installCode: WrappedInstallCode }), z.strictObject({ mode: z.enum(MODES.filter((m) => m !== "provision") as ["intake", "attest", "wipe"]) })])
  .meta({ description: "`installCode` is present exactly when `mode` is `provision`." });

/** The confirm's answer as code reads and builds it (every ConfirmResponseBody is one). */
export interface ConfirmResponse {
  mode: Mode;
  /** provision: the install code wrapped to the first approved EK for Name(AK). */
  installCode?: WrappedInstallCode;
}

/**
 * The TPM 1.2 variant (talos-config-server/README.md "TPM 1.2 machines"): only for nodes whose nodes-file `tpm` is
 * "1.2", only modes `intake` and `wipe` (the server refuses any other mode, journalled), and it never issues
 * anything. The claims are the same schema as TPM 2.0's and are bound the same way (claimsHash in the quote).
 */
/** The modes a TPM 1.2 machine may attest in. */
export const TPM12_MODES = ["intake", "wipe"] as const satisfies readonly Mode[];

export const Tpm12ChallengeRequest = z
  .object({
    claims: Claims,
    /** The TPM 1.2 EK: its TPM_PUBKEY (TPM_OwnerReadInternalPub) and, where NV holds one, its certificate (DER). */
    ek: z
      .object({ pubkey: b64(1024, "ek.pubkey"), certificate: b64(8192, "ek.certificate").optional() })
      .strict()
      .meta({ description: "The TPM 1.2 EK — its TPM_PUBKEY (TPM_OwnerReadInternalPub) and, where NV 0x1000f000 holds one, its DER certificate." }),
    /** A fresh AIK from TPM_MakeIdentity: its TPM_PUBKEY and identityBinding. */
    aik: z
      .object({ pubkey: b64(1024, "aik.pubkey"), identityBinding: b64(512, "aik.identityBinding") })
      .strict()
      .meta({ description: "A fresh AIK from TPM_MakeIdentity — its TPM_PUBKEY and identityBinding." }),
  })
  .strict();
export type Tpm12ChallengeRequest = z.infer<typeof Tpm12ChallengeRequest>;

export const Tpm12ChallengeResponse = z.strictObject({
  sessionId: SessionIdOut,
  /** 32 random bytes, base64: bound into the quote's externalData (bindings.ts quoteExternalData12). */
  nonce: NonceOut,
  expiresAt: ExpiresAt,
  /** TPM_ASYM_CA_CONTENTS for the AIK, encrypted to the approved EK (RSAES-OAEP SHA-1, label "TCPA"). */
  credential: z.strictObject({
    ekBinding: hex32,
    blob: b64Out('TPM_ASYM_CA_CONTENTS encrypted to the EK (RSAES-OAEP, SHA-1, label "TCPA"), for TPM_ActivateIdentity.'),
  }),
});
export type Tpm12ChallengeResponse = z.infer<typeof Tpm12ChallengeResponse>;

export const Tpm12Evidence = z
  .object({
    sessionId: z.string().min(1).max(128),
    /** TPM_ActivateIdentity's symmetricKey.data. */
    secret: b64(64, "secret").meta({ description: "TPM_ActivateIdentity's symmetricKey.data (base64, at most 64 bytes)." }),
    /** TPM_Quote by the AIK: the TPM_PCR_COMPOSITE it returned and the signature. */
    quote: z.object({ pcrComposite: b64(1024, "quote.pcrComposite"), signature: b64(512, "quote.signature") }).strict(),
    /** The TCG event log (SHA-1 format), at most 1 MiB. */
    eventLog: b64(1024 * 1024, "eventLog").meta({ description: "The TCG event log (SHA-1 format), base64 of at most 1 MiB." }),
  })
  .strict();
export type Tpm12Evidence = z.infer<typeof Tpm12Evidence>;

/** A TPM 1.2 pass releases nothing. */
export const Tpm12EvidenceResponse = PassNone;
export type Tpm12EvidenceResponse = z.infer<typeof Tpm12EvidenceResponse>;

/**
 * Renewal with runtime attestation (talos-config-server/README.md "Renewal"). The node proves possession of its
 * current LDevID by signing a server challenge with it (TPM2_Sign), quotes with its LAK over the PCRs its class
 * profile needs, and — for `purpose: renew`, when renewal is due — gets the next generation's certificates for
 * the same TPM keys, which become current only at the confirm.
 */
export const RENEW_PURPOSES = ["attest", "renew"] as const;
export type RenewPurpose = (typeof RENEW_PURPOSES)[number];

export const RenewChallengeRequest = z
  .object({
    ldevidCertificate: b64(4096, "ldevidCertificate").meta({ description: "The node's current LDevID certificate, DER (base64, at most 4 KiB)." }),
    lakCertificate: b64(4096, "lakCertificate").meta({ description: "The node's current LAK certificate (the same generation), DER (base64, at most 4 KiB)." }),
    purpose: z.enum(RENEW_PURPOSES).meta({ description: "`attest`: a runtime verdict only; `renew`: the verdict, and the next generation's certificates when renewal is due." }),
  })
  .strict();
export type RenewChallengeRequest = z.infer<typeof RenewChallengeRequest>;

/** The PCRs of one bank the node must quote. */
export const PcrBankSelection = z.strictObject({
  bank: z.enum(["sha1", "sha256", "sha384", "sha512"]),
  pcrs: z.array(z.number().int().min(0).max(23)).min(1).max(24),
});
export type PcrBankSelection = z.infer<typeof PcrBankSelection>;

export const RenewChallengeResponse = z.strictObject({
  sessionId: SessionIdOut,
  nonce: NonceOut,
  expiresAt: ExpiresAt,
  pcrSelection: z
    .array(PcrBankSelection)
    .min(1)
    .max(4)
    .meta({ description: "The PCRs the node's class profile needs, per bank: quote exactly these." }),
});
export type RenewChallengeResponse = z.infer<typeof RenewChallengeResponse>;

export const RenewEvidence = z
  .object({
    sessionId: z.string().min(1).max(128),
    quote: z
      .object({
        message: b64(1024, "quote.message").meta({ description: "TPMS_ATTEST of TPM2_Quote by the LAK (base64, at most 1 KiB)." }),
        signature: b64(1024, "quote.signature").meta({ description: "TPMT_SIGNATURE of the quote (base64, at most 1 KiB)." }),
        pcrs: z.array(PcrValue).min(1).max(4 * 24).meta({ description: "One value per quoted (bank, PCR), each exactly its bank's digest size in lowercase hex." }),
      })
      .strict(),
    eventLog: b64(1024 * 1024, "eventLog").meta({ description: "The TCG event log of the running OS's boot (binary_bios_measurements), base64 of at most 1 MiB." }),
    signature: b64(1024, "signature").meta({
      description: 'TPMT_SIGNATURE by the current LDevID over SHA-256("fleetd/renew/possession/v1" ‖ nonce ‖ sessionId ‖ SHA-256(quote.message)) (base64, at most 1 KiB).',
    }),
  })
  .strict();
export type RenewEvidence = z.infer<typeof RenewEvidence>;

/**
 * A passing runtime verdict: `issued: none` (purpose attest, or renewal not due), or `issued: new` with the next
 * generation's certificates for the same keys (confirm them with /v1/renew/confirm).
 */
export const RenewEvidenceResponse = z.discriminatedUnion("issued", [EvidenceIssued, PassNone]).meta({
  description:
    "A passing runtime verdict. `issued: new` carries the next generation's LDevID and LAK certificates for the same TPM keys (they become current at the confirm); `issued: none` carries nothing and has no confirm.",
});
export type RenewEvidenceResponse = z.infer<typeof RenewEvidenceResponse>;

export const RenewConfirm = z
  .object({
    sessionId: z.string().min(1).max(128),
    signature: b64(1024, "signature").meta({
      description: 'TPMT_SIGNATURE by the LDevID over SHA-256("fleetd/renew/confirm/v1" ‖ sessionId ‖ SHA-256(new LDevID DER) ‖ SHA-256(new LAK DER)) (base64, at most 1 KiB).',
    }),
  })
  .strict();
export type RenewConfirm = z.infer<typeof RenewConfirm>;

/** The renewal confirm's answer: nothing (the new generation is current). */
export const RenewConfirmResponse = z.strictObject({});
export type RenewConfirmResponse = z.infer<typeof RenewConfirmResponse>;

/**
 * One failed check and the evidence it concerns (the same reasons NetBox's journal shows): the wire form of
 * @fleetd/verify's Reason, without `internal` (which never leaves the server). OpenAPI component `Reason`.
 */
export const ReasonMessage = z.strictObject({
  check: z
    .string()
    .regex(/^\S+$/)
    .meta({ description: "Stable machine-readable name of the check, e.g. `quote.extraData`, `gate.status`, `ek.unknown`." }),
  detail: z
    .string()
    .min(1)
    .meta({ description: "A sentence naming the evidence. It names no inventory value (node name, recorded serial or UUID, switch port, status); those go to the NetBox journal only." }),
  pcr: z.number().int().min(0).max(23).optional(),
  event: z.number().int().min(0).optional().meta({ description: "Index of the event in the event log." }),
});

/** A type that must be assignable to `U` (a compile-time check). */
type AssignableTo<T extends U, U> = T;
/** What ReasonMessage parses to: a verify Reason (does not compile if the two drift apart). */
export type ReasonMessage = AssignableTo<z.infer<typeof ReasonMessage>, Reason>;

/** The errors of a refusal (every one but `unavailable`, which is UnavailableRefusal). */
export const REFUSAL_ERRORS = ["refused", "pending", "bad-request", "expired", "rate-limited"] as const;

/** A refusal: the failed checks and the evidence they concern. */
export const RefusalBody = z.strictObject({ error: z.enum(REFUSAL_ERRORS), reasons: z.array(ReasonMessage).min(1) });

/** `unavailable` (HTTP 503): a dependency is down; nothing was spent, retry the same request after Retry-After. */
export const UnavailableRefusal = z.strictObject({
  error: z.literal("unavailable"),
  /** Which dependency (netbox-unavailable, signer-unavailable, kubernetes-unavailable, …). */
  reason: z.enum(OUTAGE_REASONS as readonly OutageReason[] as [OutageReason, ...OutageReason[]]),
  reasons: z.array(ReasonMessage).min(1),
});

/**
 * Every refusal as code reads and builds it (RefusalBody and UnavailableRefusal are what the server sends; a
 * client also builds an `unavailable` of its own, without `reason`, for a request that never reached it).
 */
export interface Refusal {
  /** `unavailable` (HTTP 503): a dependency is down; nothing was spent, retry the same request after Retry-After. */
  error: z.infer<typeof RefusalBody>["error"] | "unavailable";
  /** With `unavailable`: which dependency (netbox-unavailable, signer-unavailable, kubernetes-unavailable). */
  reason?: OutageReason;
  reasons: ReasonMessage[];
}

// The wire schemas' types are the readers' types (a compile error here means the two drifted apart).
type Assignable<A extends B, B> = A;
export type _WireIsReadable = [
  Assignable<z.infer<typeof ConfirmResponseBody>, ConfirmResponse>,
  Assignable<z.infer<typeof RefusalBody>, Refusal>,
  Assignable<z.infer<typeof UnavailableRefusal>, Refusal>,
];

export { hex32 };
