/**
 * A follower's issuance: POST /internal/v1/issue to the replica whose internal URL the `fleetd-ca-signer` Lease
 * names (annotation fleetd.io/internal-url) — the leader's internal listener (internalListener.ts) — over mutual
 * TLS (this replica's client certificate; the leader's certificate verified against the peer CA and its name
 * against the URL's host) and authenticated with the peer secret; the answer's MAC and shape are checked before
 * anything in it is used. Every failure is a CaUnavailable (fail closed); an http: URL is never used.
 */
import type { IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { INTERNAL_TLS_MIN_VERSION, type InternalTls } from "./internalListener.js";
import { INTERNAL_URL_ANNOTATION, type LeaderElector } from "@fleetd/platform/kube";
import { CaUnavailable } from "./leaderIssuer.js";
import { signPeerRequest, verifyPeerResponse, PEER_SIGNATURE, PeerAuthError } from "./peerAuth.js";
import { ISSUE_PATH, IssueErrorBody, IssueResponseBody, resultFromWire, toWire, type IssueRequest, type IssueResult } from "./wire.js";

export interface ForwarderOptions {
  elector: Pick<LeaderElector, "holder" | "identity">;
  secret: Uint8Array;
  /** The peer CA (the leader's certificate must chain to it, and nothing else is trusted) and this replica's client identity. */
  tls: Pick<InternalTls, "ca" | "client">;
  /** Whole request, signing included (a YubiKey may wait for a touch). */
  timeoutMs?: number;
  now?: () => number;
}

const MAX_ANSWER_BYTES = 1024 * 1024;

interface Answer {
  status: number;
  body: Uint8Array;
  signature: string | undefined;
}

function post(url: URL, body: Uint8Array, headers: Record<string, string>, o: ForwarderOptions): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      url,
      {
        method: "POST",
        headers: { ...headers, "content-type": "application/json", "content-length": String(body.length) },
        timeout: o.timeoutMs ?? 30_000,
        ca: o.tls.ca,
        cert: o.tls.client.cert,
        key: o.tls.client.key,
        minVersion: INTERNAL_TLS_MIN_VERSION,
        rejectUnauthorized: true,
      },
      (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          size += c.length;
          if (size > MAX_ANSWER_BYTES) req.destroy(new Error(`answer larger than ${MAX_ANSWER_BYTES} bytes`));
          else chunks.push(c);
        });
        res.on("end", () => {
          const sig = res.headers[PEER_SIGNATURE];
          resolve({ status: res.statusCode ?? 0, body: new Uint8Array(Buffer.concat(chunks)), signature: typeof sig === "string" ? sig : undefined });
        });
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer within ${o.timeoutMs ?? 30_000} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}

export function createForwarder(o: ForwarderOptions): (req: IssueRequest) => Promise<IssueResult> {
  const now = o.now ?? Date.now;
  return async (req) => {
    let holder;
    try {
      holder = await o.elector.holder();
    } catch (e) {
      throw new CaUnavailable("no-leader", `the CA signer lease cannot be read: ${(e as Error).message}`);
    }
    if (!holder) throw new CaUnavailable("no-leader", "no replica holds the CA signer lease");
    if (holder.identity === o.elector.identity) throw new CaUnavailable("no-leader", "this replica's own lease has lapsed; no other leader yet");
    const base = holder.annotations[INTERNAL_URL_ANNOTATION];
    let url: URL;
    try {
      url = new URL(ISSUE_PATH, base);
    } catch {
      throw new CaUnavailable("no-leader", `the leader ${holder.identity} published no usable internal URL (${INTERNAL_URL_ANNOTATION})`);
    }
    if (url.protocol !== "https:") throw new CaUnavailable("no-leader", `the leader ${holder.identity} published ${url.protocol} as its internal URL (${INTERNAL_URL_ANNOTATION}); only https: (mutual TLS) is used`);
    const body = new Uint8Array(Buffer.from(JSON.stringify(toWire(req)), "utf8"));
    const { headers, nonce } = signPeerRequest(o.secret, "POST", ISSUE_PATH, body, now(), holder.identity);
    let answer: Answer;
    try {
      answer = await post(url, body, headers, o);
    } catch (e) {
      throw new CaUnavailable("forward-failed", `forwarding to the leader ${holder.identity} (${url.origin}) failed: ${(e as Error).message}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(Buffer.from(answer.body).toString("utf8"));
    } catch {
      throw new CaUnavailable("forward-failed", `the leader ${holder.identity} answered ${answer.status} with a body that is not JSON`);
    }
    if (answer.status !== 200) {
      const err = IssueErrorBody.safeParse(json);
      throw new CaUnavailable("forward-failed", `the leader ${holder.identity} refused (${answer.status}): ${err.success ? `${err.data.error}: ${err.data.detail}` : "unexpected answer"}`);
    }
    try {
      verifyPeerResponse(o.secret, nonce, answer.status, answer.body, answer.signature);
    } catch (e) {
      throw new CaUnavailable("forward-failed", `the answer of ${holder.identity}: ${e instanceof PeerAuthError ? e.message : String(e)}`);
    }
    const ok = IssueResponseBody.safeParse(json);
    if (!ok.success) throw new CaUnavailable("forward-failed", `the leader ${holder.identity} answered with an unexpected shape: ${ok.error.issues[0]?.message ?? ""}`);
    return resultFromWire(ok.data);
  };
}
