/**
 * The lab's machine kit, built and cached by `tests/scripts/vm/build.sh` (run by .ci/setup): the lab's Secure Boot
 * keys, OVMF variable stores with them enrolled, the signed lab HookOS images and the Node.js runtime share. See
 * the script's header for what each file is. This module only finds it: it never builds (a cold kit is setup's job;
 * `runSetupScript` returns at once when the kit is cached).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { runSetupScript } from "../harness/setupScript.js";

/** OVMF's code (read-only pflash). The `.secboot`/`.ms` builds need SMM, which TCG here does not give them. */
export const OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.fd";

/** The images a machine can be served: the lab HookOS signed by its key, by a key no db lists, or not at all. */
export type HookosImage = "hookos" | "hookos-rogue" | "hookos-unsigned";
/** Variable stores: the lab's keys with Secure Boot on, or the same keys with Secure Boot turned off. */
export type VarsStore = "secureboot" | "secureboot-off";

export interface LabKit {
  dir: string;
  /** PEM certificates of the lab's keys. */
  certs: { pk: string; kek: string; hookos: string; talos: string; rogue: string };
  /** Owner GUID of the enrolled entries. */
  ownerGuid: string;
  /** The policy's site authority sets (lab-pk, lab-kek, lab-db, hookos-signer): the server's --site-authorities. */
  siteAuthoritiesDir: string;
  image(which: HookosImage): string;
  vars(which: VarsStore): string;
  /** The lab OS: its UKI (signed with the Talos key) and the disk image the install writes (Talos-like GPT, META). */
  labos: { image: string; disk: string };
  /** The read-only share (virtio-9p) holding node, lldpd, Talos's advread and validate-config, their libraries. */
  runtimeDir: string;
  /** Debian's kernel release inside the images. */
  kernelRelease: string;
}

let cached: Promise<LabKit> | undefined;

/** The kit .ci/setup built (its directory comes from build.sh, which is a no-op when the kit is cached). */
export function labKit(): Promise<LabKit> {
  cached ??= runSetupScript("tests/scripts/vm/build.sh", { progress: "[vm-kit] ", needs: "bash .ci/setup" }).then(kitAt);
  return cached;
}

export function kitAt(dir: string): LabKit {
  const file = (...p: string[]) => {
    const f = join(dir, ...p);
    if (!existsSync(f)) throw new Error(`the lab machine kit at ${dir} lacks ${p.join("/")} (rebuild it: bash tests/scripts/vm/build.sh)`);
    return f;
  };
  const pem = (n: string) => readFileSync(file("keys", `${n}.crt`), "utf8");
  file("READY");
  return {
    dir,
    certs: { pk: pem("pk"), kek: pem("kek"), hookos: pem("hookos"), talos: pem("talos"), rogue: pem("rogue") },
    ownerGuid: readFileSync(file("keys", "owner.guid"), "utf8").trim(),
    siteAuthoritiesDir: file("site"),
    image: (which) => file("hookos", `${which}.efi`),
    vars: (which) => file("vars", `${which}.fd`),
    labos: { image: file("labos", "labos.efi"), disk: file("labos", "disk.img") },
    runtimeDir: file("runtime"),
    kernelRelease: readFileSync(file("kernel", "release"), "utf8").trim(),
  };
}
