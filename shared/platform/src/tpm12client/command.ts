/**
 * Marshalling a TPM 1.2 command and parsing its response from a Command12 declaration (../tpm12/commands.ts).
 * Authorization (TPM Main Part 1 §13, Part 3 §2): each session's authValue is
 *   HMAC-SHA1(key, SHA1(ordinal ‖ digested params) ‖ nonceEven ‖ nonceOdd ‖ continueAuthSession)
 * and the response's resAuth is the same over SHA1(returnCode ‖ ordinal ‖ digested out params) with the TPM's
 * new nonceEven. A non-zero return code is a Tpm12Error; anything malformed a ParseError naming the field.
 */
import { encode, Reader, Writer } from "@fleetd/verify/codec";
import { concat, digest, hmac } from "@fleetd/verify/crypto";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { type Command12, TPM12_TAG } from "@fleetd/verify/tpm12";
import { Tpm12Error } from "./rc.js";

export interface AuthTrailer {
  authHandle: number;
  nonceOdd: Uint8Array;
  continueAuthSession: boolean;
  authValue: Uint8Array;
}

export interface ResponseAuth {
  nonceEven: Uint8Array;
  continueAuthSession: boolean;
  resAuth: Uint8Array;
}

export interface Response12<R> {
  handles: number[];
  params: R;
  /** The digested output parameter bytes (for resAuth). */
  paramBytes: Uint8Array;
  auths: ResponseAuth[];
}

const REQUEST_TAGS = [TPM12_TAG.RQU_COMMAND, TPM12_TAG.RQU_AUTH1_COMMAND, TPM12_TAG.RQU_AUTH2_COMMAND] as const;
const RESPONSE_TAGS = [TPM12_TAG.RSP_COMMAND, TPM12_TAG.RSP_AUTH1_COMMAND, TPM12_TAG.RSP_AUTH2_COMMAND] as const;
const AUTH_TRAILER_OUT = 20 + 1 + 20;

const u32be = (n: number) => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n >>> 0);
  return b;
};

/** The digested input parameters of a command (what inParamDigest hashes after the ordinal). */
export function encodeParams<P, R>(spec: Command12<P, R>, params: P): Uint8Array {
  return encode(spec.params, params);
}

/** inParamDigest = SHA1(ordinal ‖ params). */
export function inParamDigest(ordinal: number, paramBytes: Uint8Array): Uint8Array {
  return digest(TPM_ALG.SHA1, u32be(ordinal), paramBytes);
}

/** outParamDigest = SHA1(returnCode ‖ ordinal ‖ params); returnCode is 0 for every response that carries auths. */
export function outParamDigest(ordinal: number, paramBytes: Uint8Array): Uint8Array {
  return digest(TPM_ALG.SHA1, u32be(0), u32be(ordinal), paramBytes);
}

/** An authorization HMAC (command authValue or response resAuth). */
export function authHmac(key: Uint8Array, paramDigest: Uint8Array, nonceEven: Uint8Array, nonceOdd: Uint8Array, continueAuthSession: boolean): Uint8Array {
  return hmac(TPM_ALG.SHA1, key, paramDigest, nonceEven, nonceOdd, Uint8Array.of(continueAuthSession ? 1 : 0));
}

export function marshalCommand12<P, R>(spec: Command12<P, R>, handles: readonly number[], paramBytes: Uint8Array, auths: readonly AuthTrailer[]): Uint8Array {
  if (handles.length !== spec.handles.length) throw new RangeError(`${spec.name} takes ${spec.handles.length} handles, got ${handles.length}`);
  if (auths.length !== spec.auths) throw new RangeError(`${spec.name} takes ${spec.auths} authorizations, got ${auths.length}`);
  const w = new Writer("be");
  w.u16(REQUEST_TAGS[spec.auths]);
  const setSize = w.placeholderU32();
  w.u32(spec.ordinal);
  for (const h of handles) w.u32(h);
  w.bytes(paramBytes);
  for (const a of auths) {
    if (a.nonceOdd.length !== 20 || a.authValue.length !== 20) throw new RangeError(`${spec.name}: nonceOdd and authValue are 20 bytes`);
    w.u32(a.authHandle).bytes(a.nonceOdd).u8(a.continueAuthSession ? 1 : 0).bytes(a.authValue);
  }
  setSize(w.length);
  return w.finish();
}

/** Parses a response to `spec`. Throws Tpm12Error for a TPM refusal and ParseError for a malformed response. */
export function parseResponse12<P, R>(spec: Command12<P, R>, resp: Uint8Array): Response12<R> {
  const r = new Reader(resp, "be", { path: [`${spec.name} response`] });
  const tag = r.field("tag", () => r.u16());
  const size = r.field("paramSize", () => r.u32());
  const rc = r.field("returnCode", () => r.u32());
  if (size !== resp.length) r.fail("invalid-value", `paramSize ${size} is not the response's length ${resp.length}`, 2);
  // An error response is a bare header; its code says why the command failed.
  if (rc !== 0) throw new Tpm12Error(rc, spec.name);
  const wantTag = RESPONSE_TAGS[spec.auths];
  if (tag !== wantTag) r.fail("invalid-value", `tag 0x${tag.toString(16)} is not 0x${wantTag.toString(16)} for a command with ${spec.auths} authorizations`, 0);
  const handles = spec.responseHandles.map((name) => r.field(name, () => r.u32()));
  const paramLen = r.remaining - AUTH_TRAILER_OUT * spec.auths;
  if (paramLen < 0) r.fail("truncated", `need ${AUTH_TRAILER_OUT * spec.auths} bytes of authorization, have ${r.remaining}`);
  const start = r.offset;
  const sub = r.field("parameters", () => r.sub(paramLen));
  const params = sub.field("parameters", () => spec.response.decode(sub));
  sub.field("parameters", () => sub.expectEnd());
  const paramBytes = resp.slice(start, start + paramLen);
  const auths: ResponseAuth[] = [];
  for (let i = 0; i < spec.auths; i++) {
    auths.push(
      r.field(`auth ${i + 1}`, () => {
        const nonceEven = r.field("nonceEven", () => r.bytes(20));
        const cont = r.field("continueAuthSession", () => r.u8());
        if (cont > 1) r.fail("invalid-value", `continueAuthSession ${cont} is not a BOOL`, r.offset - 1);
        const resAuth = r.field("resAuth", () => r.bytes(20));
        return { nonceEven, continueAuthSession: cont === 1, resAuth };
      }),
    );
  }
  r.expectEnd();
  return { handles, params, paramBytes, auths };
}

/** A bare error response (tests). */
export function errorResponse12(code: number): Uint8Array {
  return concat(Uint8Array.of(0x00, 0xc4), u32be(10), u32be(code));
}
