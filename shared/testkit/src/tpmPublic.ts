/**
 * For tests and benchmarks: the TPMT_PUBLIC a TPM would report for a node:crypto signing key (RSA-2048
 * RSASSA-SHA256 or P-256 ECDSA-SHA256, the shapes of tpmclient's signing templates), so software keys can stand
 * in for TPM keys where only the verifier is under test.
 */
import type { KeyObject } from "node:crypto";
import type { TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { akTemplate } from "@fleetd/platform/tpmclient";

const b64u = (s: string | undefined) => new Uint8Array(Buffer.from(s ?? "", "base64url"));

export function tpmPublicFromKey(key: KeyObject, objectAttributes: number): TPMT_PUBLIC {
  const jwk = key.export({ format: "jwk" });
  if (jwk.kty === "RSA") return { ...akTemplate("rsa"), objectAttributes, unique: { kind: "rsa", n: b64u(jwk.n) } };
  if (jwk.kty === "EC" && jwk.crv === "P-256") return { ...akTemplate("ecc"), objectAttributes, unique: { kind: "ecc", x: b64u(jwk.x), y: b64u(jwk.y) } };
  throw new Error(`no TPM signing template for a ${jwk.kty} ${jwk.crv ?? ""} key`);
}
