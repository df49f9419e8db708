/**
 * The internal issuance call between replicas (POST /internal/v1/issue on the internal listener, documented in openapi-internal.yaml): the
 * follower sends what the protocol's Issuer gets (node, generation, the certified LDevID and LAK public areas
 * as marshalled TPMT_PUBLIC, hex), the leader answers with the two certificates (DER, base64) and the bundle.
 */
import { z } from "zod";
import { decodeExact, encode } from "@fleetd/verify/codec";
import type { Issued, Issuer } from "@fleetd/platform/fleet";
import { TPMT_PUBLIC } from "@fleetd/verify/tpm";

export const ISSUE_PATH = "/internal/v1/issue";
/** A TPMT_PUBLIC is at most a few hundred bytes; with JSON around it the body stays far below this. */
export const MAX_ISSUE_BODY_BYTES = 16 * 1024;

export type IssueRequest = Parameters<Issuer["issue"]>[0];
export type IssueResult = Awaited<ReturnType<Issuer["issue"]>>;

const PublicHex = (key: string) => z.string().regex(/^([0-9a-f]{2}){1,1024}$/, "TPMT_PUBLIC, lowercase hex, at most 1024 bytes").meta({ description: `The certified ${key}'s TPMT_PUBLIC, hex.` });
/** A certificate serial the follower reserved (the DER INTEGER's bytes, hex; the leader checks it is positive and minimal). */
const SerialHex = z.string().regex(/^([0-9a-f]{2}){1,20}$/, "a serial number, lowercase hex, at most 20 bytes");
export const IssueRequestBody = z.strictObject({
  node: z.string().min(1).max(253),
  generation: z.number().int().min(1).max(1_000_000),
  ldevid: PublicHex("LDevID"),
  lak: PublicHex("LAK"),
  serials: z
    .strictObject({ ldevid: SerialHex, lak: SerialHex })
    .optional()
    .meta({
      description:
        "The serial numbers the follower reserved (recorded void) before asking: the certificates carry them, so a signature whose step never records its verdict is already listed as void.",
    }),
});

const B64 = z.string().regex(/^[A-Za-z0-9+/]+={0,2}$/).max(16_384).meta({ contentEncoding: "base64", description: "The certificate, DER, base64." });
export const IssuedBody = z.strictObject({ der: B64, serialHex: z.string().regex(/^[0-9a-f]{2,64}$/), notAfter: z.iso.datetime() });
export const IssueResponseBody = z.strictObject({ ldevid: IssuedBody, lak: IssuedBody, bundlePem: z.string().min(1).max(262_144) });

/** Refusals of the internal endpoint: `{ error, detail }`. */
export const IssueErrorBody = z.strictObject({
  error: z.enum(["peer-auth", "bad-request", "not-leader", "signer-unavailable", "internal"]),
  detail: z.string().max(2000),
});

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const unhex = (s: string) => new Uint8Array(Buffer.from(s, "hex"));

export function toWire(req: IssueRequest): z.infer<typeof IssueRequestBody> {
  return { node: req.node, generation: req.generation, ldevid: hex(encode(TPMT_PUBLIC, req.ldevid)), lak: hex(encode(TPMT_PUBLIC, req.lak)), ...(req.serials ? { serials: req.serials } : {}) };
}

/** Throws ParseError (from the codec) on a public area that does not decode exactly. */
export function fromWire(w: z.infer<typeof IssueRequestBody>): IssueRequest {
  return { node: w.node, generation: w.generation, ldevid: decodeExact(TPMT_PUBLIC, unhex(w.ldevid)), lak: decodeExact(TPMT_PUBLIC, unhex(w.lak)), ...(w.serials ? { serials: w.serials } : {}) };
}

const issuedToWire = (i: Issued) => ({ der: Buffer.from(i.der).toString("base64"), serialHex: i.serialHex, notAfter: i.notAfter.toISOString() });
const issuedFromWire = (i: z.infer<typeof IssuedBody>): Issued => ({ der: new Uint8Array(Buffer.from(i.der, "base64")), serialHex: i.serialHex, notAfter: new Date(i.notAfter) });

export function resultToWire(r: IssueResult): z.infer<typeof IssueResponseBody> {
  return { ldevid: issuedToWire(r.ldevid), lak: issuedToWire(r.lak), bundlePem: r.bundlePem };
}
export function resultFromWire(w: z.infer<typeof IssueResponseBody>): IssueResult {
  return { ldevid: issuedFromWire(w.ldevid), lak: issuedFromWire(w.lak), bundlePem: w.bundlePem };
}
