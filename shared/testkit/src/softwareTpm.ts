/**
 * For unit tests of the attestation server only: a TPM 2.0 *model* in node:crypto that produces what a real TPM
 * hands the machine — EK public areas and certificates, AK/LDevID/LAK public areas, ActivateCredential's
 * secret, TPMS_ATTEST quotes and certifies and their TPMT_SIGNATUREs — so the server's decision engine can be
 * driven without swtpm. It is not a TPM: keys are plain KeyObjects, "private" blobs are random bytes, nothing is
 * enforced (a test can make it sign anything). The real-platform tests (tests/src/attestation) use swtpm.
 *
 *  - manufacturer: an EK CA (self-signed P-256) that issues EK certificates; `softwareManufacturer()` makes one.
 *  - EKs: RSA-2048 (template L-1) and P-256 (L-2), each with a certificate from the manufacturer; ActivateCredential
 *    undoes @fleetd/verify/credential's makeCredential (TPM 2.0 Part 1 §24: OAEP "IDENTITY" or ECDH + KDFe, then
 *    KDFa "INTEGRITY"/"STORAGE", HMAC check, AES-CFB).
 *  - PCR banks (default sha1 + sha256), extended like a TPM; quotes cover the selection in TPM order.
 */
import { constants, createHash, createPublicKey, diffieHellman, generateKeyPairSync, privateDecrypt, randomBytes, sign, createDecipheriv, type KeyObject } from "node:crypto";
import { decodeExact, encode } from "@fleetd/verify/codec";
import { ctEqual, hashInfo, hmac, kdfa, kdfe } from "@fleetd/verify/crypto";
import { caStoreFrom, ekBindingFromTpmPublic, ekTemplate, type CaStore, type EkTemplateId } from "@fleetd/verify/ek";
import { OID as X509_OID, parseCertificate } from "@fleetd/verify/x509";
import { bankName, pcrDigest, selectionToBitmaps, type PcrSelection, type PcrValues } from "@fleetd/verify/attest";
import { TPM_ALG, TPM_GENERATED_VALUE, TPM_ST, type HashAlgId } from "@fleetd/verify/tcg";
import {
  objectName, TPM2B_DIGEST, TPM2B_ENCRYPTED_SECRET, TPM2B_ID_OBJECT, TPMS_ATTEST, TPMS_ECC_POINT, TPMT_PUBLIC, TPMT_SIGNATURE,
  type TPMS_ATTEST as Attest, type TPMT_PUBLIC as Public, type TPMT_SIGNATURE as Signature,
} from "@fleetd/verify/tpm";
import { basicConstraints, buildCertificate, CN, ecKey, extKeyUsage, keyUsage, O, tpmSan, type TestKey } from "./x509Builder.js";

const b64u = (s: string | undefined) => new Uint8Array(Buffer.from(s ?? "", "base64url"));

/** An EK certificate authority ("who made the TPM"). */
export interface SoftwareManufacturer {
  name: string;
  key: TestKey;
  /** The CA certificate (DER). */
  der: Uint8Array;
  /** A manufacturer store holding this CA only (what the server's ekRoots would be). */
  store(): CaStore;
}

export function softwareManufacturer(name = "fleetd software TPM CA"): SoftwareManufacturer {
  const key = ecKey("prime256v1");
  const dn: [string, string][][] = [[[CN, name]], [[O, "fleetd test"]]];
  const der = buildCertificate({ subject: dn, issuer: dn, serial: 1, spki: key.spki, signer: key.privateKey, sigAlg: "ecdsa-sha256", extensions: [basicConstraints(true), keyUsage(5, 6)] });
  return { name, key, der, store: () => caStoreFrom([{ cert: parseCertificate(der), source: `${name}.der` }]) };
}

/** A key the model holds: its public area (and the exact bytes its Name is over) and its private key. */
export interface SoftwareKey {
  public: Public;
  /** TPMT_PUBLIC bytes. */
  publicBytes: Uint8Array;
  name: Uint8Array;
  privateKey: KeyObject;
  /** Stands in for the TPM2B_PRIVATE a TPM returns (opaque random bytes here). */
  private: Uint8Array;
}

/** An EK of the model: template, key, public area, binding, certificate (absent for a template-only EK). */
export interface SoftwareEk extends SoftwareKey {
  templateId: EkTemplateId;
  binding: string;
  certificate?: Uint8Array;
}

export interface SoftwareTpmOptions {
  /** Who issues its EK certificates (default: a manufacturer of its own). */
  manufacturer?: SoftwareManufacturer;
  /** PCR banks (default sha1 + sha256). */
  banks?: readonly HashAlgId[];
  /**
   * The EKs' private keys, made beforehand (an RSA-2048 and a P-256 key; e.g. generated asynchronously for a
   * thousand machines at once): default, made here.
   */
  ekKeys?: { rsa: KeyObject; ecc: KeyObject };
}

/**
 * A key of `template`'s shape (RSA-2048 or P-256) with a fresh key pair filled into `unique` (or `made`, a private
 * key of that shape made beforehand).
 */
export function softwareKey(template: Public, made?: KeyObject): SoftwareKey {
  let privateKey: KeyObject;
  let pub: Public;
  if (made && made.asymmetricKeyType !== (template.parameters.kind === "rsa" ? "rsa" : "ec")) throw new Error(`a ${made.asymmetricKeyType} key does not fit a ${template.parameters.kind} template`);
  if (template.parameters.kind === "rsa") {
    privateKey = made ?? generateKeyPairSync("rsa", { modulusLength: template.parameters.keyBits }).privateKey;
    const jwk = createPublicKey(privateKey).export({ format: "jwk" });
    pub = { ...template, unique: { kind: "rsa", n: b64u(jwk.n) } };
  } else if (template.parameters.kind === "ecc") {
    privateKey = made ?? generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
    const jwk = createPublicKey(privateKey).export({ format: "jwk" });
    pub = { ...template, unique: { kind: "ecc", x: b64u(jwk.x), y: b64u(jwk.y) } };
  } else {
    throw new Error(`the software TPM makes RSA and ECC keys, not ${template.parameters.kind}`);
  }
  const publicBytes = encode(TPMT_PUBLIC, pub);
  return { public: pub, publicBytes, name: objectName(publicBytes), privateKey, private: new Uint8Array(randomBytes(64)) };
}

/** TPMT_SIGNATURE by `key` over SHA-256(message), per the key's scheme (RSASSA or ECDSA; anything else: RSASSA/ECDSA-SHA256). */
export function tpmSign(key: Pick<SoftwareKey, "public" | "privateKey">, message: Uint8Array): Uint8Array {
  const hash = TPM_ALG.SHA256;
  let sig: Signature;
  if (key.public.parameters.kind === "rsa") {
    sig = { sigAlg: TPM_ALG.RSASSA, signature: { kind: "rsassa", hash, sig: new Uint8Array(sign("sha256", message, key.privateKey)) } };
  } else {
    const rs = new Uint8Array(sign("sha256", message, { key: key.privateKey, dsaEncoding: "ieee-p1363" }));
    sig = { sigAlg: TPM_ALG.ECDSA, signature: { kind: "ecdsa", hash, signatureR: rs.subarray(0, 32), signatureS: rs.subarray(32) } };
  }
  return encode(TPMT_SIGNATURE, sig);
}

export class SoftwareTpm {
  readonly manufacturer: SoftwareManufacturer;
  readonly eks: { rsa: SoftwareEk; ecc: SoftwareEk };
  private readonly pcrs = new Map<number, Uint8Array[]>();
  private readonly templateEks = new Map<EkTemplateId, SoftwareEk>();
  private clock = 1000n;

  constructor(o: SoftwareTpmOptions = {}) {
    this.manufacturer = o.manufacturer ?? softwareManufacturer();
    for (const bank of o.banks ?? [TPM_ALG.SHA1, TPM_ALG.SHA256]) this.pcrs.set(bank, Array.from({ length: 24 }, () => new Uint8Array(hashInfo(bank).size)));
    this.eks = { rsa: this.makeEk("L-1", true, o.ekKeys?.rsa), ecc: this.makeEk("L-2", true, o.ekKeys?.ecc) };
  }

  private makeEk(templateId: EkTemplateId, certified: boolean, made?: KeyObject): SoftwareEk {
    const key = softwareKey(ekTemplate(templateId).public, made);
    const binding = ekBindingFromTpmPublic(key.public);
    if (!certified) return { ...key, templateId, binding };
    const spki = new Uint8Array(createPublicKey(key.privateKey).export({ type: "spki", format: "der" }));
    const m = this.manufacturer;
    const certificate = buildCertificate({
      subject: [],
      issuer: [[[CN, m.name]], [[O, "fleetd test"]]],
      serial: 0x1000 + Math.floor(Math.random() * 0xffff),
      spki,
      signer: m.key.privateKey,
      sigAlg: "ecdsa-sha256",
      extensions: [tpmSan("id:464C4544", "fleetd-soft", "id:00010002"), basicConstraints(false), extKeyUsage(X509_OID.tcgKpEkCertificate), keyUsage(templateId === "L-1" ? 2 : 4)],
    });
    return { ...key, templateId, binding, certificate };
  }

  /** A further EK from a profile template, without a certificate (e.g. another P-256 EK nobody approved). */
  ekFromTemplate(templateId: EkTemplateId): SoftwareEk {
    const known = this.templateEks.get(templateId);
    if (known) return known;
    const ek = this.makeEk(templateId, false);
    this.templateEks.set(templateId, ek);
    return ek;
  }

  /** Every EK this TPM has (with the ones made by ekFromTemplate), by binding. */
  ekByBinding(binding: string): SoftwareEk | undefined {
    return [this.eks.rsa, this.eks.ecc, ...this.templateEks.values()].find((e) => e.binding === binding);
  }

  /** TPM2_PCR_Extend of the banks `digests` names (the others are left as they are). */
  extend(pcr: number, digests: ReadonlyMap<number, Uint8Array>): void {
    for (const [bank, d] of digests) {
      const values = this.pcrs.get(bank);
      if (!values) continue;
      const { name } = hashInfo(bank);
      values[pcr] = new Uint8Array(createHash(name).update(values[pcr] as Uint8Array).update(d).digest());
    }
  }

  /** The values of the PCRs `selection` names. */
  pcrValues(selection: PcrSelection[]): PcrValues {
    const out: PcrValues = new Map();
    for (const s of selection) {
      const bank = this.pcrs.get(s.hash);
      if (!bank) throw new Error(`the software TPM has no ${bankName(s.hash)} bank`);
      const m = out.get(s.hash) ?? new Map<number, Uint8Array>();
      for (const p of s.pcrs) m.set(p, bank[p] as Uint8Array);
      out.set(s.hash, m);
    }
    return out;
  }

  /** PCR values as the evidence carries them ({bank, pcr, value hex}), in selection order. */
  pcrWire(selection: PcrSelection[]): { bank: "sha1" | "sha256" | "sha384" | "sha512"; pcr: number; value: string }[] {
    const values = this.pcrValues(selection);
    return selection.flatMap((s) => s.pcrs.map((pcr) => ({ bank: bankName(s.hash).toLowerCase() as "sha256", pcr, value: Buffer.from(values.get(s.hash)?.get(pcr) ?? []).toString("hex") })));
  }

  /**
   * TPM2_ActivateCredential with `ek` for the object named `objectName` (the AK): the credential, or an error as
   * the TPM's TPM_RC_INTEGRITY when the blob was not made for this EK and Name.
   */
  activateCredential(ek: SoftwareEk, objectName: Uint8Array, idObject: Uint8Array, encryptedSecret: Uint8Array): Uint8Array {
    const nameAlg = ek.public.nameAlg;
    const { size } = hashInfo(nameAlg);
    const secret = decodeExact(TPM2B_ENCRYPTED_SECRET, encryptedSecret);
    let seed: Uint8Array;
    if (ek.public.parameters.kind === "rsa") {
      seed = new Uint8Array(privateDecrypt({ key: ek.privateKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: hashInfo(nameAlg).name, oaepLabel: Buffer.from("IDENTITY\0") }, secret));
    } else {
      const point = decodeExact(TPMS_ECC_POINT, secret);
      const eph = createPublicKey({ key: { kty: "EC", crv: "P-256", x: Buffer.from(point.x).toString("base64url"), y: Buffer.from(point.y).toString("base64url") }, format: "jwk" });
      const z = new Uint8Array(diffieHellman({ privateKey: ek.privateKey, publicKey: eph }));
      const qx = ek.public.unique.kind === "ecc" ? ek.public.unique.x : new Uint8Array(0);
      seed = kdfe(nameAlg, z, "IDENTITY", point.x, qx, size * 8);
    }
    const id = decodeExact(TPM2B_ID_OBJECT, idObject);
    const hmacKey = kdfa(nameAlg, seed, "INTEGRITY", new Uint8Array(0), new Uint8Array(0), size * 8);
    if (!ctEqual(hmac(nameAlg, hmacKey, id.encIdentity, objectName), id.integrityHMAC)) throw new Error("TPM_RC_INTEGRITY: the credential was not made for this EK and object Name");
    const sym = ek.public.parameters.kind === "rsa" || ek.public.parameters.kind === "ecc" ? ek.public.parameters.symmetric.details : undefined;
    const keyBits = sym?.kind === "aes" ? sym.keyBits : 128;
    const symKey = kdfa(nameAlg, seed, "STORAGE", objectName, new Uint8Array(0), keyBits);
    const d = createDecipheriv(`aes-${keyBits}-cfb`, symKey, Buffer.alloc(16));
    return decodeExact(TPM2B_DIGEST, new Uint8Array(Buffer.concat([d.update(id.encIdentity), d.final()])));
  }

  private attest(signer: SoftwareKey, extraData: Uint8Array, attested: Attest["attested"]): { attestBytes: Uint8Array; signatureBytes: Uint8Array } {
    this.clock += 10n;
    const type = attested.kind === "quote" ? TPM_ST.ATTEST_QUOTE : attested.kind === "certify" ? TPM_ST.ATTEST_CERTIFY : TPM_ST.ATTEST_CREATION;
    const a: Attest = {
      magic: TPM_GENERATED_VALUE,
      type,
      qualifiedSigner: signer.name,
      extraData,
      clockInfo: { clock: this.clock, resetCount: 1, restartCount: 0, safe: 1 },
      firmwareVersion: 0x2019_0610n,
      attested,
    } as Attest;
    const attestBytes = encode(TPMS_ATTEST, a);
    return { attestBytes, signatureBytes: tpmSign(signer, attestBytes) };
  }

  /** TPM2_Quote by `ak` over `selection` with `extraData` (pcrDigest: SHA-256 of the values in TPM order). */
  quote(ak: SoftwareKey, selection: PcrSelection[], extraData: Uint8Array): { attestBytes: Uint8Array; signatureBytes: Uint8Array } {
    const sorted = selection.map((s) => ({ hash: s.hash, pcrs: [...s.pcrs].sort((x, y) => x - y) }));
    const digest = pcrDigest(TPM_ALG.SHA256, sorted, this.pcrValues(sorted));
    return this.attest(ak, extraData, { kind: "quote", pcrSelect: selectionToBitmaps(sorted), pcrDigest: digest } as Attest["attested"]);
  }

  /** TPM2_Certify of `key` by `ak` with `extraData`. */
  certify(ak: SoftwareKey, key: SoftwareKey, extraData: Uint8Array): { attestBytes: Uint8Array; signatureBytes: Uint8Array } {
    return this.attest(ak, extraData, { kind: "certify", name: key.name, qualifiedName: key.name } as Attest["attested"]);
  }

  /** TPM2_Sign of SHA-256(message) with `key`: the TPMT_SIGNATURE bytes. */
  sign(key: SoftwareKey, message: Uint8Array): Uint8Array {
    return tpmSign(key, message);
  }
}
