/**
 * Minimal swtpm harness for EK tests: manufacture a TPM 2.0 state with EK and platform certificates issued
 * by a private local CA (own config files in a temp dir, never /etc or /var/lib/swtpm-localca), run it on
 * free loopback ports, and call tpm2-tools against it. Self-contained so it can be folded into the general
 * harness (tests/src/harness/swtpm.ts) later.
 *
 * Missing tools are errors, not skips: the Debian packages are installed by .ci/setup.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { reservePorts } from "./ports.js";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface ManufacturedTpm {
  /** Temp directory holding everything below; remove with `cleanup()`. */
  dir: string;
  stateDir: string;
  /** The local CA's directory: root and issuer certificates (and their keys). */
  caDir: string;
  /** EK certificates as swtpm_setup wrote them (--write-ek-cert-files). */
  certsDir: string;
  /** swtpm_setup's log. */
  log: string;
  cleanup(): void;
}

export interface RunningSwtpm {
  port: number;
  ctrlPort: number;
  /** TCTI string for tpm2-tools (TPM2TOOLS_TCTI). */
  tcti: string;
  /** Run a tpm2-tools command against this TPM; resolves stdout, rejects with stderr. */
  tpm2(tool: string, args: string[]): Promise<string>;
  stop(): Promise<void>;
}

const INSTALL_HINT = "install the Debian packages listed in .ci/setup (swtpm swtpm-tools tpm2-tools libtss2-tcti-swtpm0)";

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 60_000): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { env, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "ENOENT") reject(new Error(`${cmd} is not installed: ${INSTALL_HINT}`));
        else reject(new Error(`${cmd} ${args.join(" ")} failed (${code ?? err.message}):\n${stderr}${stdout}`));
        return;
      }
      resolve({ stdout, stderr });
    });
  });
}

/** swtpm_setup --tpm2 --create-ek-cert --create-platform-cert with a private swtpm-localca configuration. */
export async function manufactureTpm(): Promise<ManufacturedTpm> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-swtpm-ek-"));
  const stateDir = join(dir, "state");
  const caDir = join(dir, "ca");
  const certsDir = join(dir, "ek-certs");
  for (const d of [stateDir, caDir, certsDir]) mkdirSync(d);
  const localcaConf = join(dir, "swtpm-localca.conf");
  const localcaOpts = join(dir, "swtpm-localca.options");
  const setupConf = join(dir, "swtpm_setup.conf");
  writeFileSync(
    localcaConf,
    [`statedir = ${caDir}`, `signingkey = ${join(caDir, "signkey.pem")}`, `issuercert = ${join(caDir, "issuercert.pem")}`, `certserial = ${join(caDir, "certserial")}`, ""].join("\n"),
  );
  writeFileSync(localcaOpts, ["--platform-manufacturer fleetd", "--platform-version 2.1", "--platform-model test", ""].join("\n"));
  writeFileSync(
    setupConf,
    [
      "create_certs_tool = swtpm_localca",
      `create_certs_tool_config = ${localcaConf}`,
      `create_certs_tool_options = ${localcaOpts}`,
      "active_pcr_banks = sha256",
      "",
    ].join("\n"),
  );
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  try {
    const { stdout, stderr } = await run("swtpm_setup", [
      "--tpm2",
      "--tpm-state",
      stateDir,
      "--create-ek-cert",
      "--create-platform-cert",
      "--config",
      setupConf,
      "--write-ek-cert-files",
      certsDir,
      "--overwrite",
    ]);
    if (readdirSync(certsDir).length === 0) throw new Error(`swtpm_setup wrote no EK certificates:\n${stderr}${stdout}`);
    return { dir, stateDir, caDir, certsDir, log: stderr + stdout, cleanup };
  } catch (e) {
    cleanup();
    throw e;
  }
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = createConnection({ host: "127.0.0.1", port });
    c.once("connect", () => {
      c.destroy();
      resolve(true);
    });
    c.once("error", () => resolve(false));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Start `swtpm socket` on free loopback ports (retrying if a port is taken in between). */
export async function startSwtpm(stateDir: string): Promise<RunningSwtpm> {
  let lastErr = "";
  for (let attempt = 0; attempt < 5; attempt++) {
    const [port] = (await reservePorts(2)) as [number, number];
    const ctrlPort = port + 1;
    let stderr = "";
    const child: ChildProcess = spawn(
      "swtpm",
      [
        "socket",
        "--tpm2",
        "--tpmstate",
        `dir=${stateDir}`,
        "--server",
        `type=tcp,port=${port},bindaddr=127.0.0.1`,
        "--ctrl",
        `type=tcp,port=${ctrlPort},bindaddr=127.0.0.1`,
        "--flags",
        "not-need-init,startup-clear",
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    const spawnError = new Promise<Error>((resolve) => child.once("error", resolve));
    let ready = false;
    for (let i = 0; i < 100 && child.exitCode === null; i++) {
      const raced = await Promise.race([spawnError, sleep(50).then(() => undefined)]);
      if (raced instanceof Error) {
        if ((raced as NodeJS.ErrnoException).code === "ENOENT") throw new Error(`swtpm is not installed: ${INSTALL_HINT}`);
        throw raced;
      }
      if (await canConnect(ctrlPort)) {
        // Still ours? (If another process took the port, our swtpm has exited by now.)
        await sleep(50);
        ready = child.exitCode === null;
        break;
      }
    }
    if (ready) {
      const tcti = `swtpm:host=127.0.0.1,port=${port}`;
      return {
        port,
        ctrlPort,
        tcti,
        tpm2: async (tool, args) => (await run(tool, args, { ...process.env, TPM2TOOLS_TCTI: tcti })).stdout,
        stop: () =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null) return resolve();
            child.once("exit", () => resolve());
            child.kill("SIGTERM");
          }),
      };
    }
    lastErr = stderr;
    if (child.exitCode === null) child.kill("SIGKILL");
  }
  throw new Error(`swtpm did not start: ${lastErr}`);
}
