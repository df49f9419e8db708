/**
 * A transport carries one complete TPM command to a TPM and brings back one complete response. All transports
 * frame responses the same way: the 10-byte header's responseSize says how many bytes belong to the response.
 * Commands on one transport are serialized (a TPM connection runs one command at a time).
 */

export interface TpmTransport {
  /** Send one marshalled command; resolves with the marshalled response (header included). */
  send(command: Uint8Array): Promise<Uint8Array>;
  /** Close the connection. A closed transport refuses further commands. */
  close(): Promise<void>;
}

export type TransportErrorCode =
  | "connect-failed"
  | "closed"
  | "timeout"
  | "io"
  | "bad-frame"
  | "unknown-handle";

/** The path to the TPM failed or broke its framing (not a TPM response code: see TpmError for those). */
export class TpmTransportError extends Error {
  override readonly name = "TpmTransportError";
  constructor(
    readonly code: TransportErrorCode,
    readonly detail: string,
  ) {
    super(`TPM transport ${code}: ${detail}`);
  }
}

/** Largest command or response fleetd accepts. TPMs report MAX_COMMAND/RESPONSE_SIZE of 4096 or less. */
export const MAX_TPM_MESSAGE = 16384;
const HEADER = 10;

/**
 * Collects bytes until one whole response is there. Returns the response once complete; bytes beyond it
 * (a TPM never sends any) are a framing error, as are a responseSize below the header size or above
 * MAX_TPM_MESSAGE.
 */
export class ResponseAssembler {
  private chunks: Uint8Array[] = [];
  private have = 0;
  private want: number | undefined;

  /** Adds a chunk; returns the whole response when complete. Throws TpmTransportError("bad-frame"). */
  push(chunk: Uint8Array): Uint8Array | undefined {
    this.chunks.push(chunk);
    this.have += chunk.length;
    if (this.want === undefined && this.have >= HEADER) {
      const head = this.concat();
      const size = ((head[2] ?? 0) * 2 ** 24) + (((head[3] ?? 0) << 16) | ((head[4] ?? 0) << 8) | (head[5] ?? 0));
      if (size < HEADER) throw new TpmTransportError("bad-frame", `responseSize ${size} is smaller than the 10-byte header`);
      if (size > MAX_TPM_MESSAGE) throw new TpmTransportError("bad-frame", `responseSize ${size} exceeds ${MAX_TPM_MESSAGE}`);
      this.want = size;
    }
    if (this.want === undefined || this.have < this.want) return undefined;
    if (this.have > this.want) {
      throw new TpmTransportError("bad-frame", `${this.have - this.want} bytes arrived after a ${this.want}-byte response`);
    }
    return this.concat();
  }

  /** Bytes received so far (for error messages). */
  get received(): number {
    return this.have;
  }

  private concat(): Uint8Array {
    if (this.chunks.length === 1) return this.chunks[0] ?? new Uint8Array(0);
    const out = new Uint8Array(this.have);
    let at = 0;
    for (const c of this.chunks) {
      out.set(c, at);
      at += c.length;
    }
    this.chunks = [out];
    return out;
  }
}

/** Checks a command before it is sent: at least a header, commandSize equal to its length, not too large. */
export function checkCommandFrame(command: Uint8Array): void {
  if (command.length < HEADER) throw new TpmTransportError("bad-frame", `command of ${command.length} bytes is shorter than a header`);
  if (command.length > MAX_TPM_MESSAGE) throw new TpmTransportError("bad-frame", `command of ${command.length} bytes exceeds ${MAX_TPM_MESSAGE}`);
  const size = new DataView(command.buffer, command.byteOffset, command.byteLength).getUint32(2);
  if (size !== command.length) throw new TpmTransportError("bad-frame", `commandSize ${size} is not the command's length ${command.length}`);
}

/** Default time one command may take before the connection is given up (RSA key generation can be slow). */
export const DEFAULT_COMMAND_TIMEOUT_MS = 120_000;
