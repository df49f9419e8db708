/** Reads a manufacturer CA store from a directory (the pure part, parsing and indexing, is @fleetd/verify's ek/store). */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { type CaStore, caStoreFrom, certificatesInFile, type StoreCertificate } from "@fleetd/verify/ek";
import { CertificateError } from "@fleetd/verify/x509";

/** Largest file read from a store (the biggest public TPM bundle is well under 1 MiB). */
const MAX_FILE = 16 * 1024 * 1024;

/** Load every certificate in `dir` (not recursive; dot-files are ignored). */
export function loadCaStore(dir: string): CaStore {
  let names: string[];
  try {
    if (!statSync(dir).isDirectory()) throw new CertificateError("bad-store", `CA store ${dir} is not a directory`);
    names = readdirSync(dir).filter((n) => !n.startsWith(".")).sort();
  } catch (e) {
    if (e instanceof CertificateError) throw e;
    throw new CertificateError("bad-store", `cannot read CA store ${dir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const entries: StoreCertificate[] = [];
  const skipped: CaStore["skipped"] = [];
  for (const name of names) {
    const path = join(dir, name);
    let bytes: Uint8Array;
    try {
      const st = statSync(path);
      if (!st.isFile()) continue;
      if (st.size > MAX_FILE) {
        skipped.push({ source: name, reason: `file is ${st.size} bytes (limit ${MAX_FILE})` });
        continue;
      }
      bytes = new Uint8Array(readFileSync(path));
    } catch (e) {
      skipped.push({ source: name, reason: `unreadable: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` });
      continue;
    }
    entries.push(...certificatesInFile(bytes, name, skipped));
  }
  return caStoreFrom(entries, skipped);
}

