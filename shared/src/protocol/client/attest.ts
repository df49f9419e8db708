/**
 * The machine's side of the attestation protocol (used by tink-action; renewal later): gather EKs, create a
 * fresh AK, answer the challenge by credential activation, quote bound to the session and claims, certify a new
 * LDevID and LAK with the AK, send the evidence, confirm with the LDevID, and unwrap the install code.
 *
 * A TPM may hold only three loaded objects (swtpm does), so each step loads what it needs and flushes it.
 */
import { createHash } from "node:crypto";
import type { PcrSelection } from "../../attest/pcrs.js";
import { bankName } from "../../attest/pcrs.js";
import { encode } from "../../codec/codec.js";
import { hex } from "../../crypto/hash.js";
import { ekBindingFromTpmPublic } from "../../ek/binding.js";
import { ekTemplateForNvIndex, type EkTemplateId } from "../../ek/templates.js";
import { TPM_ALG } from "../../tpm/constants.js";
import { TPM2B_PUBLIC } from "../../tpm/structures.js";
import { activateCredential } from "../../tpmclient/activate.js";
import { certify, quote } from "../../tpmclient/attest.js";
import type { TpmClient } from "../../tpmclient/client.js";
import { createEk, readEkCertificates } from "../../tpmclient/ek.js";
import { createAk, createLak, createLdevid, createSrk, load, type KeyBlobs } from "../../tpmclient/keys.js";
import { pcrRead } from "../../tpmclient/pcr.js";
import { sign } from "../../tpmclient/sign.js";
import type { KeyAlg } from "../../tpmclient/templates.js";
import { withTransients } from "../../tpmclient/transients.js";
import { certifyExtraData, claimsHash, confirmMessage, quoteExtraData } from "../bindings.js";
import type { ChallengeResponse, Claims, ConfirmResponse, EvidenceResponse, Refusal } from "../messages.js";

export interface ServerTransport {
  post(path: string, body: unknown): Promise<{ status: number; body: unknown }>;
}

export class AttestationRefused extends Error {
  override readonly name = "AttestationRefused";
  constructor(
    readonly step: string,
    readonly status: number,
    readonly refusal: Refusal,
  ) {
    super(`${step} refused (${status} ${refusal.error}): ${refusal.reasons.map((r) => `${r.check}: ${r.detail}`).join("; ")}`);
  }
  get pending(): boolean {
    return this.refusal.error === "pending";
  }
}

export interface AttestInput {
  tpm: TpmClient;
  server: ServerTransport;
  claims: Claims;
  eventLog: Uint8Array;
  /** Algorithm of the SRK, AK, LDevID and LAK. RSA-2048 by default (SPIRE tpm_devid needs the RSA EK anyway). */
  keyAlg?: KeyAlg;
  /** PCRs to quote; default SHA-256 PCRs 0–15. */
  pcrs?: PcrSelection[];
}

export interface AttestResult {
  mode: Claims["mode"];
  ldevid: { certificate: Uint8Array; blobs: KeyBlobs };
  lak: { certificate: Uint8Array; blobs: KeyBlobs };
  caBundle: string;
  /** provision: the Talos install code (lowercase hex of the 32 unwrapped bytes). */
  installCode?: string;
}

interface PresentedEk {
  templateId: EkTemplateId;
  binding: string;
  publicBytes: Uint8Array;
  certificate?: Uint8Array;
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const unb64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));

async function call<T>(server: ServerTransport, step: string, path: string, body: unknown): Promise<T> {
  const res = await server.post(path, body);
  if (res.status !== 200) throw new AttestationRefused(step, res.status, res.body as Refusal);
  return res.body as T;
}

/** Every EK the TPM can show: one per EK certificate in NV (its template from the index), else the RSA default. */
async function gatherEks(tpm: TpmClient): Promise<PresentedEk[]> {
  const certs = await readEkCertificates(tpm);
  const wanted: { templateId: EkTemplateId; certificate?: Uint8Array }[] = [];
  for (const c of certs) {
    const t = ekTemplateForNvIndex(c.index);
    if (t) wanted.push({ templateId: t.id, certificate: c.bytes });
  }
  if (wanted.length === 0) wanted.push({ templateId: "L-1" });
  const out: PresentedEk[] = [];
  for (const w of wanted) {
    const ek = await createEk(tpm, w.templateId);
    try {
      out.push({ templateId: w.templateId, binding: ekBindingFromTpmPublic(ek.public), publicBytes: ek.publicBytes, ...(w.certificate ? { certificate: w.certificate } : {}) });
    } finally {
      await tpm.flushContext(ek.handle);
    }
  }
  return out;
}

export async function attest(input: AttestInput): Promise<AttestResult> {
  const { tpm, server, claims } = input;
  const alg = input.keyAlg ?? "rsa";
  const selection = input.pcrs ?? [{ hash: TPM_ALG.SHA256, pcrs: Array.from({ length: 16 }, (_, i) => i) }];
  const tpm2b = (publicBytes: Uint8Array) => {
    const out = new Uint8Array(publicBytes.length + 2);
    out[0] = publicBytes.length >> 8;
    out[1] = publicBytes.length & 0xff;
    out.set(publicBytes, 2);
    return out;
  };

  // 1. EKs and a fresh AK.
  const eks = await gatherEks(tpm);
  const akBlobs = await withTransients(tpm, async (t) => createAk(tpm, t.keep(await createSrk(tpm, alg)), alg));
  const ch = await call<ChallengeResponse>(server, "challenge", "/v1/attest/challenge", {
    claims,
    eks: eks.map((e) => ({ public: b64(tpm2b(e.publicBytes)), ...(e.certificate ? { certificate: b64(e.certificate) } : {}) })),
    akPublic: b64(tpm2b(akBlobs.publicBytes)),
  });
  const nonce = unb64(ch.nonce);

  // 2. Evidence: activation per approved EK, the quote, the certified LDevID and LAK.
  const evidence = await withTransients(tpm, async (t) => {
    const srk = t.keep(await createSrk(tpm, alg));
    const ak = t.keep(await load(tpm, srk, akBlobs));
    await t.flush(srk.handle);
    const secrets: string[] = [];
    for (const cred of ch.credentials) {
      const e = eks.find((x) => x.binding === cred.ekBinding);
      if (!e) throw new Error(`the server asked for EK ${cred.ekBinding}, which this TPM did not present`);
      const ek = t.keep(await createEk(tpm, e.templateId));
      secrets.push(b64(await activateCredential(tpm, ak, ek, unb64(cred.idObject), unb64(cred.encryptedSecret))));
      await t.flush(ek.handle);
    }
    const q = await quote(tpm, ak, selection, quoteExtraData(nonce, ch.sessionId, claimsHash(claims)));
    const values = (await pcrRead(tpm, selection)).values;
    const pcrs: { bank: string; pcr: number; value: string }[] = [];
    for (const s of selection) for (const p of s.pcrs) pcrs.push({ bank: bankName(s.hash), pcr: p, value: hex(values.get(s.hash)?.get(p) ?? new Uint8Array()) });
    const certified = async (kind: "ldevid" | "lak") => {
      const parent = t.keep(await createSrk(tpm, alg));
      const blobs = await (kind === "ldevid" ? createLdevid : createLak)(tpm, parent, alg);
      const key = t.keep(await load(tpm, parent, blobs));
      await t.flush(parent.handle);
      const c = await certify(tpm, key, ak, certifyExtraData(kind, nonce, ch.sessionId));
      await t.flush(key.handle);
      return { blobs, wire: { public: b64(blobs.publicBytes), private: b64(blobs.private), certifyInfo: b64(c.attestBytes), signature: b64(c.signatureBytes) } };
    };
    const ldevid = await certified("ldevid");
    const lak = await certified("lak");
    return {
      ldevid,
      lak,
      body: { sessionId: ch.sessionId, secrets, quote: { message: b64(q.attestBytes), signature: b64(q.signatureBytes), pcrs }, eventLog: b64(input.eventLog), ldevid: ldevid.wire, lak: lak.wire },
    };
  });
  const ev = await call<EvidenceResponse>(server, "evidence", "/v1/attest/evidence", evidence.body);
  const ldevidCert = unb64(ev.ldevidCertificate);
  const lakCert = unb64(ev.lakCertificate);

  // 3. Confirm with the new LDevID; in provision, unwrap the install code with the same AK.
  const signature = await withTransients(tpm, async (t) => {
    const srk = t.keep(await createSrk(tpm, alg));
    const key = t.keep(await load(tpm, srk, evidence.ldevid.blobs));
    const digest = new Uint8Array(createHash("sha256").update(confirmMessage(ch.sessionId, ldevidCert, lakCert)).digest());
    return (await sign(tpm, key, digest)).signatureBytes;
  });
  const conf = await call<ConfirmResponse>(server, "confirm", "/v1/attest/confirm", { sessionId: ch.sessionId, signature: b64(signature) });
  let installCode: string | undefined;
  if (conf.installCode) {
    const wrapped = conf.installCode;
    const first = eks.find((e) => e.binding === ch.credentials[0]?.ekBinding);
    if (!first) throw new Error("no approved EK to unwrap the install code with");
    installCode = await withTransients(tpm, async (t) => {
      const srk = t.keep(await createSrk(tpm, alg));
      const ak = t.keep(await load(tpm, srk, akBlobs));
      await t.flush(srk.handle);
      const ek = t.keep(await createEk(tpm, first.templateId));
      return hex(await activateCredential(tpm, ak, ek, unb64(wrapped.idObject), unb64(wrapped.encryptedSecret)));
    });
  }
  return {
    mode: conf.mode,
    ldevid: { certificate: ldevidCert, blobs: evidence.ldevid.blobs },
    lak: { certificate: lakCert, blobs: evidence.lak.blobs },
    caBundle: ev.caBundle,
    ...(installCode ? { installCode } : {}),
  };
}

export { encode, TPM2B_PUBLIC };
