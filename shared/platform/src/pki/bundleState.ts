/**
 * The CA bundle state file (a trust boundary: zod, then semantic checks). It lists every CA still trusted,
 * in activation order; the last one whose activation time has passed is the issuing CA.
 *
 *   { "version": 1, "cas": [ { "certificate": "-----BEGIN CERTIFICATE-----…", "fingerprint": "<sha256 hex>",
 *     "activatesAt": "2026-11-01T00:00:00.000Z", "lastIssuance": null | ISO, "lastNotAfter": null | ISO } ] }
 */
import { z } from "zod";
import { PkiError } from "./errors.js";
import { checkCaCertificate, fingerprint } from "./issueLeaf.js";
import { parseIssuedCertificate } from "./parseCertificate.js";

const Iso = z.iso.datetime();

export const BundleStateFile = z
  .object({
    version: z.literal(1),
    cas: z
      .array(
        z
          .object({
            certificate: z.string().min(1).max(16_384),
            fingerprint: z.string().regex(/^[0-9a-f]{64}$/, "lowercase SHA-256 hex"),
            activatesAt: Iso,
            lastIssuance: Iso.nullable(),
            lastNotAfter: Iso.nullable(),
          })
          .strict(),
      )
      .max(64),
  })
  .strict();
export type BundleStateFile = z.infer<typeof BundleStateFile>;

export interface CaRecord {
  certificatePem: string;
  /** SHA-256 of the certificate's DER, lowercase hex. */
  fingerprint: string;
  /** From then on this CA issues (until the next CA activates). */
  activatesAt: Date;
  /** The latest issuance recorded for this CA, and the latest notAfter it signed. */
  lastIssuance: Date | null;
  lastNotAfter: Date | null;
}

export interface BundleState {
  /** Ordered by activatesAt, strictly increasing. */
  cas: CaRecord[];
}

/** Semantic checks shared by parsing and by every change: each certificate is a CA, matches its fingerprint, order holds. */
export function checkBundleState(state: BundleState, what = "bundle state"): void {
  const seen = new Set<string>();
  state.cas.forEach((ca, i) => {
    let der: Uint8Array;
    try {
      const info = parseIssuedCertificate(ca.certificatePem, `${what}: CA ${i + 1}`);
      checkCaCertificate(info);
      der = info.der;
    } catch (e) {
      throw new PkiError("bundle-state-invalid", e instanceof Error ? e.message : String(e));
    }
    if (fingerprint(der) !== ca.fingerprint) {
      throw new PkiError("bundle-state-invalid", `${what}: CA ${i + 1} fingerprint ${ca.fingerprint} does not match its certificate (${fingerprint(der)})`);
    }
    if (seen.has(ca.fingerprint)) throw new PkiError("bundle-state-invalid", `${what}: CA ${ca.fingerprint} is listed twice`);
    seen.add(ca.fingerprint);
    const prev = state.cas[i - 1];
    if (prev && !(ca.activatesAt > prev.activatesAt)) {
      throw new PkiError("bundle-state-invalid", `${what}: CA ${i + 1} activates at ${ca.activatesAt.toISOString()}, not after CA ${i} (${prev.activatesAt.toISOString()})`);
    }
  });
}

export function parseBundleState(text: string, what = "bundle state"): BundleState {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new PkiError("bundle-state-invalid", `${what} is not JSON: ${(e as Error).message}`);
  }
  const parsed = BundleStateFile.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new PkiError("bundle-state-invalid", `${what}: ${issue ? `${issue.path.join(".") || "(root)"}: ${issue.message}` : "invalid"}`);
  }
  const state: BundleState = {
    cas: parsed.data.cas.map((c) => ({
      certificatePem: c.certificate,
      fingerprint: c.fingerprint,
      activatesAt: new Date(c.activatesAt),
      lastIssuance: c.lastIssuance === null ? null : new Date(c.lastIssuance),
      lastNotAfter: c.lastNotAfter === null ? null : new Date(c.lastNotAfter),
    })),
  };
  checkBundleState(state, what);
  return state;
}

export function serializeBundleState(state: BundleState): string {
  const file: BundleStateFile = {
    version: 1,
    cas: state.cas.map((c) => ({
      certificate: c.certificatePem,
      fingerprint: c.fingerprint,
      activatesAt: c.activatesAt.toISOString(),
      lastIssuance: c.lastIssuance?.toISOString() ?? null,
      lastNotAfter: c.lastNotAfter?.toISOString() ?? null,
    })),
  };
  return JSON.stringify(file, null, 2) + "\n";
}
