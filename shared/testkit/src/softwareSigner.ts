/**
 * A CertificateSigner over a node:crypto private key, for unit tests of certificate logic that need no
 * token. Production signs only through the PKCS#11 signer (pki/pkcs11Signer.ts).
 */
import { createPublicKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { SIGNATURE_ALGORITHMS, signatureAlgorithmForKey, publicKeyInfoFromKeyObject, type CertificateSigner } from "@fleetd/platform/pki";

export function softwareSigner(privateKey: KeyObject): CertificateSigner {
  const publicKey = publicKeyInfoFromKeyObject(createPublicKey(privateKey));
  const signatureAlgorithm = signatureAlgorithmForKey(publicKey);
  return {
    publicKey,
    signatureAlgorithm,
    async sign(data) {
      return new Uint8Array(sign(SIGNATURE_ALGORITHMS[signatureAlgorithm].hash, data, privateKey)); // EC: DER by default
    },
  };
}

export function newSoftwareSigner(kind: "ec-p256" | "ec-p384" | "rsa-2048" = "ec-p256"): CertificateSigner {
  const { privateKey } =
    kind === "rsa-2048" ? generateKeyPairSync("rsa", { modulusLength: 2048 }) : generateKeyPairSync("ec", { namedCurve: kind === "ec-p384" ? "P-384" : "P-256" });
  return softwareSigner(privateKey);
}
