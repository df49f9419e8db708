/**
 * Class policy profiles (files in the `policy/` package, YAML or JSON), validated with zod at load time.
 *
 * A profile says which evidence it accepts, never which exact image: there is deliberately no field for
 * image digests. Authorities are named sets: `builtin:<name>` (certificates we identify by fingerprint, see
 * builtin.ts) or `site:<name>` (the lab's own CA certificates, from `<site dir>/<name>.pem|crt|cer|der`), so the
 * HookOS signing certificate (`site:hookos-signer`) and the lab's image-signing CA (`site:lab-db`) stay distinct.
 */
import { z } from "zod";
import { TOLERANCE_NAMES } from "./tolerances.js";

export const AUTHORITY_REF = /^(site|builtin):[a-z0-9][a-z0-9-]{0,62}$/;
const AuthorityRef = z.string().regex(AUTHORITY_REF, "an authority is site:<name> or builtin:<name> (lowercase, digits, dashes)");
const Bank = z.enum(["sha1", "sha256", "sha384", "sha512"]);
export type BankName = z.infer<typeof Bank>;
const Pcr = z.number().int().min(0).max(23);
const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, "lowercase hex SHA-256");

const CertConstraint = z.strictObject({
  /** Every certificate in the variable must belong to one of these sets. */
  allowed: z.array(AuthorityRef).min(1),
  /** Whether the variable may also hold SHA-256 image digests (db only). */
  allowImageHashes: z.boolean().default(false),
});

export const ProfileSchema = z
  .strictObject({
    name: z.string().regex(/^[a-z0-9][a-z0-9-]*$/),
    description: z.string().min(1),
    /**
     * Which TPM's evidence the profile judges (default 2.0). A "1.2" profile is applied only to TPM 1.2 evidence
     * (a TPM_QUOTE_INFO over SHA-1 PCRs) and must allow and require SHA-1 alone; a "2.0" profile is refused for
     * TPM 1.2 evidence. So SHA-1 judges a TPM 2.0 machine only where a TPM 2.0 profile lists it explicitly.
     */
    tpm: z.enum(["2.0", "1.2"]).default("2.0"),
    banks: z.strictObject({
      /** PCR banks whose replay vouches for events. SHA-1 counts only when listed here explicitly. */
      allowed: z.array(Bank).min(1),
      /**
       * Banks the quote must carry (a subset of `allowed`). Every quoted allowed bank must replay, but the machine
       * picks which banks it quotes: where firmware left a bank unextended, the OS could fill it with a good boot
       * and quote that bank alone. Requiring the bank every PC Client firmware extends (SHA-256) closes that.
       */
      required: z.array(Bank).default([]),
    }),
    pcrs: z.strictObject({
      /** Must be quoted, replay from the log, and hold only events this profile accepts. */
      enforced: z.array(Pcr).min(1),
      /** Reported (and interpreted when they replay) but never a reason to fail. */
      informational: z.array(Pcr).default([]),
    }),
    secureBoot: z.strictObject({
      required: z.boolean(),
      pk: CertConstraint.optional(),
      kek: CertConstraint.optional(),
      db: CertConstraint.optional(),
      dbx: z
        .strictObject({
          /** Minimum number of dbx entries (certificates + hashes + other). */
          minEntries: z.number().int().min(0).default(0),
          /** SHA-256 entries that must be revoked. */
          required: z.array(Sha256Hex).default([]),
        })
        .optional(),
      /** "DMA Protection Disabled" is always reported; with false it also fails the verdict. */
      allowDmaProtectionDisabled: z.boolean().default(true),
    }),
    authorities: z.strictObject({
      /** db entries allowed to verify firmware drivers and option ROMs (before the PCR7 separator). */
      preSeparator: z.strictObject({ allowed: z.array(AuthorityRef).default([]) }),
      /** db entries (and shim's vendor certificates) allowed to verify boot loaders, kernels, UKIs. */
      postSeparator: z.strictObject({
        allowed: z.array(AuthorityRef).min(1),
        /** At least one image after the separator must have been verified by one of these (default: allowed). */
        requireAny: z.array(AuthorityRef).optional(),
        /** Whether an image allowed by a db SHA-256 entry (not a certificate) is acceptable. */
        allowImageHashes: z.boolean().default(false),
      }),
    }),
    /**
     * Firmware quirks this profile accepts, by name (policy/tolerances.ts: each names the real log it came from).
     * None applies unless listed.
     */
    tolerances: z.array(z.enum(TOLERANCE_NAMES)).default([]),
    shim: z
      .strictObject({
        sbatLevel: z.strictObject({
          /** Refuse when shim did not measure its SbatLevel (shim < 15.3). */
          required: z.boolean(),
          /** Minimum SBAT revocation level date, the third field of the "sbat,1,YYYYMMDDNN" line. */
          minDate: z.string().regex(/^\d{10}$/),
          /** Minimum revoked generation per component (e.g. shim: 2, grub: 3). */
          components: z.record(z.string().regex(/^[a-z0-9._-]+$/), z.number().int().min(1)).default({}),
        }),
      })
      .optional(),
  })
  .superRefine((p, ctx) => {
    const enforced = new Set(p.pcrs.enforced);
    for (const i of p.pcrs.informational) {
      if (enforced.has(i)) ctx.addIssue({ code: "custom", path: ["pcrs", "informational"], message: `PCR ${i} is both enforced and informational` });
    }
    for (const b of p.banks.required) {
      if (!p.banks.allowed.includes(b)) ctx.addIssue({ code: "custom", path: ["banks", "required"], message: `${b} is required but not allowed` });
    }
    if (p.tpm === "1.2" && (p.banks.allowed.join() !== "sha1" || p.banks.required.join() !== "sha1")) {
      ctx.addIssue({ code: "custom", path: ["banks"], message: "a TPM 1.2 profile allows and requires sha1 only (a TPM 1.2 has no other bank)" });
    }
    if (new Set(p.tolerances).size !== p.tolerances.length) ctx.addIssue({ code: "custom", path: ["tolerances"], message: "a tolerance is listed twice" });
    if (!enforced.has(7)) {
      ctx.addIssue({ code: "custom", path: ["pcrs", "enforced"], message: "PCR 7 must be enforced: the Secure Boot state and authorities come from it" });
    }
  });

export type Profile = z.infer<typeof ProfileSchema>;
export type ProfileInput = z.input<typeof ProfileSchema>;

/** Every authority reference a profile uses. */
export function profileAuthorityRefs(p: Profile): string[] {
  const refs = new Set<string>([
    ...(p.secureBoot.pk?.allowed ?? []),
    ...(p.secureBoot.kek?.allowed ?? []),
    ...(p.secureBoot.db?.allowed ?? []),
    ...p.authorities.preSeparator.allowed,
    ...p.authorities.postSeparator.allowed,
    ...(p.authorities.postSeparator.requireAny ?? []),
  ]);
  return [...refs].sort();
}
