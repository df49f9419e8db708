import { createHash } from "node:crypto";

/**
 * SPIFFE IDs (`spiffe://<trust domain><path>`), checked as the SPIFFE standard (SPIFFE-ID.md §2) and SPIRE
 * (go-spiffe `v2/spiffeid`) check them: scheme `spiffe`, a trust domain of lowercase letters, digits, `.`, `-`
 * and `_`, a path of `/`-separated segments of letters, digits, `.`, `-` and `_`, no empty, `.` or `..`
 * segment, no trailing `/`, no query, fragment, port or user info. The SPIRE API carries them as
 * `{ trust_domain, path }`; fleetd code passes the string form.
 */
export interface SpiffeIdParts {
  /** e.g. `lab.test` (no scheme) */
  readonly trustDomain: string;
  /** `""` for the trust domain's own ID, else starting with `/` */
  readonly path: string;
}

export class SpiffeIdError extends Error {
  override readonly name = "SpiffeIdError";
  constructor(
    readonly input: string,
    readonly detail: string,
  ) {
    super(`not a SPIFFE ID: ${JSON.stringify(input.length > 80 ? `${input.slice(0, 80)}…` : input)}: ${detail}`);
  }
}

const TRUST_DOMAIN = /^[a-z0-9._-]+$/;
const SEGMENT = /^[A-Za-z0-9._-]+$/;
/** SPIFFE-ID.md §2.3: URIs longer than 2048 bytes are not SPIFFE IDs. */
const MAX_LENGTH = 2048;

export function checkTrustDomain(td: string, input = td): void {
  if (td.length === 0) throw new SpiffeIdError(input, "the trust domain is empty");
  if (td.length > 255) throw new SpiffeIdError(input, "the trust domain is longer than 255 characters");
  if (!TRUST_DOMAIN.test(td)) throw new SpiffeIdError(input, "the trust domain may hold only lowercase letters, digits, '.', '-' and '_'");
}

/** A path of an ID (`""`, or `/seg/seg…`). */
export function checkPath(path: string, input = path): void {
  if (path === "") return;
  if (!path.startsWith("/")) throw new SpiffeIdError(input, "the path must start with '/'");
  for (const seg of path.slice(1).split("/")) {
    if (seg === "") throw new SpiffeIdError(input, "the path has an empty segment (or a trailing '/')");
    if (seg === "." || seg === "..") throw new SpiffeIdError(input, "the path has a '.' or '..' segment");
    if (!SEGMENT.test(seg)) throw new SpiffeIdError(input, `the path segment ${JSON.stringify(seg)} may hold only letters, digits, '.', '-' and '_'`);
  }
}

export function parseSpiffeId(input: string): SpiffeIdParts {
  if (input.length > MAX_LENGTH) throw new SpiffeIdError(input, `longer than ${MAX_LENGTH} characters`);
  const m = /^spiffe:\/\/([^/]*)(\/.*)?$/.exec(input);
  if (!m) throw new SpiffeIdError(input, "it must start with spiffe://");
  const trustDomain = m[1] as string;
  const path = m[2] ?? "";
  checkTrustDomain(trustDomain, input);
  checkPath(path, input);
  return { trustDomain, path };
}

export function formatSpiffeId(id: SpiffeIdParts): string {
  const s = `spiffe://${id.trustDomain}${id.path}`;
  checkTrustDomain(id.trustDomain, s);
  checkPath(id.path, s);
  return s;
}

/** `spiffe://<td>/spire/server`: the parent of node alias entries (SPIRE `pkg/server/authorizedentries`). */
export function serverId(trustDomain: string): string {
  return formatSpiffeId({ trustDomain, path: "/spire/server" });
}

/**
 * The agent ID SPIRE's tpm_devid attestor derives from the LDevID leaf certificate it verified:
 * `spiffe://<td>/spire/agent/tpm_devid/<SHA-1 of the leaf's DER, lowercase hex>` (SPIRE
 * `pkg/server/plugin/nodeattestor/tpmdevid/devid.go`). A renewed certificate is a new agent ID.
 */
export function tpmDevidAgentId(trustDomain: string, ldevidLeafDer: Uint8Array): string {
  const sha1 = createHash("sha1").update(ldevidLeafDer).digest("hex");
  return formatSpiffeId({ trustDomain, path: `/spire/agent/tpm_devid/${sha1}` });
}
