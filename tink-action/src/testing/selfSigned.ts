/** Self-signed certificates made with the openssl CLI, for tests (a CA to pin, a server certificate, leaves). */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface SelfSigned {
  /** PEM certificate and PKCS#8 key. */
  cert: string;
  key: string;
  der: Uint8Array;
}

/** An EC P-256 self-signed certificate for `cn`, valid one day; `san` adds subjectAltNames (e.g. "IP:127.0.0.1"). */
export function selfSigned(cn: string, san: string[] = []): SelfSigned {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-cert-"));
  try {
    const args = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", join(dir, "k.pem"), "-out", join(dir, "c.pem"), "-days", "1", "-subj", `/CN=${cn}`];
    if (san.length) args.push("-addext", `subjectAltName=${san.join(",")}`);
    const r = spawnSync("openssl", args, { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`openssl req failed: ${r.stderr}`);
    const d = spawnSync("openssl", ["x509", "-in", join(dir, "c.pem"), "-outform", "DER", "-out", join(dir, "c.der")], { encoding: "utf8" });
    if (d.status !== 0) throw new Error(`openssl x509 failed: ${d.stderr}`);
    return { cert: readFileSync(join(dir, "c.pem"), "utf8"), key: readFileSync(join(dir, "k.pem"), "utf8"), der: new Uint8Array(readFileSync(join(dir, "c.der"))) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
