/**
 * Finding the CA's private key on the token (by CKA_LABEL and/or CKA_ID) and its public key: the public-key
 * object with the same CKA_ID (or label), else a certificate object with that CKA_ID (ykcs11 exposes both
 * for a PIV slot). Exactly one private key must match.
 */
import type { PKCS11, Template } from "pkcs11js";
import { parseCertificate } from "@fleetd/verify/x509";
import type { PublicKeyInfo } from "./algorithms.js";
import { PkiError } from "./errors.js";
import { pkcs11js, pkcs11Reason } from "./pkcs11Module.js";
import type { Pkcs11SignerSettings } from "./pkcs11Config.js";
import type { Handle } from "./pkcs11Session.js";
import { publicKeyInfoFromEcPoint, publicKeyInfoFromRsa, publicKeyInfoFromSpki } from "./publicKey.js";

export interface TokenKey {
  handle: Handle;
  publicKey: PublicKeyInfo;
  /** CKA_ALWAYS_AUTHENTICATE: a context-specific login is needed before every signature. */
  alwaysAuthenticate: boolean;
}

export function describeKey(key: Pkcs11SignerSettings["key"]): string {
  return [key.label !== undefined ? `label "${key.label}"` : "", key.id !== undefined ? `id ${key.id}` : ""].filter(Boolean).join(", ");
}

function find(api: PKCS11, session: Handle, template: Template): Handle[] {
  api.C_FindObjectsInit(session, template);
  try {
    return api.C_FindObjects(session, 4);
  } finally {
    api.C_FindObjectsFinal(session);
  }
}

function selector(key: Pkcs11SignerSettings["key"]): Template {
  const p = pkcs11js();
  const t: Template = [];
  if (key.label !== undefined) t.push({ type: p.CKA_LABEL, value: key.label });
  if (key.id !== undefined) t.push({ type: p.CKA_ID, value: Buffer.from(key.id, "hex") });
  return t;
}

/** Attributes one at a time: a token may refuse one it does not hold (CKR_ATTRIBUTE_TYPE_INVALID). */
function attributes(api: PKCS11, session: Handle, object: Handle, types: number[]): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  for (const type of types) {
    try {
      const [a] = api.C_GetAttributeValue(session, object, [{ type }]);
      if (a && Buffer.isBuffer(a.value)) out.set(type, a.value);
    } catch {
      // absent or not readable: the caller decides whether it needed it
    }
  }
  return out;
}

function ulong(b: Buffer | undefined): number | undefined {
  if (!b) return undefined;
  if (b.length === 8) return Number(b.readBigUInt64LE(0));
  if (b.length === 4) return b.readUInt32LE(0);
  return undefined;
}

export function findTokenKey(api: PKCS11, session: Handle, key: Pkcs11SignerSettings["key"], what: string): TokenKey {
  const p = pkcs11js();
  const which = describeKey(key);
  let handles: Handle[];
  try {
    handles = find(api, session, [{ type: p.CKA_CLASS, value: p.CKO_PRIVATE_KEY }, ...selector(key)]);
  } catch (e) {
    throw new PkiError("token-unavailable", `${what}: cannot search for the private key (${which}): ${pkcs11Reason(e)}`);
  }
  if (handles.length === 0) throw new PkiError("key-not-found", `${what}: no private key with ${which}`);
  if (handles.length > 1) throw new PkiError("key-ambiguous", `${what}: ${handles.length} private keys match ${which}; name it by id and label`);
  const handle = handles[0] as Handle;

  const attrs = attributes(api, session, handle, [p.CKA_KEY_TYPE, p.CKA_SIGN, p.CKA_ALWAYS_AUTHENTICATE, p.CKA_ID, p.CKA_LABEL]);
  const keyType = ulong(attrs.get(p.CKA_KEY_TYPE));
  if (keyType !== p.CKK_EC && keyType !== p.CKK_RSA) {
    throw new PkiError("key-unsupported", `${what}: private key (${which}) has key type ${keyType ?? "?"}, not EC or RSA`);
  }
  if (attrs.get(p.CKA_SIGN)?.[0] !== 1) throw new PkiError("key-unsupported", `${what}: private key (${which}) does not allow signing (CKA_SIGN false)`);
  const alwaysAuthenticate = attrs.get(p.CKA_ALWAYS_AUTHENTICATE)?.[0] === 1;

  const id = attrs.get(p.CKA_ID);
  const label = attrs.get(p.CKA_LABEL);
  const publicKey = findPublicKey(api, session, keyType === p.CKK_EC ? "ec" : "rsa", id, label, what, which);
  return { handle, publicKey, alwaysAuthenticate };
}

function findPublicKey(
  api: PKCS11,
  session: Handle,
  kind: "ec" | "rsa",
  id: Buffer | undefined,
  label: Buffer | undefined,
  what: string,
  which: string,
): PublicKeyInfo {
  const p = pkcs11js();
  const match: Template = id && id.length > 0 ? [{ type: p.CKA_ID, value: id }] : label ? [{ type: p.CKA_LABEL, value: label }] : [];
  if (match.length > 0) {
    const pubs = find(api, session, [{ type: p.CKA_CLASS, value: p.CKO_PUBLIC_KEY }, ...match]);
    if (pubs.length === 1) {
      const pub = pubs[0] as Handle;
      if (kind === "ec") {
        const a = attributes(api, session, pub, [p.CKA_EC_PARAMS, p.CKA_EC_POINT]);
        const params = a.get(p.CKA_EC_PARAMS);
        const point = a.get(p.CKA_EC_POINT);
        if (params && point) return publicKeyInfoFromEcPoint(params, point);
      } else {
        const a = attributes(api, session, pub, [p.CKA_MODULUS, p.CKA_PUBLIC_EXPONENT]);
        const n = a.get(p.CKA_MODULUS);
        const e = a.get(p.CKA_PUBLIC_EXPONENT);
        if (n && e) return publicKeyInfoFromRsa(n, e);
      }
    }
    const certs = find(api, session, [{ type: p.CKA_CLASS, value: p.CKO_CERTIFICATE }, ...match]);
    if (certs.length === 1) {
      const value = attributes(api, session, certs[0] as Handle, [p.CKA_VALUE]).get(p.CKA_VALUE);
      if (value) {
        let spki: Uint8Array;
        try {
          spki = parseCertificate(value).spki.der;
        } catch (e) {
          throw new PkiError("public-key-not-found", `${what}: the certificate object next to the key (${which}) does not parse: ${(e as Error).message}`);
        }
        return publicKeyInfoFromSpki(spki);
      }
    }
  }
  throw new PkiError("public-key-not-found", `${what}: no public key or certificate object shares the CKA_ID of the private key (${which})`);
}
