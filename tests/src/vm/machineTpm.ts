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
import { registerCleanup, startDaemon, waitFor, type Daemon } from "../harness/process.js";

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

export async function manufactureMachineTpm(opts: MachineTpmOptions): Promise<MachineTpm> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-vm-tpm-"));
  const unregister = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  try {
    const layout = await manufacture(dir, { caDir: opts.caDir, pcrBanks: opts.pcrBanks ?? ["sha256"], ekCerts: true, platformCert: true }, 120_000);
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
