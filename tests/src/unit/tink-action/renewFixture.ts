/**
 * Test sets for the node agent: an LDevID and a LAK certificate of one generation (`<node>.g<n>` and
 * `<node>.g<n>.lak`) from a test CA, the TPMT_PUBLIC bytes of their keys, and the seed directory Talos would
 * write for them (each file the base64 of its bytes, names from SEED_FILES).
 */
import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { encode } from "@fleetd/verify/codec";
import { TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { certificateToPem } from "@fleetd/verify/x509";
import { SEED_FILES } from "@fleetd/platform/talos/config";
import { LDEVID_ATTRIBUTES } from "@fleetd/platform/tpmclient";
import { tpmPublicFromKey } from "@fleetd/testkit/tpmPublic";
import { basicConstraints, buildCertificate, CN, ecKey, type TestKey } from "@fleetd/testkit/x509Builder";
import type { DevidSet } from "@fleetd/tink-action/devidStore";

export interface Keys {
  ca: TestKey;
  caCert: Uint8Array;
  ldevid: KeyObject;
  lak: KeyObject;
}

export function makeKeys(): Keys {
  const ca = ecKey("prime256v1");
  const caCert = buildCertificate({ subject: [[[CN, "fleetd test CA"]]], issuer: [[[CN, "fleetd test CA"]]], spki: ca.spki, signer: ca.privateKey, sigAlg: "ecdsa-sha256", extensions: [basicConstraints(true)] });
  const key = () => generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey;
  return { ca, caCert, ldevid: key(), lak: key() };
}

let serial = 100;
export function cert(k: Keys, cn: string, subjectKey: KeyObject, notBefore: Date, notAfter: Date): Uint8Array {
  return buildCertificate({
    subject: [[[CN, cn]]],
    issuer: [[[CN, "fleetd test CA"]]],
    serial: serial++,
    notBefore,
    notAfter,
    spki: new Uint8Array(subjectKey.export({ type: "spki", format: "der" })),
    signer: k.ca.privateKey,
    sigAlg: "ecdsa-sha256",
  });
}

/** Generation `g` of `node` with the keys `k`, valid from `from` for `days`. */
export function makeSet(k: Keys, node: string, g: number, from = new Date(Date.now() - 3600_000), days = 30): DevidSet {
  const to = new Date(from.getTime() + days * 86_400_000);
  return {
    node,
    generation: g,
    ldevidCertificate: cert(k, `${node}.g${g}`, k.ldevid, from, to),
    lakCertificate: cert(k, `${node}.g${g}.lak`, k.lak, from, to),
    caBundle: certificateToPem(k.caCert),
    ldevidPublic: encode(TPMT_PUBLIC, tpmPublicFromKey(k.ldevid, LDEVID_ATTRIBUTES)),
    ldevidPrivate: Uint8Array.from([0x00, 0x20, 1, 2, 3, 4]),
    lakPublic: encode(TPMT_PUBLIC, tpmPublicFromKey(k.lak, LDEVID_ATTRIBUTES)),
    lakPrivate: Uint8Array.from([0x00, 0x20, 5, 6, 7, 8]),
  };
}

/** The seed directory Talos writes from a node config carrying `s`. */
export function writeSeed(dir: string, s: DevidSet, opts: { withoutLakCert?: boolean } = {}): void {
  mkdirSync(dir, { recursive: true });
  const b64 = (b: Uint8Array | string) => Buffer.from(b).toString("base64");
  writeFileSync(join(dir, SEED_FILES.ldevidCertChainPem), b64(certificateToPem(s.ldevidCertificate) + s.caBundle));
  writeFileSync(join(dir, SEED_FILES.ldevidPublic), b64(s.ldevidPublic));
  writeFileSync(join(dir, SEED_FILES.ldevidPrivate), b64(s.ldevidPrivate));
  writeFileSync(join(dir, SEED_FILES.lakPublic), b64(s.lakPublic));
  writeFileSync(join(dir, SEED_FILES.lakPrivate), b64(s.lakPrivate));
  if (!opts.withoutLakCert) writeFileSync(join(dir, SEED_FILES.lakCertPem), b64(certificateToPem(s.lakCertificate)));
}
