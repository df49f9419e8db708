/**
 * A small, self-contained swtpm for the TPM client's tests: one `swtpm socket --tpm2` on free loopback ports
 * (or Unix sockets in a temp dir), its raw TPM command channel for fleetd's own client, and the control
 * channel beside it (TCP port + 1) so tpm2-tools' `swtpm:` TCTI and tpm2-abrmd can reach the same TPM.
 * `--flags not-need-init,startup-clear` makes swtpm send TPM2_Startup(CLEAR) itself.
 *
 * With `ekCerts: true` the state is first manufactured by `swtpm_setup --create-ek-cert` with a private
 * swtpm-localca (config and CA in the temp dir; nothing global is touched): an RSA-2048 EK certificate at NV
 * 0x01C00002 and an ECC P-384 one at 0x01C00016, persistent EKs at 0x81010001 and 0x81010016.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { reservePorts } from "./ports.js";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface RawSwtpmOptions {
  /** Serve the command channel on a Unix socket instead of TCP. */
  unix?: boolean;
  /** Manufacture EK certificates first (swtpm_setup + private swtpm-localca). */
  ekCerts?: boolean;
  /** PCR banks swtpm_setup activates (only with ekCerts); default "sha1,sha256". */
  pcrBanks?: string;
}

export interface RawSwtpm {
  readonly dir: string;
  readonly host: string;
  /** TCP command port (when not `unix`). */
  readonly port: number;
  /** Unix command socket (when `unix`). */
  readonly socketPath: string | undefined;
  /** tpm2-tools TCTI string for this swtpm (TCP mode only). */
  readonly tcti: string | undefined;
  /** The private swtpm-localca's directory (issuer and root certificates) when ekCerts. */
  readonly caDir: string | undefined;
  readonly pid: number;
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.once("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

function probe(target: { port: number; host: string } | { path: string }): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection(target as { port: number; host: string });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

function manufacture(dir: string, state: string, pcrBanks: string): string {
  const ca = join(dir, "ca");
  mkdirSync(ca);
  writeFileSync(
    join(dir, "setup.conf"),
    `create_certs_tool = /usr/bin/swtpm_localca\ncreate_certs_tool_config = ${join(dir, "localca.conf")}\ncreate_certs_tool_options = ${join(dir, "localca.options")}\nactive_pcr_banks = ${pcrBanks}\n`,
  );
  writeFileSync(
    join(dir, "localca.conf"),
    `statedir = ${ca}\nsigningkey = ${join(ca, "signkey.pem")}\nissuercert = ${join(ca, "issuercert.pem")}\ncertserial = ${join(ca, "certserial")}\n`,
  );
  writeFileSync(join(dir, "localca.options"), "--platform-manufacturer fleetd\n--platform-version 2.1\n--platform-model swtpm\n");
  const r = spawnSync(
    "swtpm_setup",
    ["--tpm2", "--tpmstate", state, "--create-ek-cert", "--config", join(dir, "setup.conf"), "--pcr-banks", pcrBanks],
    { encoding: "utf8", timeout: 120_000 },
  );
  if (r.status !== 0) throw new Error(`swtpm_setup failed (${r.status}): ${r.stderr || r.stdout}`);
  return ca;
}

export async function startRawSwtpm(opts: RawSwtpmOptions = {}): Promise<RawSwtpm> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-swtpm-"));
  const state = join(dir, "state");
  mkdirSync(state);
  const caDir = opts.ekCerts ? manufacture(dir, state, opts.pcrBanks ?? "sha1,sha256") : undefined;
  const host = "127.0.0.1";
  let port = 0;
  let socketPath: string | undefined;
  const args = ["socket", "--tpm2", "--tpmstate", `dir=${state}`, "--flags", "not-need-init,startup-clear", "--log", `file=${join(dir, "swtpm.log")},level=1`];
  if (opts.unix) {
    socketPath = join(dir, "tpm.sock");
    args.push("--server", `type=unixio,path=${socketPath}`, "--ctrl", `type=unixio,path=${join(dir, "ctrl.sock")}`);
  } else {
    port = (await reservePorts(2))[0] as number;
    args.push("--server", `type=tcp,port=${port},bindaddr=${host}`, "--ctrl", `type=tcp,port=${port + 1},bindaddr=${host}`);
  }
  const child = spawn("swtpm", args, { stdio: ["ignore", "pipe", "pipe"] });
  live.add(child);
  let output = "";
  child.stdout?.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (output += d.toString()));
  let exited = false;
  const exitP = new Promise<void>((resolve) =>
    child.once("exit", () => {
      exited = true;
      live.delete(child);
      resolve();
    }),
  );
  const stop = async () => {
    if (!exited) {
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exitP;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (exited) {
      await stop();
      throw new Error(`swtpm exited at start: ${output}`);
    }
    const up = socketPath ? existsSync(socketPath) && (await probe({ path: socketPath })) : await probe({ port, host });
    if (up) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`swtpm did not listen within 20 s: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    dir,
    host,
    port,
    socketPath,
    tcti: socketPath ? undefined : `swtpm:host=${host},port=${port}`,
    caDir,
    pid: child.pid ?? 0,
    stop,
  };
}
