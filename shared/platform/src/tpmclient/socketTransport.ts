/**
 * TPM command streams over a socket: swtpm's `--server type=tcp,port=P` and `--server type=unixio,path=…` are
 * the plain TPM 2.0 command/response byte stream (a command's bytes in, the response's bytes out, no extra
 * framing — unlike the Microsoft simulator's "platform" protocol with its u32 command prefix). One persistent
 * connection carries every command; it is opened on the first command.
 *
 * swtpm does not flush transient objects when a connection closes (the kernel's /dev/tpmrm0 does); wrap the
 * transport in FlushOnCloseTransport to get that behaviour.
 */
import { connect, type Socket } from "node:net";
import {
  checkCommandFrame,
  DEFAULT_COMMAND_TIMEOUT_MS,
  ResponseAssembler,
  TpmTransportError,
  type TpmTransport,
} from "./transport.js";
import { SerialQueue } from "../pki/serialQueue.js";

export interface SocketTransportOptions {
  /** Time allowed for one command (connect included); on expiry the connection is dropped. */
  timeoutMs?: number;
}

type Endpoint = { host: string; port: number } | { path: string };

abstract class SocketTransport implements TpmTransport {
  private socket: Socket | undefined;
  private closed = false;
  private readonly queue = new SerialQueue();
  private readonly timeoutMs: number;

  protected constructor(
    private readonly endpoint: Endpoint,
    opts: SocketTransportOptions,
  ) {
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
  }

  /** Where this transport connects, for messages. */
  abstract get address(): string;

  send(command: Uint8Array): Promise<Uint8Array> {
    return this.queue.run(() => this.exchange(command));
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.queue.run(async () => {
      const s = this.socket;
      this.socket = undefined;
      if (!s || s.destroyed) return;
      await new Promise<void>((resolve) => {
        s.once("close", () => resolve());
        s.end();
        // A peer that does not close its side must not keep us waiting.
        setTimeout(() => s.destroy(), 2000).unref();
      });
    });
  }

  private async exchange(command: Uint8Array): Promise<Uint8Array> {
    if (this.closed) throw new TpmTransportError("closed", `${this.address}: transport is closed`);
    checkCommandFrame(command);
    const socket = this.socket && !this.socket.destroyed ? this.socket : await this.open();
    return new Promise<Uint8Array>((resolve, reject) => {
      const assembler = new ResponseAssembler();
      const done = (err: Error | undefined, resp?: Uint8Array) => {
        clearTimeout(timer);
        socket.off("data", onData);
        socket.off("close", onClose);
        socket.off("error", onError);
        if (err) {
          // The stream is out of step with the TPM: never reuse it.
          socket.destroy();
          if (this.socket === socket) this.socket = undefined;
          reject(err);
        } else resolve(resp ?? new Uint8Array(0));
      };
      const onData = (chunk: Buffer) => {
        try {
          const resp = assembler.push(new Uint8Array(chunk));
          if (resp) done(undefined, resp);
        } catch (e) {
          done(e instanceof Error ? e : new Error(String(e)));
        }
      };
      const onClose = () =>
        done(new TpmTransportError("closed", `${this.address} closed the connection after ${assembler.received} response bytes`));
      const onError = (e: Error) => done(new TpmTransportError("io", `${this.address}: ${e.message}`));
      const timer = setTimeout(
        () => done(new TpmTransportError("timeout", `${this.address}: no complete response within ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
      socket.on("data", onData);
      socket.once("close", onClose);
      socket.once("error", onError);
      socket.write(command);
    });
  }

  private open(): Promise<Socket> {
    return new Promise<Socket>((resolve, reject) => {
      const s = "path" in this.endpoint ? connect({ path: this.endpoint.path }) : connect({ host: this.endpoint.host, port: this.endpoint.port });
      const timer = setTimeout(() => {
        s.destroy();
        reject(new TpmTransportError("connect-failed", `${this.address}: connect timed out after ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      s.once("connect", () => {
        clearTimeout(timer);
        s.off("error", onError);
        s.setNoDelay?.(true);
        // Errors between commands surface on the next command's close/error handlers; keep node from throwing.
        s.on("error", () => undefined);
        this.socket = s;
        resolve(s);
      });
      const onError = (e: Error) => {
        clearTimeout(timer);
        reject(new TpmTransportError("connect-failed", `${this.address}: ${e.message}`));
      };
      s.once("error", onError);
    });
  }
}

/** swtpm's raw TPM command channel over TCP (`swtpm socket --server type=tcp,port=P`). */
export class TcpTransport extends SocketTransport {
  constructor(
    readonly host: string,
    readonly port: number,
    opts: SocketTransportOptions = {},
  ) {
    super({ host, port }, opts);
  }
  get address(): string {
    return `tcp:${this.host}:${this.port}`;
  }
}

/**
 * swtpm's raw TPM command channel over a Unix socket (`--server type=unixio,path=…`), the kind of TPM path a
 * SPIRE agent can open too (go-tpm treats a Unix socket as an emulator and connects once per command). swtpm
 * serves one connection at a time, so a client sharing the socket must close its transport when its step is
 * done; and without a resource manager the two share one TPM's object slots.
 */
export class UnixTransport extends SocketTransport {
  constructor(
    readonly path: string,
    opts: SocketTransportOptions = {},
  ) {
    super({ path }, opts);
  }
  get address(): string {
    return `unix:${this.path}`;
  }
}
