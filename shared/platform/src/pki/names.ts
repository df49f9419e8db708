/**
 * Subject names. The LDevID subject is `CN=<node>.g<generation>`: SPIRE's tpm_devid turns the leaf CN into
 * the selector `tpm_devid:subject:cn:<node>.g<generation>`, so the node alias can follow the current
 * generation and older LDevIDs stop matching. The LAK is `CN=<node>.g<generation>.lak`: it can never equal
 * an LDevID CN (those end in `.g<digits>`), so a LAK certificate presented to SPIRE matches no node alias.
 */
import { type Name, nameValues } from "@fleetd/verify/x509";
import { PkiError } from "./errors.js";

/** Node names are Kubernetes node names / Talos hostnames: RFC 1123 subdomains, lowercase. */
const NODE_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/;
/** X.520 ub-common-name. */
const MAX_CN = 64;
const OID_CN = "2.5.4.3";

export function checkNodeName(node: string): void {
  if (!NODE_NAME.test(node)) {
    throw new PkiError("invalid-node-name", `node name ${JSON.stringify(node)} is not a lowercase RFC 1123 name (a-z, 0-9, '-', '.')`);
  }
}

export function checkGeneration(generation: number): void {
  if (!Number.isSafeInteger(generation) || generation < 1) {
    throw new PkiError("invalid-generation", `generation ${generation} is not a positive integer`);
  }
}

function commonName(cn: string): string {
  if (cn.length > MAX_CN) throw new PkiError("invalid-node-name", `common name ${cn} is longer than ${MAX_CN} characters`);
  return cn;
}

export function ldevidCommonName(node: string, generation: number): string {
  checkNodeName(node);
  checkGeneration(generation);
  return commonName(`${node}.g${generation}`);
}

export function lakCommonName(node: string, generation: number): string {
  checkNodeName(node);
  checkGeneration(generation);
  return commonName(`${node}.g${generation}.lak`);
}

/** The CN of a Name (the last CN attribute, as Go's pkix.Name does), or "" when there is none. */
export function commonNameOf(name: Name): string {
  return nameValues(name, OID_CN).at(-1) ?? "";
}
