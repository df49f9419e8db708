/**
 * The CA bundle state file on disk: read and checked at start (shared/platform/src/pki/bundleState.ts), rewritten
 * atomically after every issuance — a temporary file in the same directory, fsync, rename, fsync of the
 * directory — so a crash leaves either the old or the new state, never half a file. The issuer records an
 * issuance here before the certificate is released (shared/platform/src/pki/bundle.ts).
 */
import { readFileSync } from "node:fs";
import { writeFileAtomic } from "@fleetd/platform/state";
import { parseBundleState, serializeBundleState, type BundleState } from "@fleetd/platform/pki";
import { ConfigError } from "@fleetd/platform/fleet";

export function loadBundleStateFile(path: string): BundleState {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? "unreadable";
    throw new ConfigError(
      `server.ca.bundleStateFile: cannot read ${path}: ${code}${code === "ENOENT" ? " (create the CA and its bundle state first: shared/platform/src/pki/README.md)" : ""}`,
    );
  }
  return parseBundleState(text, `CA bundle state ${path}`);
}

export function saveBundleStateFile(path: string, state: BundleState): void {
  writeFileAtomic(path, serializeBundleState(state), 0o600);
}
