/**
 * A real software TPM 1.2 (swtpm 0.7.1 without `--tpm2` runs libtpms' TPM 1.2), manufactured like the TPM 2.0
 * harness (swtpm.ts) does it: `swtpm_setup --create-ek-cert` with a private swtpm-localca configuration in the
 * instance's temp dir — or a shared `caDir`, so a TPM 1.2 and the world's TPM 2.0 machines have one
 * "manufacturer" that the attestation server's EK CA store trusts — then `--take-ownership` with the
 * swtpm's "well-known" owner and SRK passwords unless `ownerAuth` / `srkAuth` are given. swtpm_setup hashes every
 * password with SHA-1, the "well-known" one too (swtpm_setup.c tpm12_get_ownerpass_digest): `--owner-well-known`
 * gives the TPM_AUTHDATA SHA-1(20 zero bytes), NOT the TCG well-known secret of 20 zero bytes (found here when the
 * zero secret was refused with TPM_AUTHFAIL).
 *
 * What swtpm_setup provisions for a TPM 1.2 (checked here): an RSA-2048 EK (TPM_ES_RSAESOAEP_SHA1_MGF1), its
 * certificate in NV TPM_NV_INDEX_EKCert (0x1000f000) as TCG_PCCLIENT_STORED_CERT ‖ TCG_FULL_CERT (tags 0x1001 and
 * 0x1002), an owner and an SRK. The raw command channel is served on loopback TCP; `--flags
 * not-need-init,startup-clear` makes swtpm run TPM_Startup(ST_CLEAR) itself.
 */
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Daemon, freeLoopbackPorts, registerCleanup, runProcess, startDaemon, waitFor } from "./process.js";

export interface Swtpm12Options {
  /** Share this CA directory (created on first use) as the EK certificate issuer. */
  caDir?: string;
  /** Owner password bytes (the TPM's secret is `ownerSecret(this)`); default swtpm's "well-known" password. */
  ownerAuth?: Uint8Array;
  /** SRK password bytes, likewise. */
  srkAuth?: Uint8Array;
  /** Skip TPM_TakeOwnership (an unowned TPM 1.2). */
  noOwner?: boolean;
}

export interface Swtpm12 {
  readonly host: "127.0.0.1";
  readonly port: number;
  readonly dir: string;
  readonly caDir: string;
  /** PEM files of the issuing CA and its root. */
  readonly caCerts: { readonly root: string; readonly issuer: string };
  /** The EK certificate swtpm_setup wrote (DER). */
  readonly ekCertFile: string;
  readonly ownerAuth: Uint8Array;
  readonly srkAuth: Uint8Array;
  stop(): Promise<void>;
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

const hexArg = (b: Uint8Array) => Buffer.from(b).toString("hex");

export async function startSwtpm12(opts: Swtpm12Options = {}): Promise<Swtpm12> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-swtpm12-"));
  const unregisterDir = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  const stateDir = join(dir, "state");
  const certsDir = join(dir, "ek-certs");
  const caDir = opts.caDir ?? join(dir, "ca");
  for (const d of [stateDir, certsDir, caDir]) mkdirSync(d, { recursive: true });
  const wellKnown = new Uint8Array(createHash("sha1").update(new Uint8Array(20)).digest());
  let daemon: Daemon | undefined;
  try {
    writeFileSync(
      join(dir, "swtpm-localca.conf"),
      [`statedir = ${caDir}`, `signingkey = ${join(caDir, "signkey.pem")}`, `issuercert = ${join(caDir, "issuercert.pem")}`, `certserial = ${join(caDir, "certserial")}`, ""].join("\n"),
    );
    writeFileSync(join(dir, "swtpm-localca.options"), ["--platform-manufacturer fleetd-test", "--platform-version 1.2", "--platform-model swtpm", ""].join("\n"));
    writeFileSync(
      join(dir, "swtpm_setup.conf"),
      ["create_certs_tool = swtpm_localca", `create_certs_tool_config = ${join(dir, "swtpm-localca.conf")}`, `create_certs_tool_options = ${join(dir, "swtpm-localca.options")}`, ""].join("\n"),
    );
    // swtpm_setup takes passwords it hashes with SHA-1 (no raw secret option): the harness passes the secret's hex
    // string, so the TPM_AUTHDATA is SHA-1 of that string (see `ownerSecret`).
    const ownerArgs = opts.noOwner
      ? []
      : [
          "--take-ownership",
          ...(opts.ownerAuth ? ["--ownerpass", hexArg(opts.ownerAuth)] : ["--owner-well-known"]),
          ...(opts.srkAuth ? ["--srkpass", hexArg(opts.srkAuth)] : ["--srk-well-known"]),
        ];
    const args = ["--tpm-state", stateDir, "--config", join(dir, "swtpm_setup.conf"), "--create-ek-cert", "--write-ek-cert-files", certsDir, ...ownerArgs, "--logfile", join(dir, "swtpm_setup.log")];
    const env = { ...process.env, HOME: dir, XDG_CONFIG_HOME: join(dir, "xdg") };
    const res = await runProcess("swtpm_setup", args, { cwd: dir, env, timeoutMs: 120_000 });
    if (res.code !== 0) {
      let log = "";
      try {
        log = readFileSync(join(dir, "swtpm_setup.log"), "utf8");
      } catch {
        // none
      }
      throw new Error(`swtpm_setup (TPM 1.2) exited ${res.code}:\n${(log || res.stderr.toString()).slice(-4000)}`);
    }
    for (let attempt = 1; ; attempt++) {
      const [port, ctrlPort] = (await freeLoopbackPorts(2)) as [number, number];
      const d = startDaemon("swtpm12", "swtpm", [
        "socket",
        "--tpmstate",
        `dir=${stateDir}`,
        "--server",
        `type=tcp,port=${port},bindaddr=127.0.0.1`,
        "--ctrl",
        `type=tcp,port=${ctrlPort},bindaddr=127.0.0.1`,
        "--flags",
        "not-need-init,startup-clear",
        "--log",
        `file=${join(dir, `swtpm-${attempt}.log`)},level=1`,
      ]);
      daemon = d;
      try {
        await waitFor("swtpm (TPM 1.2) did not listen", () => canConnect(port), { timeoutMs: 20_000, abort: () => (d.hasExited() ? `swtpm exited: ${d.output()}` : undefined) });
        if (d.hasExited()) throw new Error(`swtpm exited: ${d.output()}`);
      } catch (e) {
        await d.stop();
        if (attempt < 5) continue;
        throw e;
      }
      const self: Swtpm12 = {
        host: "127.0.0.1",
        port,
        dir,
        caDir,
        caCerts: { root: join(caDir, "swtpm-localca-rootca-cert.pem"), issuer: join(caDir, "issuercert.pem") },
        ekCertFile: join(certsDir, "ek-rsa2048.crt"),
        ownerAuth: opts.ownerAuth ? ownerSecret(opts.ownerAuth) : wellKnown,
        srkAuth: opts.srkAuth ? ownerSecret(opts.srkAuth) : wellKnown,
        async stop() {
          await d.stop();
          // a shared caDir lies outside `dir` and stays
          rmSync(dir, { recursive: true, force: true });
          unregisterDir();
        },
      };
      return self;
    }
  } catch (e) {
    await daemon?.stop();
    rmSync(dir, { recursive: true, force: true });
    unregisterDir();
    throw e;
  }
}

/** swtpm_setup turns `--ownerpass P` into the TPM_AUTHDATA SHA-1(P) (as TrouSerS' tpm_takeownership does). */
export function ownerSecret(pass: Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha1").update(Buffer.from(hexArg(pass), "utf8")).digest());
}
