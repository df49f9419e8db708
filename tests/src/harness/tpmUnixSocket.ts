/**
 * A Unix-socket door to a TCP swtpm, for programs that reach a TPM emulator only through a Unix socket — SPIRE's
 * agent (go-tpm `tpmutil.OpenTPM` opens a character device or a Unix socket, never TCP; research spire.md §3.5).
 * The machines of the attestation world (tests/src/attestation/world.ts) serve their swtpm on loopback TCP;
 * this lets a real spire-agent use the same TPM, keys and EK certificate.
 *
 * go-tpm's emulator transport connects once per command, writes the command, reads the response with a single
 * read() and closes. So a response must arrive in one piece: the door reads the whole TPM response from swtpm
 * (its header says its size, TPM 2.0 Part 3 §5.2: tag u16, responseSize u32, responseCode u32) and writes it
 * to the Unix socket in one write. Commands are passed on as they come. Only 127.0.0.1 is dialled.
 */
import { rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";

export interface TpmUnixSocket {
  readonly path: string;
  /** Connections so far (go-tpm makes one per command). */
  readonly connections: () => number;
  close(): Promise<void>;
}

const MAX_RESPONSE = 64 * 1024;

export async function tpmUnixSocket(path: string, tcp: { host: "127.0.0.1"; port: number }): Promise<TpmUnixSocket> {
  let connections = 0;
  const open = new Set<Socket>();
  const server: Server = createServer((client) => {
    connections++;
    open.add(client);
    const tpm = connect({ host: tcp.host, port: tcp.port });
    open.add(tpm);
    let pending = Buffer.alloc(0);
    const done = () => {
      client.destroy();
      tpm.destroy();
      open.delete(client);
      open.delete(tpm);
    };
    client.on("data", (b: Buffer) => tpm.write(b));
    tpm.on("data", (b: Buffer) => {
      pending = Buffer.concat([pending, b]);
      while (pending.length >= 10) {
        const size = pending.readUInt32BE(2);
        if (size < 10 || size > MAX_RESPONSE) return done();
        if (pending.length < size) return;
        client.write(pending.subarray(0, size));
        pending = pending.subarray(size);
      }
    });
    client.on("end", () => tpm.end());
    tpm.on("end", () => client.end());
    for (const s of [client, tpm]) {
      s.on("error", done);
      s.on("close", done);
    }
  });
  rmSync(path, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, () => resolve());
  });
  return {
    path,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}
