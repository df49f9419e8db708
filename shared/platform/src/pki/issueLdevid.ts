/** LDevID certificate for SPIRE's tpm_devid: subject CN=<node>.g<generation> (profiles.ts has the profile). */
import { issueLeaf, type IssuedCertificate, type IssuingCa, type LeafRequest } from "./issueLeaf.js";
import { ldevidCommonName } from "./names.js";
import { LDEVID_PROFILE } from "./profiles.js";

export async function issueLdevidCertificate(ca: IssuingCa, request: LeafRequest): Promise<IssuedCertificate> {
  return issueLeaf(LDEVID_PROFILE, ca, request, ldevidCommonName(request.node, request.generation));
}
