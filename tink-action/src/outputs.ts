/**
 * What the attest step leaves on the workflow's shared volume for the actions after it:
 *   ldevid.crt     LDevID certificate, then the CA bundle (PEM chain)
 *   ldevid.pub     LDevID TPMT_PUBLIC, ldevid.priv its TPM2B_PRIVATE payload (no size prefix, as SPIRE reads them)
 *   lak.crt        LAK certificate (PEM); lak.pub / lak.priv as for the LDevID
 *   ca-bundle.pem  the CA bundle the certificates chain to
 *   install-code   provision only: the Talos install code (64 hex, mode 0600), read by write-meta --code-file
 *   result.json    mode, verdict, node, certificate serials, the claims (no secrets); also written on refusal
 * Each file is written to a temporary name and renamed; result.json last. Files of an earlier run are removed
 * first, so a refused run never leaves an install code behind.
 */
import { createHash } from "node:crypto";
import { mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { AttestResult } from "@fleetd/platform/protocol/client";
import type { Claims } from "@fleetd/platform/protocol";
import { certificateToPem, opensslNameText, parseCertificate, serialNumberText } from "@fleetd/verify/x509";

export const OUTPUT_FILES = ["install-code", "ldevid.crt", "ldevid.pub", "ldevid.priv", "lak.crt", "lak.pub", "lak.priv", "ca-bundle.pem", "result.json"] as const;
export type OutputFile = (typeof OUTPUT_FILES)[number];

function put(dir: string, name: OutputFile, data: string | Uint8Array, mode: number): void {
  const tmp = join(dir, `.${name}.${process.pid}.tmp`);
  writeFileSync(tmp, data, { mode });
  renameSync(tmp, join(dir, name));
}

export function clearOutputs(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const f of OUTPUT_FILES) rmSync(join(dir, f), { force: true });
}

export interface CertSummary {
  subject: string;
  serial: string;
  notBefore: string;
  notAfter: string;
  sha256: string;
}

function summary(der: Uint8Array): CertSummary {
  const c = parseCertificate(der);
  return {
    subject: opensslNameText(c.subject).replace(/\n/g, ", "),
    serial: serialNumberText(c),
    notBefore: c.notBefore.toISOString(),
    notAfter: c.notAfter.toISOString(),
    sha256: createHash("sha256").update(der).digest("hex"),
  };
}

/** `CN=<node>.g<generation>` (attestation-protocol.md "Keys and certificates"). */
export function nodeFromLdevid(der: Uint8Array): { node: string; generation: number } | undefined {
  const cn = /(?:^|\n)CN=([^\n]+)/.exec(opensslNameText(parseCertificate(der).subject))?.[1];
  const m = cn ? /^(.+)\.g(\d+)$/.exec(cn) : null;
  return m ? { node: m[1] as string, generation: Number(m[2]) } : undefined;
}

const pem = (der: Uint8Array) => certificateToPem(der);

export interface RunInfo {
  workflow: string;
  claims: Claims;
  attempts: number;
  tpm: string;
}

export interface SuccessReport {
  version: 1;
  mode: Claims["mode"];
  verdict: "pass";
  node?: string;
  generation?: number;
  workflow: string;
  claims: Omit<Claims, "mode" | "workflow">;
  /** Absent when the server issued nothing (wipe, a device being retired, an attest whose LDevID is not due). */
  ldevid?: CertSummary;
  lak?: CertSummary;
  installCode: boolean;
  attempts: number;
  finishedAt: string;
}

export function writeSuccess(dir: string, r: AttestResult, info: RunInfo, now = new Date()): SuccessReport {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (r.installCode !== undefined) put(dir, "install-code", r.installCode, 0o600);
  const i = r.issued;
  if (i) {
    const bundle = i.caBundle.trim() + "\n";
    put(dir, "ldevid.crt", pem(i.ldevid.certificate) + bundle, 0o644);
    put(dir, "ldevid.pub", i.ldevid.blobs.publicBytes, 0o600);
    put(dir, "ldevid.priv", i.ldevid.blobs.private, 0o600);
    put(dir, "lak.crt", pem(i.lak.certificate), 0o644);
    put(dir, "lak.pub", i.lak.blobs.publicBytes, 0o600);
    put(dir, "lak.priv", i.lak.blobs.private, 0o600);
    put(dir, "ca-bundle.pem", bundle, 0o644);
  }
  const { mode: _m, workflow: _w, ...claims } = info.claims;
  const node = i ? nodeFromLdevid(i.ldevid.certificate) : undefined;
  const report: SuccessReport = {
    version: 1,
    mode: r.mode,
    verdict: "pass",
    ...(node ?? {}),
    workflow: info.workflow,
    claims,
    ...(i ? { ldevid: summary(i.ldevid.certificate), lak: summary(i.lak.certificate) } : {}),
    installCode: r.installCode !== undefined,
    attempts: info.attempts,
    finishedAt: now.toISOString(),
  };
  put(dir, "result.json", JSON.stringify(report, null, 2) + "\n", 0o644);
  return report;
}

export interface FailureReport {
  version: 1;
  mode: Claims["mode"];
  verdict: "fail" | "pending" | "error";
  workflow: string;
  /** Which step failed and how (refusal reasons from the server, or the local error). */
  step: string;
  error: string;
  reasons: { check: string; detail: string; pcr?: number; event?: number }[];
  attempts: number;
  finishedAt: string;
}

export function writeFailure(dir: string, f: Omit<FailureReport, "version" | "finishedAt">, now = new Date()): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    put(dir, "result.json", JSON.stringify({ version: 1, ...f, finishedAt: now.toISOString() }, null, 2) + "\n", 0o644);
  } catch {
    // best effort: the exit code is what stops the workflow
  }
}
