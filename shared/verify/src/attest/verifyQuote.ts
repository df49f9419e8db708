/**
 * Quote verification (TPM2_Quote, Part 3 §18.4): the AK's signature over the exact TPMS_ATTEST bytes, the
 * TPM's magic, the QUOTE type, extraData equal to what the caller expects, the quoted PCR selection equal
 * to the values supplied, every supplied value exactly its bank's digest size, and pcrDigest = H_sig(values
 * in selection order) where H_sig is the *signing* hash. The caller always supplies the expected extraData:
 * there is no way to skip that check.
 *
 * The size check is what makes pcrDigest bind each value to its (bank, PCR): pcrDigest covers only the
 * concatenation, so values of any other length let the machine choose where one value ends and the next
 * begins — e.g. present real SHA-384 PCR 8–15 values as "SHA-384 PCRs 0–7" by giving the SHA-256 values
 * 48 bytes each (issue 10). It is checked here, whatever the caller validated before.
 */
import { bufferOf, ctEqual, digest, hex } from "../crypto/hash.js";
import { algName, DIGEST_SIZES, TPM_GENERATED_VALUE, TPM_ST } from "../tcg/constants.js";
import { TPMS_ATTEST, TPMT_SIGNATURE, type TPMS_ATTEST as Attest, type TPMT_PUBLIC } from "../tpm/structures.js";
import { parseInto } from "./parseEvidence.js";
import { bankName, orderedValues, selectionFromBitmaps, type PcrSelection, type PcrValues } from "./pcrs.js";
import { Checks, type Verdict } from "./verdict.js";
import { verifyTpmSignature, type SignatureOptions } from "./verifySignature.js";

export interface QuoteInput {
  /** The AK's public area (already trusted by credential activation or certificate). */
  akPublic: TPMT_PUBLIC;
  /** Marshalled TPMS_ATTEST exactly as the TPM signed it. */
  quote: Uint8Array;
  /** Marshalled TPMT_SIGNATURE. */
  signature: Uint8Array;
  /** The PCR values the quote is claimed to cover. */
  pcrs: PcrValues;
  /** The qualifying data the verifier asked for (the nonce, or a hash binding it to a session). */
  expectedExtraData: Uint8Array;
  signature_options?: SignatureOptions;
}

export interface QuoteResult extends Verdict {
  attest?: Attest;
  selection?: PcrSelection[];
}

const TPM_QUOTE_INFO_START = Buffer.from("0101000051554f54", "hex");
const TPM_QUOTE_INFO2_START = Buffer.from("003651555432", "hex");

/**
 * TPM 1.2 quotes are TPM_QUOTE_INFO (version 1.1.0.0 ‖ "QUOT") or TPM_QUOTE_INFO2 (tag 0x0036 ‖ "QUT2");
 * they carry no TPM_GENERATED_VALUE and no PCR digest of a chosen bank. This verifier takes TPM 2.0 quotes only; TPM 1.2
 * quotes are verified by attest12/verifyQuote12.ts (the TPM 1.2 protocol, intake and wipe only).
 */
export function isTpm12Quote(bytes: Uint8Array): boolean {
  const b = bufferOf(bytes.subarray(0, 8));
  return b.equals(TPM_QUOTE_INFO_START) || b.subarray(0, 6).equals(TPM_QUOTE_INFO2_START);
}

export function verifyQuote(input: QuoteInput): QuoteResult {
  const c = new Checks();
  if (isTpm12Quote(input.quote)) {
    c.fail("quote.tpmVersion", "this is a TPM 1.2 quote (TPM_QUOTE_INFO); the TPM 2.0 protocol accepts TPM 2.0 evidence only (a TPM 1.2 machine uses /v1/attest/tpm12, for intake and wipe)");
    return c.verdict();
  }
  const attest = parseInto(c, "quote.parse", TPMS_ATTEST, input.quote);
  const sig = parseInto(c, "quote.signature.parse", TPMT_SIGNATURE, input.signature);
  if (sig) verifyTpmSignature(c, "quote.signature", input.akPublic, input.quote, sig, input.signature_options);
  if (!attest) return c.verdict();

  c.check(attest.magic === TPM_GENERATED_VALUE, "quote.magic", `magic is 0x${attest.magic.toString(16)}, not TPM_GENERATED_VALUE`);
  if (!c.check(attest.attested.kind === "quote", "quote.type", `attestation type is ${attest.attested.kind}, not a quote`)) {
    return c.verdict();
  }
  c.check(
    ctEqual(attest.extraData, input.expectedExtraData),
    "quote.extraData",
    `extraData ${hex(attest.extraData) || "(empty)"} is not the expected ${hex(input.expectedExtraData) || "(empty)"}`,
  );
  if (attest.attested.kind !== "quote") return c.verdict();
  const selection = selectionFromBitmaps(attest.attested.pcrSelect).filter((s) => s.pcrs.length > 0);
  checkSelectionMatches(c, selection, input.pcrs);
  checkValueSizes(c, input.pcrs);
  if (sig && c.ok) {
    const ordered = orderedValues(selection, input.pcrs);
    if (Array.isArray(ordered)) {
      const expected = digest(sig.signature.hash, ...ordered);
      c.check(
        ctEqual(expected, attest.attested.pcrDigest),
        "quote.pcrDigest",
        `pcrDigest ${hex(attest.attested.pcrDigest)} does not match the supplied PCR values (${algName(sig.signature.hash)} over them is ${hex(expected)})`,
      );
    }
  }
  return { ...c.verdict(), attest, selection };
}

/** The quoted selection and the supplied values must name exactly the same (bank, PCR) pairs. */
function checkSelectionMatches(c: Checks, selection: PcrSelection[], values: PcrValues): void {
  const quoted = new Map<number, Set<number>>(); // bank → PCRs, in selection order
  for (const s of selection) {
    if (!c.check(!quoted.has(s.hash), "quote.pcrSelect", `bank ${bankName(s.hash)} appears twice in the quote's selection`)) return;
    quoted.set(s.hash, new Set(s.pcrs));
  }
  const notSupplied: string[] = [];
  for (const [bank, pcrs] of quoted) for (const p of pcrs) if (!values.get(bank)?.has(p)) notSupplied.push(`${bankName(bank)}:${p}`);
  const notQuoted: string[] = [];
  for (const [bank, m] of values) for (const p of m.keys()) if (!quoted.get(bank)?.has(p)) notQuoted.push(`${bankName(bank)}:${p}`);
  c.check(notSupplied.length === 0, "quote.pcrSelect", `quoted PCRs without a supplied value: ${notSupplied.join(", ")}`);
  c.check(notQuoted.length === 0, "quote.pcrSelect", `supplied PCR values the quote does not cover: ${notQuoted.join(", ")}`);
  c.check([...quoted.values()].some((p) => p.size > 0), "quote.pcrSelect", "the quote selects no PCRs");
}

/**
 * Every supplied value has exactly the digest size of its bank (a PCR of a bank is never shorter or longer).
 * One reason per bank, naming each PCR whose value has another length.
 */
function checkValueSizes(c: Checks, values: PcrValues): void {
  for (const [bank, m] of [...values].sort((a, b) => a[0] - b[0])) {
    const size = DIGEST_SIZES[bank];
    const pcrs = [...m].sort((a, b) => a[0] - b[0]);
    if (size === undefined) {
      c.fail("quote.pcrValueSize", `bank ${algName(bank)} has no known digest size, so its values (PCRs ${pcrs.map(([p]) => p).join(", ")}) cannot be told apart`);
      continue;
    }
    const wrong = pcrs.filter(([, v]) => v.length !== size);
    const first = wrong[0];
    c.check(
      first === undefined,
      "quote.pcrValueSize",
      `a ${bankName(bank)} PCR value is exactly ${size} bytes; ${wrong.map(([p, v]) => `${bankName(bank)}:${p} is ${v.length}`).join(", ")}`,
      first && wrong.length === 1 ? { pcr: first[0] } : {},
    );
  }
}

export { TPM_ST };
