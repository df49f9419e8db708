/**
 * Test-only X.509 certificate builder: small DER writer plus node:crypto signing, so tests can make chains
 * with the algorithms and defects real TPM chains have (RSA-PSS, ECDSA P-384/P-521, id-RSAES-OAEP keys,
 * critical TPM subjectAltName, expired intermediates, wrong CA flags) without any fixture files.
 */
import { constants, createPublicKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { der, derOid } from "@fleetd/verify/tpm";

export type SigAlg =
  | "sha1WithRSA"
  | "sha256WithRSA"
  | "sha384WithRSA"
  | "pss-sha256"
  | "pss-sha384"
  | "ecdsa-sha256"
  | "ecdsa-sha384"
  | "ecdsa-sha512";

export interface TestExtension {
  oid: string;
  critical?: boolean;
  value: Uint8Array;
}

export interface TestCertSpec {
  /** [[type OID, value]] per RDN (an RDN with several entries is multi-valued). */
  subject: [string, string][][];
  issuer: [string, string][][];
  serial?: number;
  notBefore?: Date;
  notAfter?: Date;
  /** DER SubjectPublicKeyInfo of the subject key. */
  spki: Uint8Array;
  /** Issuer private key. */
  signer: KeyObject;
  sigAlg: SigAlg;
  extensions?: TestExtension[];
  /** Use this (different) AlgorithmIdentifier inside tbsCertificate. */
  tbsSigAlgOverride?: SigAlg;
}

export const CN = "2.5.4.3";
export const O = "2.5.4.10";
export const C = "2.5.4.6";

const seq = (...p: Uint8Array[]) => der(0x30, ...p);
const set = (...p: Uint8Array[]) => der(0x31, ...p);
const utf8 = (s: string) => der(0x0c, new TextEncoder().encode(s));
const octets = (b: Uint8Array) => der(0x04, b);
const nullDer = Uint8Array.of(0x05, 0x00);

export function derInteger(n: number | Uint8Array): Uint8Array {
  let b: number[];
  if (typeof n === "number") {
    b = [];
    let v = n;
    do {
      b.unshift(v & 0xff);
      v = Math.floor(v / 256);
    } while (v > 0);
  } else {
    b = [...n];
  }
  if ((b[0] ?? 0) & 0x80) b.unshift(0);
  return der(0x02, Uint8Array.from(b));
}

function time(d: Date): Uint8Array {
  const p = (x: number, w = 2) => String(x).padStart(w, "0");
  const body = `${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}Z`;
  const y = d.getUTCFullYear();
  if (y >= 1950 && y < 2050) return der(0x17, new TextEncoder().encode(`${p(y % 100)}${body}`));
  return der(0x18, new TextEncoder().encode(`${p(y, 4)}${body}`));
}

export function nameDer(rdns: [string, string][][]): Uint8Array {
  return seq(...rdns.map((rdn) => set(...rdn.map(([oid, v]) => seq(derOid(oid), utf8(v))))));
}

const HASH_OID: Record<string, string> = {
  sha256: "2.16.840.1.101.3.4.2.1",
  sha384: "2.16.840.1.101.3.4.2.2",
  sha512: "2.16.840.1.101.3.4.2.3",
};

export function sigAlgDer(alg: SigAlg): Uint8Array {
  switch (alg) {
    case "sha1WithRSA":
      return seq(derOid("1.2.840.113549.1.1.5"), nullDer);
    case "sha256WithRSA":
      return seq(derOid("1.2.840.113549.1.1.11"), nullDer);
    case "sha384WithRSA":
      return seq(derOid("1.2.840.113549.1.1.12"), nullDer);
    case "pss-sha256":
    case "pss-sha384": {
      const h = alg === "pss-sha256" ? "sha256" : "sha384";
      const salt = h === "sha256" ? 32 : 48;
      const hashAlg = seq(derOid(HASH_OID[h] ?? ""), nullDer);
      const params = seq(
        der(0xa0, hashAlg),
        der(0xa1, seq(derOid("1.2.840.113549.1.1.8"), hashAlg)),
        der(0xa2, derInteger(salt)),
      );
      return seq(derOid("1.2.840.113549.1.1.10"), params);
    }
    case "ecdsa-sha256":
      return seq(derOid("1.2.840.10045.4.3.2"));
    case "ecdsa-sha384":
      return seq(derOid("1.2.840.10045.4.3.3"));
    case "ecdsa-sha512":
      return seq(derOid("1.2.840.10045.4.3.4"));
  }
}

function signWith(alg: SigAlg, key: KeyObject, data: Uint8Array): Uint8Array {
  switch (alg) {
    case "sha1WithRSA":
      return sign("sha1", data, key);
    case "sha256WithRSA":
      return sign("sha256", data, key);
    case "sha384WithRSA":
      return sign("sha384", data, key);
    case "pss-sha256":
      return sign("sha256", data, { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 });
    case "pss-sha384":
      return sign("sha384", data, { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 48 });
    case "ecdsa-sha256":
      return sign("sha256", data, { key, dsaEncoding: "der" });
    case "ecdsa-sha384":
      return sign("sha384", data, { key, dsaEncoding: "der" });
    case "ecdsa-sha512":
      return sign("sha512", data, { key, dsaEncoding: "der" });
  }
}

export function buildCertificate(spec: TestCertSpec): Uint8Array {
  const exts = spec.extensions ?? [];
  const tbsParts = [
    der(0xa0, derInteger(2)),
    derInteger(spec.serial ?? 1),
    sigAlgDer(spec.tbsSigAlgOverride ?? spec.sigAlg),
    nameDer(spec.issuer),
    seq(time(spec.notBefore ?? new Date("2020-01-01T00:00:00Z")), time(spec.notAfter ?? new Date("2099-01-01T00:00:00Z"))),
    nameDer(spec.subject),
    spec.spki,
  ];
  if (exts.length > 0) {
    tbsParts.push(
      der(
        0xa3,
        seq(...exts.map((e) => seq(derOid(e.oid), ...(e.critical ? [Uint8Array.of(0x01, 0x01, 0xff)] : []), octets(e.value)))),
      ),
    );
  }
  const tbs = seq(...tbsParts);
  const sig = signWith(spec.sigAlg, spec.signer, tbs);
  return seq(tbs, sigAlgDer(spec.sigAlg), der(0x03, Uint8Array.of(0), sig));
}

// ---- extensions ----

export function basicConstraints(cA: boolean, pathLen?: number): TestExtension {
  const parts: Uint8Array[] = cA ? [Uint8Array.of(0x01, 0x01, 0xff)] : [];
  if (pathLen !== undefined) parts.push(derInteger(pathLen));
  return { oid: "2.5.29.19", critical: true, value: seq(...parts) };
}

/** keyUsage with the given bit numbers set (5 = keyCertSign, 2 = keyEncipherment, 4 = keyAgreement). */
export function keyUsage(...bits: number[]): TestExtension {
  const bytes = new Uint8Array(2);
  for (const b of bits) bytes[b >> 3] = (bytes[b >> 3] ?? 0) | (0x80 >> (b & 7));
  const used = bytes[1] === 0 ? bytes.subarray(0, 1) : bytes;
  return { oid: "2.5.29.15", critical: true, value: der(0x03, Uint8Array.of(0), used) };
}

export function extKeyUsage(...oids: string[]): TestExtension {
  return { oid: "2.5.29.37", value: seq(...oids.map((o) => derOid(o))) };
}

/** The EK subjectAltName: critical, one directoryName with TPM manufacturer/model/version. */
export function tpmSan(manufacturer: string, model: string, version: string): TestExtension {
  const dn = nameDer([[["2.23.133.2.1", manufacturer], ["2.23.133.2.2", model], ["2.23.133.2.3", version]]]);
  return { oid: "2.5.29.17", critical: true, value: seq(der(0xa4, dn)) };
}

// ---- keys ----

export interface TestKey {
  privateKey: KeyObject;
  publicKey: KeyObject;
  spki: Uint8Array;
}

export function rsaKey(bits = 2048): TestKey {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: bits });
  return { privateKey, publicKey, spki: new Uint8Array(publicKey.export({ type: "spki", format: "der" })) };
}

export function ecKey(curve: "prime256v1" | "secp384r1" | "secp521r1"): TestKey {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: curve });
  return { privateKey, publicKey, spki: new Uint8Array(publicKey.export({ type: "spki", format: "der" })) };
}

/** The same RSA key labelled id-RSAES-OAEP (1.2.840.113549.1.1.7) with no parameters, as some EK certificates do. */
export function relabelRsaAsOaep(spki: Uint8Array): Uint8Array {
  const jwk = createPublicKey({ key: Buffer.from(spki), format: "der", type: "spki" }).export({ format: "jwk" });
  const n = Buffer.from(jwk.n ?? "", "base64url");
  const e = Buffer.from(jwk.e ?? "", "base64url");
  const rsaPublicKey = seq(derInteger(new Uint8Array(n)), derInteger(new Uint8Array(e)));
  return seq(seq(derOid("1.2.840.113549.1.1.7")), der(0x03, Uint8Array.of(0), rsaPublicKey));
}
