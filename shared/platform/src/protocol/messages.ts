/**
 * The attestation protocol's messages (attestation-protocol.md "Messages"), as zod schemas: the trust
 * boundary between a machine and the server. Binary fields are base64; every size is bounded so an
 * oversized body is refused before any work is done.
 */
import type { OutageReason } from "../outage/outage.js";
import { z } from "zod";

const b64 = (max: number, what: string) =>
  z
    .string()
    .max(Math.ceil(max / 3) * 4 + 4, `${what} is larger than ${max} bytes`)
    .regex(/^[A-Za-z0-9+/]*={0,2}$/, `${what} is not base64`)
    .transform((s) => new Uint8Array(Buffer.from(s, "base64")));

const hex32 = z.string().regex(/^[0-9a-f]{64}$/, "must be 32 bytes of lowercase hex");
const mac = z
  .string()
  .regex(/^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/, "must be a MAC address aa:bb:cc:dd:ee:ff")
  .transform((m) => m.toLowerCase());

import { MODES, type Mode } from "../fleet/modes.js";
export { MODES, type Mode };

/** What the machine says about itself. Claims, until TPM evidence vouches for them. */
export const Claims = z
  .object({
    serial: z.string().min(1).max(128),
    uuid: z.string().regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/, "must be a UUID").transform((u) => u.toLowerCase()),
    macs: z.array(mac).min(1).max(32),
    lldp: z.object({ chassisId: z.string().min(1).max(256), portId: z.string().min(1).max(256) }).strict().nullable(),
    mode: z.enum(MODES),
    workflow: z.string().min(1).max(253),
    /**
     * The MAC of the interface the machine booted from (the action's boot interface: configured, default
     * route, or first up), one of `macs`. Bound by the quote like every claim; recorded as the node's boot MAC
     * (NetBox `boot_mac`, Hardware, the Talos link selector) instead of whichever MAC sorts first.
     */
    bootMac: mac.optional(),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.bootMac !== undefined && !c.macs.includes(c.bootMac)) ctx.addIssue({ code: "custom", path: ["bootMac"], message: "must be one of macs" });
  });
export type Claims = z.infer<typeof Claims>;

export const ChallengeRequest = z
  .object({
    claims: Claims,
    /** Every EK the TPM has: its TPM2B_PUBLIC and, where the TPM holds one, its certificate (DER). */
    eks: z
      .array(z.object({ public: b64(1024, "eks[].public"), certificate: b64(8192, "eks[].certificate").optional() }).strict())
      .min(1)
      .max(8),
    /** A fresh AK: TPM2B_PUBLIC. */
    akPublic: b64(1024, "akPublic"),
  })
  .strict();
export type ChallengeRequest = z.infer<typeof ChallengeRequest>;

export interface ChallengeResponse {
  sessionId: string;
  nonce: string;
  expiresAt: string;
  /** One credential per approved EK, in the node's order; each for Name(AK) with its own secret. */
  credentials: { ekBinding: string; idObject: string; encryptedSecret: string }[];
}

const certifiedKey = z
  .object({
    /** TPMT_PUBLIC of the key (exactly as the TPM returned it). */
    public: b64(1024, "public"),
    /** TPM2B_PRIVATE payload (sealed to the SRK; useless outside this TPM), seeded into the Talos config. */
    private: b64(4096, "private"),
    /** TPMS_ATTEST of TPM2_Certify by the AK over this key. */
    certifyInfo: b64(1024, "certifyInfo"),
    signature: b64(1024, "signature"),
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
    .strict();

/** One quoted PCR value: its bank, its index, and exactly that bank's digest size in lowercase hex. */
export const PcrValue = z.discriminatedUnion("bank", [pcrValueOf("sha1"), pcrValueOf("sha256"), pcrValueOf("sha384"), pcrValueOf("sha512")]);

export const Evidence = z
  .object({
    sessionId: z.string().min(1).max(128),
    /** ActivateCredential results, in the order of the challenge's credentials. */
    secrets: z.array(b64(64, "secrets[]")).min(1).max(8),
    quote: z
      .object({
        message: b64(1024, "quote.message"),
        signature: b64(1024, "quote.signature"),
        pcrs: z
          .array(PcrValue)
          .min(1)
          .max(4 * 24),
      })
      .strict(),
    /** The TCG event log (binary_bios_measurements), at most 1 MiB. */
    eventLog: b64(1024 * 1024, "eventLog"),
    ldevid: certifiedKey,
    lak: certifiedKey,
  })
  .strict();
export type Evidence = z.infer<typeof Evidence>;

/**
 * A passing verdict. `issued` says whether certificates come with it: "new" (a fresh LDevID/LAK pair for the
 * keys certified in this session), "none" (wipe mode, a device being retired, or an attest whose LDevID is not
 * due for renewal). Without certificates there is no confirm.
 */
export type EvidenceResponse =
  | {
      verdict: "pass";
      issued: "new";
      ldevidCertificate: string;
      lakCertificate: string;
      /** The CA bundle (PEM) the certificates chain to. */
      caBundle: string;
    }
  | { verdict: "pass"; issued: "none" };

export const Confirm = z
  .object({
    sessionId: z.string().min(1).max(128),
    /** TPMT_SIGNATURE by the LDevID over confirmDigest(sessionId, H(LDevID cert), H(LAK cert)). */
    signature: b64(1024, "signature"),
  })
  .strict();
export type Confirm = z.infer<typeof Confirm>;

export interface ConfirmResponse {
  mode: Mode;
  /** provision: the install code wrapped to the first approved EK for Name(AK). */
  installCode?: { idObject: string; encryptedSecret: string };
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
    ek: z.object({ pubkey: b64(1024, "ek.pubkey"), certificate: b64(8192, "ek.certificate").optional() }).strict(),
    /** A fresh AIK from TPM_MakeIdentity: its TPM_PUBKEY and identityBinding. */
    aik: z.object({ pubkey: b64(1024, "aik.pubkey"), identityBinding: b64(512, "aik.identityBinding") }).strict(),
  })
  .strict();
export type Tpm12ChallengeRequest = z.infer<typeof Tpm12ChallengeRequest>;

export interface Tpm12ChallengeResponse {
  sessionId: string;
  /** 32 random bytes, base64: bound into the quote's externalData (bindings.ts quoteExternalData12). */
  nonce: string;
  expiresAt: string;
  /** TPM_ASYM_CA_CONTENTS for the AIK, encrypted to the approved EK (RSAES-OAEP SHA-1, label "TCPA"). */
  credential: { ekBinding: string; blob: string };
}

export const Tpm12Evidence = z
  .object({
    sessionId: z.string().min(1).max(128),
    /** TPM_ActivateIdentity's symmetricKey.data. */
    secret: b64(64, "secret"),
    /** TPM_Quote by the AIK: the TPM_PCR_COMPOSITE it returned and the signature. */
    quote: z.object({ pcrComposite: b64(1024, "quote.pcrComposite"), signature: b64(512, "quote.signature") }).strict(),
    /** The TCG event log (SHA-1 format), at most 1 MiB. */
    eventLog: b64(1024 * 1024, "eventLog"),
  })
  .strict();
export type Tpm12Evidence = z.infer<typeof Tpm12Evidence>;

/** A TPM 1.2 pass releases nothing. */
export interface Tpm12EvidenceResponse {
  verdict: "pass";
  issued: "none";
}

/** Every refusal the API returns: the failed checks and the evidence they concern. */
export interface Refusal {
  /** `unavailable` (HTTP 503): a dependency is down; nothing was spent, retry the same request after Retry-After. */
  error: "refused" | "pending" | "bad-request" | "expired" | "rate-limited" | "unavailable";
  /** With `unavailable`: which dependency (netbox-unavailable, signer-unavailable, kubernetes-unavailable). */
  reason?: OutageReason;
  reasons: { check: string; detail: string; pcr?: number; event?: number }[];
}

export { hex32 };
