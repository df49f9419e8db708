/**
 * A lab machine's TPM: swtpm state manufactured once, like a real TPM in its factory (EKs and EK certificates
 * issued by a manufacturing CA — the same swtpm_setup + swtpm-localca as every test TPM, tests/src/harness/swtpm.ts),
 * then served to QEMU by a fresh `swtpm socket` per boot on a Unix control socket (QEMU's `tpm-emulator` backend
 * hands swtpm its data channel over it and shuts it down at power-off). The state persists across boots, as a
 * TPM's does; PCRs do not.
 *
 * Only the SHA-256 PCR bank is allocated (every profile requires it; one bank saves firmware time under TCG).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ekBindingFromCertificate, readCertificate } from "@fleetd/verify/ek";
import { manufacture, type PcrBank } from "../harness/swtpm.js";
import { registerCleanup, runProcess, startDaemon, waitFor, type Daemon } from "../harness/process.js";
import { freePort, portOpen } from "../harness/ports.js";

export interface MachineTpm {
  /** Everything of this TPM lives below it (removed by `remove()`). */
  readonly dir: string;
  readonly stateDir: string;
  /** The manufacturing CA (a swtpm-localca directory) that issued its EK certificates. */
  readonly caDir: string;
  /** Its EK certificates (DER) as swtpm_setup wrote them, and their EK bindings (what a nodes file approves). */
  readonly ek: { rsa: { certFile: string; binding: string }; ecc: { certFile: string; binding: string } };
  /** Start swtpm for one boot; QEMU connects to `ctrlSocket`. */
  serve(): Promise<ServedTpm>;
  /** Remove the state (stop any boot's swtpm first). */
  remove(): void;
}

export interface ServedTpm {
  readonly ctrlSocket: string;
  readonly daemon: Daemon;
  stop(): Promise<void>;
}

export interface MachineTpmOptions {
  /** The manufacturing CA's directory; created on first use, shared by every TPM of one "manufacturer". */
  caDir: string;
  pcrBanks?: readonly PcrBank[];
}

/**
 * The TPM's dictionary-attack policy as a PC's TPM leaves the factory with it rather than libtpms's (3 tries, a try
 * forgiven every 1000 s): 32 tries, one forgiven every 10 minutes. A TPM counts a reset without TPM2_Shutdown as a
 * failed try, and every hard power-off by a BMC (Rufio's `off`, the netboot Jobs') is one — with 3 tries a lab
 * machine's fourth boot had its EK locked out (TPM_RC_LOCKOUT at ActivateCredential) after intake, provision and the
 * installed OS. Set with tpm2_dictionarylockout over the lockout hierarchy (empty auth, as manufactured), then an
 * orderly TPM2_Shutdown.
 */
async function setDictionaryAttackPolicy(dir: string, stateDir: string): Promise<void> {
  const port = await freePort();
  const tcti = `swtpm:host=127.0.0.1,port=${port}`;
  const d = startDaemon("swtpm (manufacturing)", "swtpm", ["socket", "--tpm2", "--tpmstate", `dir=${stateDir}`, "--server", `type=tcp,port=${port},bindaddr=127.0.0.1`, "--ctrl", `type=tcp,port=${port + 1},bindaddr=127.0.0.1`, "--flags", "not-need-init,startup-clear", "--log", `file=${join(dir, "manufacturing.log")},level=1`]);
  try {
    await waitFor("the manufacturing swtpm did not listen", async () => portOpen(port), { timeoutMs: 20_000, abort: () => (d.hasExited() ? `swtpm exited: ${d.output()}` : undefined) });
    for (const args of [["dictionarylockout", "--setup-parameters", "--max-tries=32", "--recovery-time=600", "--lockout-recovery-time=600"], ["shutdown"]]) {
      const r = await runProcess(`tpm2_${args[0]}`, [...args.slice(1), "-T", tcti], { timeoutMs: 30_000 });
      if (r.code !== 0) throw new Error(`tpm2_${args.join(" ")}: ${r.stderr.toString()}`);
    }
  } finally {
    await d.stop();
  }
}

export async function manufactureMachineTpm(opts: MachineTpmOptions): Promise<MachineTpm> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-vm-tpm-"));
  const unregister = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  try {
    const layout = await manufacture(dir, { caDir: opts.caDir, pcrBanks: opts.pcrBanks ?? ["sha256"], ekCerts: true, platformCert: true }, 120_000);
    await setDictionaryAttackPolicy(dir, layout.stateDir);
    const ek = (file: string) => {
      const certFile = join(layout.certsDir, file);
      return { certFile, binding: ekBindingFromCertificate(readCertificate(new Uint8Array(readFileSync(certFile))).cert) };
    };
    let boot = 0;
    return {
      dir,
      stateDir: layout.stateDir,
      caDir: layout.caDir,
      ek: { rsa: ek(`ek-rsa${layout.rsaBits}.crt`), ecc: ek("ek-secp384r1.crt") },
      async serve() {
        boot++;
        const ctrlSocket = join(dir, `ctrl-${boot}.sock`);
        const logFile = join(dir, `swtpm-${boot}.log`);
        const daemon = startDaemon("swtpm (machine)", "swtpm", ["socket", "--tpm2", "--tpmstate", `dir=${layout.stateDir}`, "--ctrl", `type=unixio,path=${ctrlSocket}`, "--log", `file=${logFile},level=1`]);
        await waitFor("the machine's swtpm did not open its control socket", async () => existsSync(ctrlSocket), {
          timeoutMs: 20_000,
          abort: () => (daemon.hasExited() ? `swtpm exited: ${daemon.output()}${existsSync(logFile) ? readFileSync(logFile, "utf8") : ""}` : undefined),
        });
        return { ctrlSocket, daemon, stop: () => daemon.stop() };
      },
      remove() {
        rmSync(dir, { recursive: true, force: true });
        unregister();
      },
    };
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    unregister();
    throw e;
  }
}
