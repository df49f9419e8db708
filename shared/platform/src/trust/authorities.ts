/** Resolves a profile's authority references: built-in sets, or site sets read from the site's directory. */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { AUTHORITY_REF, BUILTIN_AUTHORITIES, AuthorityConfigError, type AuthoritySet, readCertificates } from "@fleetd/verify/policy";
import { fileStamp } from "./profiles.js";

const SITE_EXTENSIONS = [".pem", ".crt", ".cer", ".der"];

function siteSet(ref: string, name: string, siteDir: string | undefined): AuthoritySet {
  if (!siteDir) return { ref, certs: [] };
  for (const ext of SITE_EXTENSIONS) {
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

/**
 * resolveAuthorities for a server: the sets of a list of references are resolved once, and again only when one
 * of the site files they could come from appears, disappears or changes (fileStamp). Returned maps are shared
 * between evaluations: read only.
 */
export class AuthorityCache {
  private readonly entries = new Map<string, { stamp: string; authorities: ReadonlyMap<string, AuthoritySet> }>();
  constructor(
    private readonly siteDir: string | undefined,
    private readonly max = 256,
  ) {}

  private stamp(refs: readonly string[]): string {
    const siteDir = this.siteDir;
    if (!siteDir) return "";
    const names = refs.filter((r) => r.startsWith("site:")).map((r) => r.slice("site:".length));
    return names.map((n) => SITE_EXTENSIONS.map((ext) => fileStamp(join(siteDir, n + ext)) ?? "-").join(",")).join(";");
  }

  resolve(refs: readonly string[]): ReadonlyMap<string, AuthoritySet> {
    const key = refs.join("\n");
    const stamp = this.stamp(refs);
    const hit = this.entries.get(key);
    if (hit && hit.stamp === stamp) return hit.authorities;
    const authorities = resolveAuthorities(refs, this.siteDir);
    if (this.entries.size >= this.max) this.entries.clear();
    this.entries.set(key, { stamp, authorities });
    return authorities;
  }
}
