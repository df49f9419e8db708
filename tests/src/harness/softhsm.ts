/**
 * A private SoftHSM2 for tests: its own config and token directory in a temp dir (SOFTHSM2_CONF), tokens
 * initialized with softhsm2-util, key pairs generated inside the token with pkcs11-tool (OpenSC), and a CA
 * certificate self-signed through fleetd's PKCS#11 signer — the private key never leaves the token.
 *
 * SoftHSM2 reads its configuration and lists its slots when the library is initialized, so every token and
 * key is created up front, before the first signer opens; one SoftHSM per process at a time.
 * Needs the Debian packages softhsm2 and opensc (in .ci/setup).
 */
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  createCaCertificate, type CaCertificate, openPkcs11Signer, type Pkcs11Signer, type Pkcs11SignerConfig,
  type Pkcs11SignerOptions,
} from "@fleetd/platform/pki";

const run = promisify(execFile);

export const SOFTHSM_MODULE = "/usr/lib/softhsm/libsofthsm2.so";

export interface SoftHsmKeySpec {
  label: string;
  /** CKA_ID, hex. */
  id: string;
  type: "ec-p256" | "ec-p384" | "rsa-2048";
  /** CKA_ALWAYS_AUTHENTICATE: a context-specific login before each signature (like YubiKey PIV slot 9c). */
  alwaysAuthenticate?: boolean;
}

export interface SoftHsmTokenSpec {
  label: string;
  pin: string;
  soPin: string;
  keys: SoftHsmKeySpec[];
}

export interface SoftHsm {
  readonly dir: string;
  readonly confPath: string;
  readonly module: string;
  /** Name of the environment variable holding a token's PIN (set by the harness). */
  pinEnv(tokenLabel: string): string;
  signerConfig(tokenLabel: string, keyLabel: string, extra?: Partial<Pkcs11SignerConfig>): Pkcs11SignerConfig;
  close(): void;
}

let active: SoftHsm | undefined;

const KEY_TYPES: Record<SoftHsmKeySpec["type"], string> = {
  "ec-p256": "EC:prime256v1",
  "ec-p384": "EC:secp384r1",
  "rsa-2048": "rsa:2048",
};

async function tool(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  try {
    await run(cmd, args, { env, timeout: 60_000 });
  } catch (e) {
    const err = e as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${cmd} ${args[0] ?? ""} failed: ${err.stderr || err.stdout || err.message}`);
  }
}

export async function startSoftHsm(tokens: SoftHsmTokenSpec[]): Promise<SoftHsm> {
  if (active) throw new Error("a SoftHSM harness is already active in this process");
  const dir = mkdtempSync(join(tmpdir(), "fleetd-softhsm-"));
  const tokenDir = join(dir, "tokens");
  const confPath = join(dir, "softhsm2.conf");
  mkdirSync(tokenDir, { mode: 0o700 });
  writeFileSync(confPath, `directories.tokendir = ${tokenDir}\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n`);
  const previousConf = process.env["SOFTHSM2_CONF"];
  // the library is loaded into this process, so it reads this process's environment at C_Initialize
  process.env["SOFTHSM2_CONF"] = confPath;
  const env = { ...process.env, SOFTHSM2_CONF: confPath };
  const pinVars = new Map<string, string>();
  try {
    for (const [i, t] of tokens.entries()) {
      await tool("softhsm2-util", ["--init-token", "--free", "--label", t.label, "--pin", t.pin, "--so-pin", t.soPin], env);
      for (const k of t.keys) {
        const args = ["--module", SOFTHSM_MODULE, "--token-label", t.label, "--login", "--pin", t.pin, "--keypairgen", "--key-type", KEY_TYPES[k.type], "--label", k.label, "--id", k.id, "--usage-sign"];
        if (k.alwaysAuthenticate) args.push("--always-auth");
        await tool("pkcs11-tool", args, env);
      }
      const name = `FLEETD_TEST_SOFTHSM_PIN_${process.pid}_${i}`;
      process.env[name] = t.pin;
      pinVars.set(t.label, name);
    }
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    for (const v of pinVars.values()) delete process.env[v];
    if (previousConf === undefined) delete process.env["SOFTHSM2_CONF"];
    else process.env["SOFTHSM2_CONF"] = previousConf;
    throw e;
  }

  const hsm: SoftHsm = {
    dir,
    confPath,
    module: SOFTHSM_MODULE,
    pinEnv(tokenLabel) {
      const v = pinVars.get(tokenLabel);
      if (!v) throw new Error(`no token ${tokenLabel}`);
      return v;
    },
    signerConfig(tokenLabel, keyLabel, extra = {}) {
      return { module: SOFTHSM_MODULE, token: { label: tokenLabel }, key: { label: keyLabel }, pin: { env: hsm.pinEnv(tokenLabel) }, ...extra };
    },
    close() {
      for (const v of pinVars.values()) delete process.env[v];
      if (previousConf === undefined) delete process.env["SOFTHSM2_CONF"];
      else process.env["SOFTHSM2_CONF"] = previousConf;
      rmSync(dir, { recursive: true, force: true });
      active = undefined;
    },
  };
  active = hsm;
  return hsm;
}

export interface SoftHsmCa {
  signer: Pkcs11Signer;
  ca: CaCertificate;
}

/** Open the PKCS#11 signer on a token key and self-sign a CA certificate with it. */
export async function createSoftHsmCa(
  hsm: SoftHsm,
  opts: { token: string; key: string; commonName: string; notBefore: Date; lifetimeDays: number; signerOptions?: Pkcs11SignerOptions },
): Promise<SoftHsmCa> {
  const signer = await openPkcs11Signer(hsm.signerConfig(opts.token, opts.key), opts.signerOptions);
  try {
    const ca = await createCaCertificate({ signer, commonName: opts.commonName, notBefore: opts.notBefore, lifetimeDays: opts.lifetimeDays });
    return { signer, ca };
  } catch (e) {
    await signer.close();
    throw e;
  }
}
