/**
 * Marshalling a command and parsing its response from a CommandSpec (Part 1 §18):
 *
 *   command  = tag ‖ commandSize ‖ commandCode ‖ handles ‖ [authorizationSize ‖ TPMS_AUTH_COMMAND…] ‖ parameters
 *   response = tag ‖ responseSize ‖ responseCode ‖ handles ‖ [parameterSize] ‖ parameters ‖ [TPMS_AUTH_RESPONSE…]
 *
 * The tag is TPM_ST_SESSIONS when the command carries sessions, and the response must then carry the same
 * tag, a parameterSize and one TPMS_AUTH_RESPONSE per session. A non-zero responseCode becomes a TpmError;
 * anything malformed becomes a ParseError naming the field (never a RangeError).
 */
import { encode, EncodeError, Reader, Writer } from "@fleetd/verify/codec";
import { TPM_ST } from "@fleetd/verify/tcg";
import {
  type CommandSpec,
  TPM_COMMAND_HEADER,
  TPM_HEADER_SIZE,
  TPM_RESPONSE_HEADER,
  TPMS_AUTH_COMMAND,
  TPMS_AUTH_RESPONSE,
} from "@fleetd/verify/tpm";
import { TpmError } from "./rc.js";

export interface CommandInput<P> {
  handles: readonly number[];
  /** One authorization per auth handle, in handle order. */
  sessions: readonly TPMS_AUTH_COMMAND[];
  params: P;
}

export interface CommandOutput<R> {
  handles: number[];
  params: R;
  sessions: TPMS_AUTH_RESPONSE[];
}

/** Marshals a command. Throws EncodeError for values that do not fit their declaration or handle/session counts. */
export function marshalCommand<P, R>(spec: CommandSpec<P, R>, input: CommandInput<P>): Uint8Array {
  if (input.handles.length !== spec.handles.length) {
    throw new EncodeError(spec.name, `takes ${spec.handles.length} handles (${spec.handles.join(", ")}), got ${input.handles.length}`);
  }
  if (input.sessions.length !== spec.authHandles) {
    throw new EncodeError(spec.name, `needs ${spec.authHandles} authorization sessions, got ${input.sessions.length}`);
  }
  const hasSessions = input.sessions.length > 0;
  const w = new Writer("be");
  w.field(spec.name, () => {
    w.u16(hasSessions ? TPM_ST.SESSIONS : TPM_ST.NO_SESSIONS);
    const setSize = w.placeholderU32();
    w.u32(spec.code);
    input.handles.forEach((h, i) => w.field(spec.handles[i] ?? String(i), () => w.u32(h)));
    if (hasSessions) {
      w.field("authorizationArea", () => {
        const setAuthSize = w.placeholderU32();
        const start = w.length;
        input.sessions.forEach((s, i) => w.field(String(i), () => TPMS_AUTH_COMMAND.encode(w, s)));
        setAuthSize(w.length - start);
      });
    }
    w.field("parameters", () => spec.params.encode(w, input.params));
    setSize(w.length);
  });
  return w.finish();
}

/** The response header alone (for transports and wrappers that only need the code and size). */
export function responseHeader(resp: Uint8Array): { tag: number; responseSize: number; responseCode: number } {
  const r = new Reader(resp, "be", { path: ["TPM_RESPONSE_HEADER"] });
  return TPM_RESPONSE_HEADER.decode(r);
}

/**
 * Parses a response to `spec` sent with `sessionCount` sessions. Throws TpmError for a TPM refusal and
 * ParseError for a malformed response.
 */
export function parseResponse<P, R>(spec: CommandSpec<P, R>, resp: Uint8Array, sessionCount: number): CommandOutput<R> {
  const r = new Reader(resp, "be", { path: [`${spec.name} response`] });
  const head = r.field("header", () => TPM_RESPONSE_HEADER.decode(r));
  if (head.responseSize !== resp.length) {
    r.fail("invalid-value", `responseSize ${head.responseSize} is not the response's length ${resp.length}`, 2);
  }
  if (head.responseCode !== 0) {
    // An error response is a bare header (Part 1 §18.4); trailing bytes would be a broken TPM, but the code
    // still says why the command failed, which is the more useful error.
    throw new TpmError(head.responseCode, spec.name);
  }
  const wantTag = sessionCount > 0 ? TPM_ST.SESSIONS : TPM_ST.NO_SESSIONS;
  if (head.tag !== wantTag) {
    r.fail("invalid-value", `tag 0x${head.tag.toString(16)} does not match the command's 0x${wantTag.toString(16)}`, 0);
  }
  const handles = spec.responseHandles.map((name) => r.field(name, () => r.u32()));
  let params: R;
  const sessions: TPMS_AUTH_RESPONSE[] = [];
  if (sessionCount > 0) {
    const size = r.field("parameterSize", () => r.u32());
    const sub = r.field("parameters", () => r.sub(size));
    params = sub.field("parameters", () => spec.response.decode(sub));
    sub.field("parameters", () => sub.expectEnd());
    for (let i = 0; i < sessionCount; i++) sessions.push(r.field(`authorizationArea.${i}`, () => TPMS_AUTH_RESPONSE.decode(r)));
  } else {
    params = r.field("parameters", () => spec.response.decode(r));
  }
  r.expectEnd();
  return { handles, params, sessions };
}

/** Encodes a response (tests and the flush-on-close transport synthesize them). */
export function errorResponse(code: number): Uint8Array {
  return encode(TPM_RESPONSE_HEADER, { tag: TPM_ST.NO_SESSIONS, responseSize: TPM_HEADER_SIZE, responseCode: code });
}

/** Reads a command's header (code and size) without trusting anything else in it. */
export function commandHeader(cmd: Uint8Array): { tag: number; commandSize: number; commandCode: number } {
  return TPM_COMMAND_HEADER.decode(new Reader(cmd, "be", { path: ["TPM_COMMAND_HEADER"] }));
}

