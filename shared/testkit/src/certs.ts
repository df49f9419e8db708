/**
 * Throw-away CA certificates for tests (ECDSA P-256, self-signed), made at test time with the openssl CLI
 * (installed on every machine the tests run on; no certificate is stored in the repository).
 */
import { spawnSync } from "node:child_process";
import { certificatesFromPem } from "@fleetd/verify/x509";

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
  const [der] = certificatesFromPem(pem);
  if (!der) throw new Error("openssl printed no certificate");
  return { commonName, der, pem };
}
