/**
 * Certify verification (TPM2_Certify, Part 3 §18.2): the AK vouches that an object with a given public
 * area lives in the same TPM. Checks the AK's signature, the magic, the CERTIFY type, that the certified
 * Name equals the Name of the supplied public area (computed over its exact bytes), and extraData equal to
 * what the caller expects (the protocol binds it to the session; there is no way to skip it).
 */
import { ctEqual, hex } from "../crypto/hash.js";
import { TPM_GENERATED_VALUE } from "../tcg/constants.js";
import { objectName } from "../tpm/name.js";
import { TPMS_ATTEST, TPMT_PUBLIC, TPMT_SIGNATURE, type TPMS_ATTEST as Attest, type TPMT_PUBLIC as Public } from "../tpm/structures.js";
import { parseInto } from "./parseEvidence.js";
import { Checks, type Verdict } from "./verdict.js";
import { verifyTpmSignature, type SignatureOptions } from "./verifySignature.js";

export interface CertifyInput {
  akPublic: Public;
  /** Marshalled TPMT_PUBLIC of the certified object, exactly as the TPM holds it. */
  objectPublic: Uint8Array;
  /** Marshalled TPMS_ATTEST of type CERTIFY. */
  attest: Uint8Array;
  /** Marshalled TPMT_SIGNATURE. */
  signature: Uint8Array;
  expectedExtraData: Uint8Array;
  signature_options?: SignatureOptions;
}

export interface CertifyResult extends Verdict {
  attest?: Attest;
  object?: Public;
}

export function verifyCertify(input: CertifyInput): CertifyResult {
  const c = new Checks();
  const attest = parseInto(c, "certify.parse", TPMS_ATTEST, input.attest);
  const object = parseInto(c, "certify.object.parse", TPMT_PUBLIC, input.objectPublic);
  const sig = parseInto(c, "certify.signature.parse", TPMT_SIGNATURE, input.signature);
  if (sig) verifyTpmSignature(c, "certify.signature", input.akPublic, input.attest, sig, input.signature_options);
  if (!attest) return c.verdict();
  c.check(attest.magic === TPM_GENERATED_VALUE, "certify.magic", `magic is 0x${attest.magic.toString(16)}, not TPM_GENERATED_VALUE`);
  if (!c.check(attest.attested.kind === "certify", "certify.type", `attestation type is ${attest.attested.kind}, not certify`)) {
    return { ...c.verdict(), attest };
  }
  c.check(
    ctEqual(attest.extraData, input.expectedExtraData),
    "certify.extraData",
    `extraData ${hex(attest.extraData) || "(empty)"} is not the expected ${hex(input.expectedExtraData) || "(empty)"}`,
  );
  if (object && attest.attested.kind === "certify") {
    const name = objectName(input.objectPublic);
    c.check(
      ctEqual(name, attest.attested.name),
      "certify.name",
      `certified Name ${hex(attest.attested.name)} is not the Name of the supplied public area (${hex(name)})`,
    );
  }
  return { ...c.verdict(), attest, ...(object ? { object } : {}) };
}
