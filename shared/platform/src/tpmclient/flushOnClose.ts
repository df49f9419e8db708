/**
 * A transport that behaves like a resource manager toward one client, the way `/dev/tpmrm0` (and tpm2-abrmd)
 * do: transient objects and sessions created through this connection are flushed when it closes, and a
 * transient or session handle this connection did not create (e.g. one left over from an earlier connection)
 * is refused with TPM_RC_HANDLE instead of silently reaching whatever object the TPM now has under that number.
 *
 * It sits in front of a raw TPM (swtpm's socket), so tests run the protocol as it runs on a real machine:
 * keep blobs, close, reconnect, reload. Unlike the kernel it does not virtualize handle numbers or swap
 * contexts out; it only tracks. Commands it has no declaration for (../tpm/commands.ts) pass through unchecked.
 */
import { Reader } from "@fleetd/verify/codec";
import { COMMANDS, TPM_CC, TPM_HT, TPM2_FlushContext, TPMA_SESSION, TPMS_AUTH_COMMAND } from "@fleetd/verify/tpm";
import { TPM_ST } from "@fleetd/verify/tcg";
import { commandHeader, errorResponse, marshalCommand, responseHeader } from "./command.js";
import type { TpmTransport } from "./transport.js";

/** Commands whose first response handle is a new transient object or session. */
const CREATES_HANDLE = new Set<number>([
  TPM_CC.CreatePrimary,
  TPM_CC.Load,
  TPM_CC.LoadExternal,
  TPM_CC.CreateLoaded,
  TPM_CC.ContextLoad,
  TPM_CC.StartAuthSession,
]);

const RC_HANDLE = 0x08b;
const RC_P = 0x040;
const RC_S = 0x800;

function isTracked(h: number): boolean {
  const ht = h >>> 24;
  return ht === TPM_HT.TRANSIENT || ht === TPM_HT.HMAC_SESSION || ht === TPM_HT.POLICY_SESSION;
}

interface Inspected {
  code: number;
  /** Handles in the handle area that must belong to this connection, with their 1-based position. */
  handles: { handle: number; rc: number }[];
  /** Sessions this command ends when it succeeds (continueSession clear). */
  ending: number[];
  /** For FlushContext: the handle it flushes. */
  flushes?: number;
}

function inspect(cmd: Uint8Array): Inspected | undefined {
  try {
    const head = commandHeader(cmd);
    const spec = COMMANDS.get(head.commandCode);
    if (!spec) return undefined;
    const r = new Reader(cmd, "be", { start: 10, path: ["command"] });
    const handles: Inspected["handles"] = spec.handles.map((_, i) => ({ handle: r.u32(), rc: RC_HANDLE + ((i + 1) << 8) }));
    const ending: number[] = [];
    if (head.tag === TPM_ST.SESSIONS) {
      const authEnd = r.u32() + r.offset;
      for (let n = 1; r.offset < authEnd && n <= 3; n++) {
        const auth = TPMS_AUTH_COMMAND.decode(r);
        if (isTracked(auth.sessionHandle)) {
          handles.push({ handle: auth.sessionHandle, rc: RC_HANDLE + RC_S + (n << 8) });
          if (!(auth.sessionAttributes & TPMA_SESSION.continueSession)) ending.push(auth.sessionHandle);
        }
      }
    }
    if (head.commandCode === TPM_CC.FlushContext) {
      const flushes = r.u32();
      handles.push({ handle: flushes, rc: RC_HANDLE + RC_P + (1 << 8) });
      return { code: head.commandCode, handles, ending, flushes };
    }
    return { code: head.commandCode, handles, ending };
  } catch {
    return undefined; // malformed: let the TPM refuse it
  }
}

export class FlushOnCloseTransport implements TpmTransport {
  private readonly owned = new Set<number>();
  private closing: Promise<void> | undefined;

  constructor(readonly inner: TpmTransport) {}

  /** Handles this connection holds (for tests and diagnostics). */
  get handles(): number[] {
    return [...this.owned];
  }

  async send(command: Uint8Array): Promise<Uint8Array> {
    const seen = inspect(command);
    if (seen) {
      const foreign = seen.handles.find((h) => isTracked(h.handle) && !this.owned.has(h.handle));
      if (foreign) return errorResponse(foreign.rc);
    }
    const resp = await this.inner.send(command);
    if (!seen) return resp;
    let ok = false;
    try {
      ok = responseHeader(resp).responseCode === 0;
    } catch {
      return resp;
    }
    if (!ok) return resp;
    for (const s of seen.ending) this.owned.delete(s);
    if (seen.flushes !== undefined) this.owned.delete(seen.flushes);
    if (CREATES_HANDLE.has(seen.code) && resp.length >= 14) {
      const h = new DataView(resp.buffer, resp.byteOffset, resp.byteLength).getUint32(10);
      if (isTracked(h)) this.owned.add(h);
    }
    return resp;
  }

  /** Flushes what this connection still holds, then closes the inner transport. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const h of [...this.owned]) {
        const cmd = marshalCommand(TPM2_FlushContext, { handles: [], sessions: [], params: { flushHandle: h } });
        try {
          await this.inner.send(cmd);
        } catch {
          // the connection is already gone; nothing more can be flushed through it
          break;
        }
        this.owned.delete(h);
      }
      await this.inner.close();
    })();
    return this.closing;
  }
}
