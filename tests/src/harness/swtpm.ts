/**
 * A real software TPM 2.0 (swtpm 0.7.1 + libtpms) for tests and the lab, manufactured like a real one:
 * EKs, EK certificates and a platform certificate issued by a local CA that the harness creates in its own
 * temp dir (so nothing depends on /etc/swtpm* or /var/lib/swtpm-localca), then served on free loopback ports.
 *
 *   const tpm = await startSwtpm();
 *   await tpm.tpm2("createek", ["-G", "rsa", "-c", "ek.ctx", "-u", "ek.pub"]);
 *   await tpm.stop();
 *
 * What `swtpm_setup --tpm2 --create-ek-cert --create-platform-cert` provisions (swtpm 0.7.1, checked here):
 *  - RSA EK, TCG default low-range template (SHA-256, AES-128-CFB, PolicySecret(endorsement) policy, userWithAuth
 *    clear), persisted at 0x81010001 with its certificate (plain DER) in NV 0x01C00002. With `rsaKeySize: 3072`
 *    it is an RSA-3072 EK at 0x8101001C with the certificate in NV 0x01C0001C instead (the 2048 one is absent).
 *    It is the same key `tpm2_createek -G rsa` derives (2048 case).
 *  - ECC EK on NIST P-384 with the TCG high-range template (nameAlg SHA-384, AES-256-CFB, attributes 0x000300F2,
 *    i.e. userWithAuth SET, SHA-384 policy b26e7d28…), persisted at 0x81010016 with its certificate in NV 0x01C00016.
 *    swtpm always creates both an RSA and an ECC EK for a TPM 2 (`--ecc` only switches the storage primary key
 *    to ECC). There is NO P-256 EK and no certificate at the low-range ECC index 0x01C0000A: `tpm2_createek -G ecc`
 *    derives a P-256 EK from the default template that has no certificate.
 *  - Platform certificate in NV 0x01C08000 (with `platformCert`, the default).
 *  - Certificates are issued by "swtpm-localca" (issuer cert `issuercert.pem`), itself issued by the root
 *    `swtpm-localca-rootca-cert.pem`; both are in `caDir` and in `caCerts`.
 *  - PCR banks: whatever `pcrBanks` says (default sha1 + sha256; swtpm_setup's own default is sha256 only).
 *  - swtpm 0.7.1 has no `--profile` (profiles arrived in later swtpm), so the algorithm set is libtpms 0.9's.
 *
 * swtpm serves one TCP connection at a time; the TSS `swtpm` TCTI (tss 3.2.1) opens a connection per command,
 * so several clients (tools, an abrmd) can share one instance. Without a resource manager, transient objects
 * stay loaded after a tool exits and libtpms holds only 3: use `flushTransient()` or `flushAfterEachCall`,
 * or go through `startAbrmd()` (a private tpm2-abrmd, flushing like /dev/tpmrm0; see abrmd.ts).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Daemon, freeLoopbackPorts, registerCleanup, runProcess, startDaemon, waitFor } from "./process.js";

export { startAbrmd, type Abrmd, type AbrmdOptions } from "./abrmd.js";

/** Persistent handles and NV indices swtpm 0.7.1 provisions (see the file comment). */
export const SWTPM_EK = {
  rsa2048: { handle: 0x81010001, certIndex: 0x01c00002 },
  rsa3072: { handle: 0x8101001c, certIndex: 0x01c0001c },
  eccP384: { handle: 0x81010016, certIndex: 0x01c00016 },
} as const;
export const SWTPM_PLATFORM_CERT_INDEX = 0x01c08000;
/** The storage primary key `storagePrimaryKey` creates. */
export const SWTPM_SPK_HANDLE = 0x81000001;

export type PcrBank = "sha1" | "sha256" | "sha384" | "sha512";

export interface SwtpmOptions {
  /** RSA EK size; swtpm 0.7.1 supports 2048 (default) and 3072. */
  rsaKeySize?: 2048 | 3072;
  /** Active PCR banks; default sha1 and sha256. */
  pcrBanks?: readonly PcrBank[];
  /** Create EK certificates (and the platform certificate unless `platformCert: false`); default true. With false, EKs are still created. */
  ekCerts?: boolean;
  platformCert?: boolean;
  /** Also create a persistent storage primary key at 0x81000001. */
  storagePrimaryKey?: "rsa" | "ecc";
  /** Serve on a Unix socket (`<dir>/tpm.sock`, control `<dir>/tpm.sock.ctrl`) instead of loopback TCP. */
  unixSocket?: boolean;
  /**
   * Use (and create if needed) this directory as the issuing CA instead of a fresh one per instance, so several
   * TPMs share one "manufacturer". It is not removed by `stop()`.
   */
  caDir?: string;
  /** Run `tpm2_flushcontext -t` after every `tpm2()` call, freeing transient objects as a resource manager would. */
  flushAfterEachCall?: boolean;
  /** How long to wait for manufacturing plus the TPM answering; default 60 s. */
  startupTimeoutMs?: number;
}

export interface Tpm2RunOptions {
  /** Working directory; default the instance's `workDir`. */
  cwd?: string;
  /** Bytes for the tool's stdin (e.g. `tpm2_send`). */
  input?: Uint8Array;
  timeoutMs?: number;
  /** Override the after-call flush for this call. */
  flush?: boolean;
}

export interface Tpm2Result {
  stdout: string;
  stderr: string;
  stdoutBytes: Buffer;
}

/** Anything that can run tpm2-tools against a TPM: the raw swtpm, or a resource manager in front of it. */
export interface Tpm2Runner {
  /** TCTI string for tpm2-tools / the TSS (`TPM2TOOLS_TCTI`, `TSS2_TCTI` style). */
  readonly tcti: string;
  /** Environment a TSS client needs besides the TCTI (e.g. DBUS_SESSION_BUS_ADDRESS), plus TPM2TOOLS_TCTI. */
  readonly env: Readonly<Record<string, string>>;
  /** Run `tpm2_<tool>`; throws Tpm2ToolError (with stderr) on a non-zero exit. */
  tpm2(tool: string, args: readonly string[], opts?: Tpm2RunOptions): Promise<Tpm2Result>;
}

interface SwtpmBase extends Tpm2Runner {
  readonly pid: number;
  /** The instance's temp dir; everything below it is removed by stop(). */
  readonly dir: string;
  /** TPM state (tpm2-00.permall). */
  readonly stateDir: string;
  /** Default working directory of `tpm2()`. */
  readonly workDir: string;
  /** The issuing CA's directory. */
  readonly caDir: string;
  /** PEM files: `issuer` signed the EK and platform certificates; `root` signed `issuer`. */
  readonly caCerts: { readonly root: string; readonly issuer: string };
  /** Where this instance's EKs live (per `rsaKeySize`), and the DER certificates swtpm_setup wrote (if any). */
  readonly ek: {
    readonly rsa: { readonly handle: number; readonly certIndex: number; readonly bits: 2048 | 3072; readonly certFile?: string };
    readonly ecc: { readonly handle: number; readonly certIndex: number; readonly curve: "P-384"; readonly certFile?: string };
  };
  readonly pcrBanks: readonly PcrBank[];
  /** A fresh empty directory under `dir`. */
  mkdir(prefix?: string): string;
  /** Flush every transient object (`tpm2_flushcontext -t`). */
  flushTransient(): Promise<void>;
  /** Register something (e.g. an abrmd) to be stopped before this TPM stops. */
  attach(dependent: { stop(): Promise<void> }): void;
  /** Stop dependents, kill swtpm, remove `dir`. Idempotent. */
  stop(): Promise<void>;
}

export interface SwtpmTcp extends SwtpmBase {
  readonly transport: "tcp";
  readonly host: "127.0.0.1";
  readonly port: number;
  readonly ctrlPort: number;
}

export interface SwtpmUnix extends SwtpmBase {
  readonly transport: "unix";
  readonly socketPath: string;
  readonly ctrlSocketPath: string;
}

export type Swtpm = SwtpmTcp | SwtpmUnix;

export class Tpm2ToolError extends Error {
  override readonly name = "Tpm2ToolError";
  constructor(
    readonly tool: string,
    readonly args: readonly string[],
    readonly code: number | null,
    readonly stdout: string,
    readonly stderr: string,
    readonly tcti: string,
  ) {
    const how = code === null ? "was killed (timeout?)" : `exited ${code}`;
    super(`${tool} ${args.join(" ")} ${how} [TCTI ${tcti}]\n${stderr.trim() || stdout.trim() || "(no output)"}`);
  }
}

/** Run tpm2-tools with the given TCTI and extra environment. Shared by the raw and the abrmd transports. */
export async function runTpm2(
  tcti: string,
  env: Readonly<Record<string, string>>,
  tool: string,
  args: readonly string[],
  opts: Tpm2RunOptions & { cwd: string },
): Promise<Tpm2Result> {
  const name = tool.startsWith("tpm2_") ? tool : `tpm2_${tool}`;
  if (!/^tpm2_[a-z0-9_]+$/.test(name)) throw new Error(`not a tpm2-tools program: ${tool}`);
  const res = await runProcess(name, args, {
    cwd: opts.cwd,
    env: { ...process.env, ...env, TPM2TOOLS_TCTI: tcti },
    timeoutMs: opts.timeoutMs ?? 60_000,
    ...(opts.input ? { input: opts.input } : {}),
  });
  const stdout = res.stdout.toString("utf8");
  const stderr = res.stderr.toString("utf8");
  if (res.code !== 0) throw new Tpm2ToolError(name, args, res.code, stdout, stderr, tcti);
  return { stdout, stderr, stdoutBytes: res.stdout };
}

export function startSwtpm(opts?: SwtpmOptions & { unixSocket?: false }): Promise<SwtpmTcp>;
export function startSwtpm(opts: SwtpmOptions & { unixSocket: true }): Promise<SwtpmUnix>;
export async function startSwtpm(opts: SwtpmOptions = {}): Promise<Swtpm> {
  const timeoutMs = opts.startupTimeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  const dir = mkdtempSync(join(tmpdir(), "fleetd-swtpm-"));
  const unregisterDir = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  let daemon: Daemon | undefined;
  try {
    const layout = await manufacture(dir, opts, timeoutMs);
    for (let attempt = 1; ; attempt++) {
      const listen = opts.unixSocket ? unixListen(dir) : await tcpListen();
      const logFile = join(dir, `swtpm-${attempt}.log`);
      const d = startDaemon("swtpm", "swtpm", [
        "socket",
        "--tpm2",
        "--tpmstate",
        `dir=${layout.stateDir}`,
        ...listen.args,
        "--flags",
        "not-need-init,startup-clear",
        "--log",
        `file=${logFile},level=1`,
      ]);
      daemon = d;
      // swtpm writes its errors (e.g. "Could not open TCP socket: Address already in use") to the log file.
      const output = () => `${d.output()}${readIfExists(logFile)}`.trim() || "(no output)";
      let failure: string | undefined;
      try {
        await waitFor(
          "swtpm did not answer",
          async () => {
            await runTpm2(listen.tcti, {}, "getcap", ["properties-fixed"], { cwd: dir, timeoutMs: 10_000 });
            return true;
          },
          { timeoutMs: Math.max(1000, deadline - Date.now()), abort: () => (d.hasExited() ? `swtpm exited: ${output()}` : undefined) },
        );
        // Make sure the TPM that answered is ours and not another instance that took the port in between.
        if (d.hasExited()) failure = `swtpm exited: ${output()}`;
        else if (!(await isOurs(listen.tcti, layout, dir))) failure = `another TPM answers on ${listen.tcti}`;
      } catch (e) {
        failure = (e as Error).message;
      }
      if (failure === undefined) {
        const inst = new SwtpmInstance(dir, layout, listen.tcti, d, opts, unregisterDir);
        if (listen.unix) return Object.assign(inst, { transport: "unix" as const, ...listen.unix });
        if (listen.tcp) return Object.assign(inst, { transport: "tcp" as const, host: "127.0.0.1" as const, ...listen.tcp });
        throw new Error("unreachable: no listener");
      }
      await d.stop();
      // A port picked as free may have been taken in between: pick others and try again.
      const portRace = /Address already in use/.test(output()) || failure.startsWith("another TPM");
      if (!opts.unixSocket && portRace && attempt < 8) continue;
      throw new Error(failure);
    }
  } catch (e) {
    await daemon?.stop();
    rmSync(dir, { recursive: true, force: true });
    unregisterDir();
    throw e;
  }
}

function readIfExists(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

/** The RSA EK certificate in NV is the one swtpm_setup wrote for this instance (skipped without certificates). */
async function isOurs(tcti: string, layout: Layout, dir: string): Promise<boolean> {
  if (!layout.ekCerts) return true;
  const ek = layout.rsaBits === 3072 ? SWTPM_EK.rsa3072 : SWTPM_EK.rsa2048;
  const out = join(dir, "identity-check.der");
  try {
    await runTpm2(tcti, {}, "nvread", [`0x${ek.certIndex.toString(16)}`, "-C", "o", "-o", out], { cwd: dir, timeoutMs: 10_000 });
    return readFileSync(out).equals(readFileSync(join(layout.certsDir, `ek-rsa${layout.rsaBits}.crt`)));
  } catch {
    return false;
  } finally {
    rmSync(out, { force: true });
  }
}

/** What `manufacture` made: the state, the CA that issued its certificates, and the certificates' files. */
export interface Layout {
  stateDir: string;
  workDir: string;
  caDir: string;
  certsDir: string;
  rsaBits: 2048 | 3072;
  pcrBanks: readonly PcrBank[];
  ekCerts: boolean;
}

/**
 * swtpm_setup with a private configuration and local CA: the TPM's "factory". Exported for TPMs that another
 * program serves (a lab machine's swtpm, started per boot for QEMU: tests/src/vm/machineTpm.ts).
 */
export async function manufacture(dir: string, opts: SwtpmOptions, timeoutMs: number): Promise<Layout> {
  const stateDir = join(dir, "state");
  const certsDir = join(dir, "ek-certs");
  const workDir = join(dir, "work");
  const caDir = opts.caDir ?? join(dir, "ca");
  for (const d of [stateDir, certsDir, workDir, caDir]) mkdirSync(d, { recursive: true });
  const rsaBits = opts.rsaKeySize ?? 2048;
  const pcrBanks = opts.pcrBanks ?? ["sha1", "sha256"];
  const ekCerts = opts.ekCerts ?? true;
  const platformCert = ekCerts && (opts.platformCert ?? true);

  // swtpm_localca creates the root CA and the issuing key on first use when `signingkey` does not exist.
  const localcaConf = join(dir, "swtpm-localca.conf");
  const localcaOptions = join(dir, "swtpm-localca.options");
  const setupConf = join(dir, "swtpm_setup.conf");
  writeFileSync(
    localcaConf,
    [
      `statedir = ${caDir}`,
      `signingkey = ${join(caDir, "signkey.pem")}`,
      `issuercert = ${join(caDir, "issuercert.pem")}`,
      `certserial = ${join(caDir, "certserial")}`,
      "",
    ].join("\n"),
  );
  writeFileSync(localcaOptions, ["--platform-manufacturer fleetd-test", "--platform-version 2.1", "--platform-model swtpm", ""].join("\n"));
  writeFileSync(
    setupConf,
    [
      "create_certs_tool = swtpm_localca",
      `create_certs_tool_config = ${localcaConf}`,
      `create_certs_tool_options = ${localcaOptions}`,
      `active_pcr_banks = ${pcrBanks.join(",")}`,
      "",
    ].join("\n"),
  );
  const args = [
    "--tpm2",
    "--tpm-state",
    stateDir,
    "--config",
    setupConf,
    "--pcr-banks",
    pcrBanks.join(","),
    "--rsa-keysize",
    String(rsaBits),
    ...(ekCerts ? ["--create-ek-cert", "--write-ek-cert-files", certsDir] : ["--createek"]),
    ...(platformCert ? ["--create-platform-cert"] : []),
    ...(opts.storagePrimaryKey ? ["--create-spk", ...(opts.storagePrimaryKey === "ecc" ? ["--ecc"] : [])] : []),
    "--logfile",
    join(dir, "swtpm_setup.log"),
  ];
  // HOME/XDG_CONFIG_HOME point into the temp dir so no user-level swtpm configuration is picked up.
  const env = { ...process.env, HOME: dir, XDG_CONFIG_HOME: join(dir, "xdg") };
  const res = await runProcess("swtpm_setup", args, { cwd: dir, env, timeoutMs });
  if (res.code !== 0) {
    const log = readIfExists(join(dir, "swtpm_setup.log"));
    throw new Error(`swtpm_setup ${args.join(" ")} exited ${res.code}:\n${(log || res.stderr.toString()).trim().slice(-4000)}`);
  }
  return { stateDir, workDir, caDir, certsDir, rsaBits, pcrBanks, ekCerts };
}

interface Listen {
  args: string[];
  tcti: string;
  tcp?: { port: number; ctrlPort: number };
  unix?: { socketPath: string; ctrlSocketPath: string };
}

async function tcpListen(): Promise<Listen> {
  const [port, ctrlPort] = (await freeLoopbackPorts(2)) as [number, number];
  return {
    args: ["--server", `type=tcp,port=${port},bindaddr=127.0.0.1`, "--ctrl", `type=tcp,port=${ctrlPort},bindaddr=127.0.0.1`],
    // The swtpm TCTI has no option for the control port: it always uses port + 1 (and fails without it).
    tcti: `swtpm:host=127.0.0.1,port=${port}`,
    tcp: { port, ctrlPort },
  };
}

function unixListen(dir: string): Listen {
  const socketPath = join(dir, "tpm.sock");
  // The swtpm TCTI (tss 3.2.1) looks for the control channel at `<path>.ctrl`.
  const ctrlSocketPath = `${socketPath}.ctrl`;
  return {
    args: ["--server", `type=unixio,path=${socketPath}`, "--ctrl", `type=unixio,path=${ctrlSocketPath}`],
    tcti: `swtpm:path=${socketPath}`,
    unix: { socketPath, ctrlSocketPath },
  };
}

class SwtpmInstance implements SwtpmBase {
  readonly tcti: string;
  readonly env: Readonly<Record<string, string>>;
  readonly pid: number;
  readonly stateDir: string;
  readonly workDir: string;
  readonly caDir: string;
  readonly caCerts: { root: string; issuer: string };
  readonly ek: SwtpmBase["ek"];
  readonly pcrBanks: readonly PcrBank[];
  private readonly dependents = new Set<{ stop(): Promise<void> }>();
  private stopping: Promise<void> | undefined;
  private seq = 0;

  constructor(
    readonly dir: string,
    layout: Layout,
    tcti: string,
    private readonly daemon: Daemon,
    private readonly opts: SwtpmOptions,
    private readonly unregisterDir: () => void,
  ) {
    this.tcti = tcti;
    this.env = { TPM2TOOLS_TCTI: tcti };
    this.pid = daemon.pid;
    this.stateDir = layout.stateDir;
    this.workDir = layout.workDir;
    this.caDir = layout.caDir;
    this.caCerts = { root: join(layout.caDir, "swtpm-localca-rootca-cert.pem"), issuer: join(layout.caDir, "issuercert.pem") };
    this.pcrBanks = layout.pcrBanks;
    const rsa = layout.rsaBits === 3072 ? SWTPM_EK.rsa3072 : SWTPM_EK.rsa2048;
    this.ek = {
      rsa: { ...rsa, bits: layout.rsaBits, ...(layout.ekCerts ? { certFile: join(layout.certsDir, `ek-rsa${layout.rsaBits}.crt`) } : {}) },
      ecc: { ...SWTPM_EK.eccP384, curve: "P-384", ...(layout.ekCerts ? { certFile: join(layout.certsDir, "ek-secp384r1.crt") } : {}) },
    };
  }

  async tpm2(tool: string, args: readonly string[], opts: Tpm2RunOptions = {}): Promise<Tpm2Result> {
    if (this.stopping) throw new Error(`swtpm ${this.tcti} is stopped`);
    const flush = opts.flush ?? this.opts.flushAfterEachCall ?? false;
    try {
      return await runTpm2(this.tcti, {}, tool, args, { ...opts, cwd: opts.cwd ?? this.workDir });
    } finally {
      if (flush) await this.flushTransient();
    }
  }

  async flushTransient(): Promise<void> {
    await runTpm2(this.tcti, {}, "flushcontext", ["-t"], { cwd: this.workDir });
  }

  mkdir(prefix = "t"): string {
    return mkdtempSync(join(this.dir, `${prefix}-${++this.seq}-`));
  }

  attach(dependent: { stop(): Promise<void> }): void {
    this.dependents.add(dependent);
  }

  stop(): Promise<void> {
    this.stopping ??= (async () => {
      for (const d of [...this.dependents].reverse()) {
        try {
          await d.stop();
        } catch {
          // keep stopping the rest
        }
      }
      await this.daemon.stop();
      rmSync(this.dir, { recursive: true, force: true });
      this.unregisterDir();
    })();
    return this.stopping;
  }
}
