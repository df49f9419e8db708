/** Kubernetes bootstrap tokens: `[a-z0-9]{6}.[a-z0-9]{16}` (token id . token secret), uniformly random. */
import { randomInt } from "node:crypto";

const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

function randomString(n: number): string {
  let s = "";
  for (let i = 0; i < n; i++) s += ALPHABET[randomInt(ALPHABET.length)];
  return s;
}

export interface BootstrapToken {
  /** The public part; the Secret is kube-system/bootstrap-token-<id>. */
  id: string;
  secret: string;
  /** `<id>.<secret>`, as cluster.token. */
  token: string;
}

export function newBootstrapToken(): BootstrapToken {
  const id = randomString(6);
  const secret = randomString(16);
  return { id, secret, token: `${id}.${secret}` };
}
