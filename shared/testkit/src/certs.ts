/**
 * Throw-away CA certificates for tests (ECDSA P-256, self-signed), made at test time with the openssl CLI
 * (installed on every machine the tests run on; no certificate is stored in the repository).
 */
import { spawnSync } from "node:child_process";

export interface TestCert {
  commonName: string;
  der: Uint8Array;
  pem: string;
}

export async function makeTestCa(commonName: string): Promise<TestCert> {
  const r = spawnSync(
    "openssl",
    ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "/dev/null", "-subj", `/CN=${commonName}/O=fleetd test`, "-days", "2", "-outform", "PEM"],
    { encoding: "utf8" },
  );
  if (r.status !== 0) throw new Error(`openssl req failed: ${r.stderr || r.error?.message}`);
  const pem = r.stdout;
  const b64 = /-----BEGIN CERTIFICATE-----([\s\S]+?)-----END CERTIFICATE-----/.exec(pem)?.[1];
  if (!b64) throw new Error("openssl printed no certificate");
  return { commonName, der: new Uint8Array(Buffer.from(b64.replace(/\s+/g, ""), "base64")), pem };
}
