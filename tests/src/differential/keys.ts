/**
 * EKs and AKs made with tpm2-tools 5.4 exactly as a machine would make them, as files in a work dir:
 *   tpm2_createek -G rsa|ecc -c ek.ctx -u ek.pub                       (ek.pub: TPM2B_PUBLIC, "tss" format)
 *   tpm2_createak -C ek.ctx -c ak.ctx -G rsa|ecc -g sha256 -s rsassa|ecdsa -u ak.pub -n ak.name
 *                                                                      (ak.pub: TPM2B_PUBLIC; ak.name: binary Name)
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Swtpm } from "../harness/swtpm.js";

export type KeyAlg = "rsa" | "ecc";

export interface Ek {
  alg: KeyAlg;
  /** Saved context, for `-C` of createak/activatecredential. */
  ctx: string;
  /** TPM2B_PUBLIC as `tpm2_createek -u` writes it. */
  pub: string;
}

export interface Ak {
  alg: KeyAlg;
  ctx: string;
  /** TPM2B_PUBLIC as `tpm2_createak -u` writes it. */
  pub: string;
  /** The Name (`tpm2_createak -n`), nameAlg ‖ digest. */
  name: Buffer;
}

export async function createEk(tpm: Swtpm, dir: string, alg: KeyAlg, label: string): Promise<Ek> {
  const ek = { alg, ctx: join(dir, `${label}.ctx`), pub: join(dir, `${label}.pub`) };
  await tpm.tpm2("createek", ["-G", alg, "-c", ek.ctx, "-u", ek.pub], { cwd: dir });
  return ek;
}

export async function createAk(tpm: Swtpm, dir: string, ek: Ek, alg: KeyAlg, label: string): Promise<Ak> {
  const ctx = join(dir, `${label}.ctx`);
  const pub = join(dir, `${label}.pub`);
  const nameFile = join(dir, `${label}.name`);
  await tpm.tpm2(
    "createak",
    ["-C", ek.ctx, "-c", ctx, "-G", alg, "-g", "sha256", "-s", alg === "rsa" ? "rsassa" : "ecdsa", "-u", pub, "-n", nameFile],
    { cwd: dir },
  );
  return { alg, ctx, pub, name: readFileSync(nameFile) };
}

/** Extend PCRs in the sha1 and sha256 banks with random digests so quoted values are not all zero. */
export async function extendPcrs(tpm: Swtpm, pcrs: readonly number[], random: (n: number) => string): Promise<void> {
  for (const pcr of pcrs) {
    await tpm.tpm2("pcrextend", [`${pcr}:sha1=${random(20)},sha256=${random(32)}`]);
  }
}
