/**
 * Issuer over fleetd's PKCS#11 CA: LDevID and LAK certificates from the current CA of the bundle, each
 * issuance recorded (and persisted by `save`) before the certificates are released, so a rolled-over CA stays
 * in the bundle until its last certificate has expired.
 */
import { bundlePem, currentCa, recordIssuance } from "../../../pki/bundle.js";
import type { BundleState } from "../../../pki/bundleState.js";
import type { CertificateSigner } from "../../../pki/signer.js";
import { issueLakCertificate } from "../../../pki/issueLak.js";
import { issueLdevidCertificate } from "../../../pki/issueLdevid.js";
import type { Issuer } from "../../../fleet/ports.js";

export interface PkiIssuerOptions {
  /** The signer of the current CA's key (a YubiKey through PKCS#11 in production). */
  signer: CertificateSigner;
  state: () => BundleState;
  save: (s: BundleState) => Promise<void>;
  lifetimeDays: number;
  now: () => Date;
  /** Backdating of notBefore for clock skew (SPIRE checks validity at every re-attestation). */
  backdateMs?: number;
}

export class PkiIssuer implements Issuer {
  constructor(private readonly o: PkiIssuerOptions) {}

  async issue(req: Parameters<Issuer["issue"]>[0]): ReturnType<Issuer["issue"]> {
    const now = this.o.now();
    const state = this.o.state();
    const ca = { certificate: currentCa(state, now).certificatePem, signer: this.o.signer };
    const notBefore = new Date(now.getTime() - (this.o.backdateMs ?? 5 * 60_000));
    const request = { node: req.node, generation: req.generation, notBefore, lifetimeDays: this.o.lifetimeDays };
    const serial = (hex: string | undefined) => (hex ? { serial: new Uint8Array(Buffer.from(hex, "hex")) } : {});
    const ldevid = await issueLdevidCertificate(ca, { ...request, publicKey: req.ldevid, ...serial(req.serials?.ldevid) });
    const lak = await issueLakCertificate(ca, { ...request, publicKey: req.lak, ...serial(req.serials?.lak) });
    let next = recordIssuance(state, { issuerFingerprint: ldevid.issuerFingerprint, at: now, notAfter: ldevid.notAfter });
    next = recordIssuance(next, { issuerFingerprint: lak.issuerFingerprint, at: now, notAfter: lak.notAfter });
    await this.o.save(next);
    return {
      ldevid: { der: ldevid.der, serialHex: ldevid.serialHex, notAfter: ldevid.notAfter },
      lak: { der: lak.der, serialHex: lak.serialHex, notAfter: lak.notAfter },
      bundlePem: bundlePem(next, now),
    };
  }
}
