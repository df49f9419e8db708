/**
 * The kernel's TPM character devices: `/dev/tpmrm0` (the in-kernel resource manager: transient objects and
 * sessions a file descriptor created are flushed when it is closed, and handles are virtualized per descriptor)
 * or `/dev/tpm0` (the raw TPM, one user at a time). The protocol is: write() the whole command in one call,
 * then read() the response; the driver returns it whole, but this reader also copes with a device that hands it
 * over in pieces (a pty in the tests), reading until responseSize bytes are there.
 *
 * Reads and writes run on libuv's thread pool (blocking I/O on a character device), one command at a time.
 */
import { open, type FileHandle } from "node:fs/promises";
import {
  checkCommandFrame,
  DEFAULT_COMMAND_TIMEOUT_MS,
  MAX_TPM_MESSAGE,
  ResponseAssembler,
  TpmTransportError,
  type TpmTransport,
} from "./transport.js";
import { SerialQueue } from "../pki/serialQueue.js";

export interface DeviceTransportOptions {
  /** Time allowed for one command; on expiry the device is closed (a blocked read cannot be cancelled). */
  timeoutMs?: number;
}

export class DeviceTransport implements TpmTransport {
  private fh: FileHandle | undefined;
  private closed = false;
  private readonly queue = new SerialQueue();
  private readonly timeoutMs: number;

  constructor(
    readonly path = "/dev/tpmrm0",
    opts: DeviceTransportOptions = {},
  ) {
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
  }

  send(command: Uint8Array): Promise<Uint8Array> {
    return this.queue.run(() => this.exchange(command));
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.queue.run(async () => {
      const fh = this.fh;
      this.fh = undefined;
      await fh?.close();
    });
  }

  private async openDevice(): Promise<FileHandle> {
    let fh: FileHandle;
    try {
      fh = await open(this.path, "r+");
    } catch (e) {
      throw new TpmTransportError("connect-failed", `${this.path}: ${e instanceof Error ? e.message : String(e)}`);
    }
    const st = await fh.stat();
    if (!st.isCharacterDevice()) {
      await fh.close();
      throw new TpmTransportError("connect-failed", `${this.path} is not a character device`);
    }
    this.fh = fh;
    return fh;
  }

  private async exchange(command: Uint8Array): Promise<Uint8Array> {
    if (this.closed) throw new TpmTransportError("closed", `${this.path}: transport is closed`);
    checkCommandFrame(command);
    const fh = this.fh ?? (await this.openDevice());
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        // The stream is out of step; drop the descriptor (the kernel RM then flushes what it held).
        this.fh = undefined;
        void fh.close().catch(() => undefined);
        reject(new TpmTransportError("timeout", `${this.path}: no complete response within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
    });
    try {
      return await Promise.race([this.roundTrip(fh, command), timeout]);
    } catch (e) {
      if (this.fh === fh) {
        this.fh = undefined;
        await fh.close().catch(() => undefined);
      }
      if (e instanceof TpmTransportError) throw e;
      throw new TpmTransportError("io", `${this.path}: ${e instanceof Error ? e.message : String(e)}`);
    } finally {
      clearTimeout(timer);
    }
  }

  private async roundTrip(fh: FileHandle, command: Uint8Array): Promise<Uint8Array> {
    let written = 0;
    while (written < command.length) {
      const { bytesWritten } = await fh.write(command, written, command.length - written);
      if (bytesWritten <= 0) throw new TpmTransportError("io", `${this.path}: write made no progress`);
      written += bytesWritten;
    }
    const assembler = new ResponseAssembler();
    const buf = new Uint8Array(MAX_TPM_MESSAGE);
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) {
        throw new TpmTransportError("closed", `${this.path}: end of file after ${assembler.received} response bytes`);
      }
      const resp = assembler.push(buf.slice(0, bytesRead));
      if (resp) return resp;
    }
  }
}
