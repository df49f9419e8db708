/** LAK certificate: subject CN=<node>.g<generation>.lak, EKU tcg-kp-AIKCertificate (profiles.ts). */
import { issueLeaf, type IssuedCertificate, type IssuingCa, type LeafRequest } from "./issueLeaf.js";
import { lakCommonName } from "./names.js";
import { LAK_PROFILE } from "./profiles.js";

export async function issueLakCertificate(ca: IssuingCa, request: LeafRequest): Promise<IssuedCertificate> {
  return issueLeaf(LAK_PROFILE, ca, request, lakCommonName(request.node, request.generation));
}
