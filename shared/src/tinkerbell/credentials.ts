/**
 * BMC credentials from the nodes file's reference, for Rufio's Secret (keys `username`, `password`):
 *  - `secret:<namespace>/<name>` — the Secret exists already (an operator or an external-secrets operator keeps
 *    it): the Machine references it; fleetd never reads it.
 *  - `env:<PREFIX>` — `<PREFIX>_USERNAME` and `<PREFIX>_PASSWORD` in fleetd's environment.
 *  - `file:<path>` — a directory holding `username` and `password` files (a mounted Secret), or a JSON/YAML
 *    file `{username, password}`.
 *  - `vault:` — refused: this deployment has no Vault client (use an external-secrets operator and `secret:`).
 * Errors never contain a credential.
 */
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { TinkerbellError } from "./errors.js";

export type ResolvedCredentials = { kind: "secret"; namespace: string; name: string } | { kind: "inline"; username: string; password: string };

const Pair = z.strictObject({ username: z.string().min(1).max(256), password: z.string().min(1).max(1024) });
const K8S_NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

function oneLine(v: string | undefined, what: string): string {
  const s = (v ?? "").replace(/\r?\n$/, "");
  if (s.length === 0 || /[\r\n\0]/.test(s)) throw new TinkerbellError("credentials_unavailable", `${what} is missing, empty or not one line`);
  return s;
}

function readText(path: string, what: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new TinkerbellError("credentials_unavailable", `${what}: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}`);
  }
}

export function resolveCredentials(ref: string, env: NodeJS.ProcessEnv = process.env): ResolvedCredentials {
  const colon = ref.indexOf(":");
  const scheme = colon > 0 ? ref.slice(0, colon) : "";
  const rest = ref.slice(colon + 1);
  switch (scheme) {
    case "secret": {
      const [ns, name, extra] = rest.split("/");
      if (!ns || !name || extra !== undefined || !NAMESPACE.test(ns) || !K8S_NAME.test(name)) {
        throw new TinkerbellError("invalid_input", `credentials reference ${ref}: secret: needs <namespace>/<name>`);
      }
      return { kind: "secret", namespace: ns, name };
    }
    case "env": {
      if (!/^[A-Za-z_][A-Za-z0-9_]{0,200}$/.test(rest)) throw new TinkerbellError("invalid_input", `credentials reference ${ref}: env: needs a variable prefix`);
      return { kind: "inline", username: oneLine(env[`${rest}_USERNAME`], `environment variable ${rest}_USERNAME`), password: oneLine(env[`${rest}_PASSWORD`], `environment variable ${rest}_PASSWORD`) };
    }
    case "file": {
      if (!rest.startsWith("/")) throw new TinkerbellError("invalid_input", `credentials reference ${ref}: file: needs an absolute path`);
      let dir = false;
      try {
        dir = statSync(rest).isDirectory();
      } catch (e) {
        throw new TinkerbellError("credentials_unavailable", `credentials file ${rest}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}`);
      }
      if (dir) return { kind: "inline", username: oneLine(readText(join(rest, "username"), "credentials"), `${rest}/username`), password: oneLine(readText(join(rest, "password"), "credentials"), `${rest}/password`) };
      let raw: unknown;
      try {
        raw = parseYaml(readText(rest, "credentials"), { maxAliasCount: 10 });
      } catch {
        throw new TinkerbellError("credentials_unavailable", `credentials file ${rest} is not JSON/YAML {username, password}`);
      }
      const r = Pair.safeParse(raw);
      if (!r.success) throw new TinkerbellError("credentials_unavailable", `credentials file ${rest}: needs exactly {username, password} (non-empty strings)`);
      return { kind: "inline", ...r.data };
    }
    case "vault":
      throw new TinkerbellError("credentials_unsupported", `credentials reference ${ref}: vault: is not supported by this deployment (fleetd has no Vault client); sync the secret into Kubernetes (e.g. external-secrets) and use secret:<namespace>/<name>`);
    default:
      throw new TinkerbellError("invalid_input", `credentials reference ${ref}: unknown scheme (env:, file:, secret:, vault:)`);
  }
}
