/**
 * Throw-away X.509 PKIs on disk for tests (the openssl CLI, ECDSA P-256, two days): a CA and leaf certificates
 * it signs, as `<name>.crt`/`<name>.key` in one directory. The test Kubernetes control plane's PKI
 * (tests/src/harness/kube.ts) and the HA replicas' peer PKI are both made here. (certs.ts makes bare CA
 * certificates in memory; this one writes files a server reads.)
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/** openssl with `args` in `cwd`; throws with its stderr on failure. */
export function runOpenssl(args: string[], cwd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile("openssl", args, { cwd, timeout: 30_000 }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`openssl ${args.join(" ")} failed: ${String(stderr).trim() || err.message}`));
      else resolve();
    });
  });
}

/** openssl genpkey arguments for a P-256 key written to `file`. */
export const ecKeyArgs = (file: string): string[] => ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", file];

/** `<ca>.crt`/`<ca>.key` in `dir`: a self-signed CA certificate (basicConstraints cA, keyCertSign). */
export async function makeCa(dir: string, ca: string, commonName: string): Promise<void> {
  await runOpenssl(ecKeyArgs(`${ca}.key`), dir);
  await runOpenssl(["req", "-x509", "-new", "-key", `${ca}.key`, "-subj", `/CN=${commonName}`, "-days", "2", "-sha256",
    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    "-out", `${ca}.crt`], dir);
}

/** A leaf certificate `<name>.crt`/`<name>.key` in `dir` signed by `<ca>.crt`/`<ca>.key`, with the extensions `ext` (openssl extfile lines). */
export async function makeLeaf(dir: string, ca: string, name: string, subject: string, ext: string[]): Promise<void> {
  await runOpenssl(ecKeyArgs(`${name}.key`), dir);
  await runOpenssl(["req", "-new", "-key", `${name}.key`, "-subj", subject, "-out", `${name}.csr`], dir);
  writeFileSync(join(dir, `${name}.ext`), ext.join("\n") + "\n");
  const serial = "0x" + randomBytes(16).toString("hex").replace(/^./, "1");
  await runOpenssl(["x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.crt`, "-CAkey", `${ca}.key`, "-set_serial", serial,
    "-days", "2", "-sha256", "-extfile", `${name}.ext`, "-out", `${name}.crt`], dir);
}

/** Extensions of a TLS client certificate. */
export const CLIENT_EXT = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature", "extendedKeyUsage=clientAuth"];

/** Extensions of a TLS server certificate for `sans` (openssl form, e.g. "IP:127.0.0.1", "DNS:localhost"). */
export const serverExt = (sans: string[]): string[] => [
  "basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature", "extendedKeyUsage=serverAuth", `subjectAltName=${sans.join(",")}`,
];
