/**
 * TPM 1.2 quote verification (TPM Main Part 3 §16.1 TPM_Quote, Part 2 §11.3 TPM_QUOTE_INFO): fleetd rebuilds
 * TPM_QUOTE_INFO = 1.1.0.0 ‖ "QUOT" ‖ SHA-1(TPM_PCR_COMPOSITE) ‖ externalData from the composite the machine sent
 * and the externalData the server expects, and checks the AIK's RSASSA-PKCS1-v1_5-SHA1 signature over it. So a
 * changed PCR value, selection or nonce fails the signature: the machine cannot choose any of them. The values
 * then come out as SHA-1 PcrValues for the event-log replay and the profile.
 *
 * SHA-1 is all a TPM 1.2 has. The signature's SHA-1 would need a chosen-prefix collision on a structure whose
 * 20-byte externalData the server picks fresh each time; the PCR values rely on second-preimage resistance of
 * the extend chain, which SHA-1 still has (talos-config-server/README.md, "TPM 1.2 machines"). Pure; no I/O.
 */
import { constants, verify } from "node:crypto";
import { decodeExact, encode, ParseError } from "../codec/codec.js";
import { concat, digest } from "../crypto/hash.js";
import type { PcrValues } from "../attest/pcrs.js";
import { Checks, type Verdict } from "../attest/verdict.js";
import { TPM_ALG } from "../tcg/constants.js";
import type { Rsa12Key } from "../tpm12/keys.js";
import { TPM_PCR_COMPOSITE, TPM_QUOTE_INFO, TPM_STRUCT_VER_1_1 } from "../tpm12/structures.js";

export const QUOT = new TextEncoder().encode("QUOT");

export interface Quote12Input {
  /** The AIK (trusted by TPM_ActivateIdentity). */
  aik: Rsa12Key;
  /** Marshalled TPM_PCR_COMPOSITE as TPM_Quote returned it. */
  pcrComposite: Uint8Array;
  signature: Uint8Array;
  /** The 20 bytes the server expects as externalData (binding its nonce, the session and the claims). */
  expectedExternalData: Uint8Array;
}

export interface Quote12Result extends Verdict {
  /** SHA-1 values of the quoted PCRs (only on pass). */
  pcrs?: PcrValues;
}

/** TPM_QUOTE_INFO bytes for a composite and externalData: what the AIK signs. */
export function quoteInfo(pcrComposite: Uint8Array, externalData: Uint8Array): Uint8Array {
  return encode(TPM_QUOTE_INFO, { version: TPM_STRUCT_VER_1_1, fixed: QUOT, digestValue: digest(TPM_ALG.SHA1, pcrComposite), externalData });
}

export function verifyQuote12(input: Quote12Input): Quote12Result {
  const c = new Checks();
  if (!c.check(input.expectedExternalData.length === 20, "quote12.externalData", `expected externalData is ${input.expectedExternalData.length} bytes, not 20`)) return c.verdict();
  let composite;
  try {
    composite = decodeExact(TPM_PCR_COMPOSITE, input.pcrComposite);
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
    c.fail("quote12.parse", e.message);
    return c.verdict();
  }
  const info = quoteInfo(input.pcrComposite, input.expectedExternalData);
  const sigOk =
    input.signature.length === input.aik.bits / 8 &&
    verify("sha1", info, { key: input.aik.key, padding: constants.RSA_PKCS1_PADDING }, input.signature);
  if (!c.check(sigOk, "quote12.signature", "the AIK's signature does not verify over TPM_QUOTE_INFO with the quoted PCRs and the expected externalData (wrong nonce, session or claims, changed PCR values, or another key)")) {
    return c.verdict();
  }
  const pcrsSelected: number[] = [];
  composite.select.forEach((byte, i) => {
    for (let bit = 0; bit < 8; bit++) if (byte & (1 << bit)) pcrsSelected.push(i * 8 + bit);
  });
  if (!c.check(pcrsSelected.length > 0, "quote12.pcrSelect", "the quote selects no PCRs")) return c.verdict();
  if (!c.check(composite.pcrValue.length === 20 * pcrsSelected.length, "quote12.pcrValue", `${composite.pcrValue.length} bytes of PCR values for ${pcrsSelected.length} selected PCRs (need 20 each)`)) {
    return c.verdict();
  }
  const values = new Map<number, Uint8Array>();
  pcrsSelected.forEach((p, i) => values.set(p, composite.pcrValue.slice(20 * i, 20 * i + 20)));
  return { ...c.verdict(), pcrs: new Map([[TPM_ALG.SHA1, values]]) };
}

/** The composite a TPM builds for these SHA-1 values (tests, and the client's own check of what it quoted). */
export function pcrComposite(values: Map<number, Uint8Array>): Uint8Array {
  const sorted = [...values].sort((a, b) => a[0] - b[0]);
  const select = new Uint8Array(3);
  for (const [p] of sorted) select[p >> 3] = (select[p >> 3] ?? 0) | (1 << (p & 7));
  return encode(TPM_PCR_COMPOSITE, { select, pcrValue: concat(...sorted.map(([, v]) => v)) });
}
