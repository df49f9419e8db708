/**
 * POST /internal/v1/issue (openapi-internal.yaml) — a follower's forwarded issuance, served by every replica on
 * its internal listener only (internalListener.ts: the TLS handshake already required a client certificate from
 * the peer CA) and answered only by the CA signer's leader (others: 503 not-leader). Order: size limit, peer MAC
 * over the raw bytes (constant time, timestamp window, nonce once), JSON and zod, TPMT_PUBLIC decoding, then the
 * leader's own issuance. The answer carries a MAC bound to the request's nonce.
 */
import { TLSSocket } from "node:tls";
import express, { type NextFunction, type Request, type Response, type Router } from "express";
import { ParseError } from "@fleetd/verify/codec";
import { CaUnavailable, type LeaderIssuer, type LeaderIssuerLog } from "./leaderIssuer.js";
import { PeerAuthError, signPeerResponse, PEER_SIGNATURE, type PeerVerifier } from "./peerAuth.js";
import { fromWire, ISSUE_PATH, IssueRequestBody, MAX_ISSUE_BODY_BYTES, resultToWire, type IssueErrorBody } from "./wire.js";
import type { z } from "zod";

export interface InternalApiDeps {
  issuer: Pick<LeaderIssuer, "issueLocal">;
  verifier: PeerVerifier;
  secret: Uint8Array;
  log: LeaderIssuerLog;
  now?: () => number;
}

/** The client certificate's subject CN (for logs: which replica's certificate sent this). */
function peerName(req: Request): string | undefined {
  if (!(req.socket instanceof TLSSocket)) return undefined;
  const cn = req.socket.getPeerCertificate().subject?.CN;
  return cn === undefined ? undefined : String(cn);
}

export function internalRouter(d: InternalApiDeps): Router {
  const router = express.Router();
  router.post(ISSUE_PATH, express.raw({ type: () => true, limit: MAX_ISSUE_BODY_BYTES }), async (req: Request, res: Response) => {
    let nonce: string | undefined;
    const answer = (status: number, body: unknown): void => {
      const bytes = Buffer.from(JSON.stringify(body), "utf8");
      if (nonce) res.setHeader(PEER_SIGNATURE, signPeerResponse(d.secret, nonce, status, new Uint8Array(bytes)));
      res.status(status).type("application/json").send(bytes);
    };
    const refuse = (status: number, error: z.infer<typeof IssueErrorBody>["error"], detail: string): void => answer(status, { error, detail });
    const raw = Buffer.isBuffer(req.body) ? new Uint8Array(req.body) : new Uint8Array(0);
    try {
      nonce = await d.verifier.verify("POST", ISSUE_PATH, raw, req.headers, (d.now ?? Date.now)());
    } catch (e) {
      if (e instanceof PeerAuthError) {
        d.log.warn({ code: e.code, from: req.socket.remoteAddress, peer: peerName(req) }, "internal issuance refused: peer authentication");
        return refuse(401, "peer-auth", `${e.code}: ${e.message}`);
      }
      throw e;
    }
    let json: unknown;
    try {
      json = JSON.parse(Buffer.from(raw).toString("utf8"));
    } catch {
      return refuse(400, "bad-request", "body is not JSON");
    }
    const body = IssueRequestBody.safeParse(json);
    if (!body.success) return refuse(400, "bad-request", body.error.issues.slice(0, 5).map((i) => `${i.path.join(".") || "<body>"}: ${i.message}`).join("; "));
    let issueReq;
    try {
      issueReq = fromWire(body.data);
    } catch (e) {
      if (e instanceof ParseError) return refuse(400, "bad-request", `public area: ${e.message}`);
      throw e;
    }
    try {
      const result = await d.issuer.issueLocal(issueReq);
      d.log.info({ node: issueReq.node, generation: issueReq.generation, ldevid: result.ldevid.serialHex, peer: peerName(req) }, "forwarded issuance signed");
      return answer(200, resultToWire(result));
    } catch (e) {
      if (e instanceof CaUnavailable) return refuse(503, e.code === "not-leader" ? "not-leader" : "signer-unavailable", e.message);
      d.log.error({ err: e }, "forwarded issuance failed");
      return refuse(500, "internal", "issuance failed on the leader");
    }
  });
  router.use(ISSUE_PATH, (err: { type?: string; status?: number }, _req: Request, res: Response, _next: NextFunction) => {
    const tooLarge = err.type === "entity.too.large";
    res.status(tooLarge ? 413 : 400).json({ error: "bad-request", detail: tooLarge ? `body larger than ${MAX_ISSUE_BODY_BYTES} bytes` : "the body could not be read" });
  });
  return router;
}
