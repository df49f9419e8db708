/** Resolves a profile's authority references: built-in sets, or site sets read from the site's directory. */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { AUTHORITY_REF, BUILTIN_AUTHORITIES, AuthorityConfigError, type AuthoritySet, readCertificates } from "@fleetd/verify/policy";

function siteSet(ref: string, name: string, siteDir: string | undefined): AuthoritySet {
  if (!siteDir) return { ref, certs: [] };
  for (const ext of [".pem", ".crt", ".cer", ".der"]) {
    const path = join(siteDir, name + ext);
    if (!existsSync(path)) continue;
    const certs = readCertificates(new Uint8Array(readFileSync(path)), path);
    return { ref, certs: certs.map((c) => ({ sha256: c.sha256, commonName: c.commonName })), source: path };
  }
  return { ref, certs: [] };
}

export function resolveAuthorities(refs: readonly string[], siteDir?: string): Map<string, AuthoritySet> {
  const out = new Map<string, AuthoritySet>();
  for (const ref of refs) {
    if (!AUTHORITY_REF.test(ref)) throw new AuthorityConfigError("bad-reference", `authority reference ${JSON.stringify(ref)} is malformed`);
    const [kind, name] = ref.split(":") as [string, string];
    if (kind === "builtin") {
      const b = BUILTIN_AUTHORITIES[name];
      if (!b) throw new AuthorityConfigError("bad-reference", `unknown built-in authority ${ref} (known: ${Object.keys(BUILTIN_AUTHORITIES).join(", ")})`);
      out.set(ref, { ref, certs: b.map((c) => ({ sha256: c.sha256, commonName: c.commonName })), source: "built in" });
    } else {
      out.set(ref, siteSet(ref, name, siteDir));
    }
  }
  return out;
}
