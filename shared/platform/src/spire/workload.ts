/**
 * The SPIFFE Workload API's `FetchX509SVID`, as a workload calls it on the SPIRE agent's socket: the first answer
 * of the stream (the SVIDs the agent holds for the caller, whom it identifies by the socket's peer credentials),
 * then the stream is cancelled. An agent with no SVID for the caller answers PERMISSION_DENIED ("no identity
 * issued"): a `spire-refused` error.
 */
import * as grpc from "@grpc/grpc-js";
import type { MethodDefinition } from "@grpc/proto-loader";
import { z } from "zod";
import { DerReader, TAG, parseCertificate, tlvBytes } from "@fleetd/verify/x509";
import { fromServiceError, SpireApiError } from "./errors.js";
import { workloadApi } from "./proto.js";
import { parseSpiffeId } from "./spiffeId.js";
import { readAnswer } from "./wire.js";

export interface X509Svid {
  readonly spiffeId: string;
  /** The SVID certificate first, then its intermediates (DER). */
  readonly certificates: readonly Uint8Array[];
  /** PKCS#8 DER. */
  readonly privateKey: Uint8Array;
  /** The trust domain's X.509 authorities (DER). */
  readonly bundle: readonly Uint8Array[];
  readonly hint: string;
}

const X509SvidResponse = z.object({
  svids: z.array(
    z.object({
      spiffe_id: z.string(),
      x509_svid: z.instanceof(Buffer),
      x509_svid_key: z.instanceof(Buffer),
      bundle: z.instanceof(Buffer),
      hint: z.string(),
    }),
  ),
});

/** Concatenated DER certificates (how the Workload API carries chains and bundles), one by one. */
export function splitDerCertificates(buf: Uint8Array, what: string): Uint8Array[] {
  const r = DerReader.of(buf, what);
  const out: Uint8Array[] = [];
  while (!r.atEnd) out.push(tlvBytes(r.next(TAG.SEQUENCE, "Certificate")));
  return out;
}

const RPC = "SpiffeWorkloadAPI/FetchX509SVID";

/** The caller's X.509-SVIDs from the agent's Workload API socket (`agent { socket_path }`). */
export async function fetchX509Svids(socketPath: string, opts: { timeoutMs?: number } = {}): Promise<X509Svid[]> {
  const m = (workloadApi()["SpiffeWorkloadAPI"] as Record<string, MethodDefinition<object, unknown>>)["FetchX509SVID"] as MethodDefinition<object, unknown>;
  const client = new grpc.Client(`unix://${socketPath}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  md.set("workload.spiffe.io", "true");
  try {
    const first = await new Promise<unknown>((resolve, reject) => {
      const stream = client.makeServerStreamRequest(m.path, m.requestSerialize, m.responseDeserialize, {}, md, { deadline: Date.now() + (opts.timeoutMs ?? 30_000) });
      let done = false;
      stream.on("data", (v: unknown) => {
        if (done) return;
        done = true;
        resolve(v);
        stream.cancel();
      });
      stream.on("error", (e: grpc.ServiceError) => {
        if (!done) reject(fromServiceError(RPC, e));
        done = true;
      });
      stream.on("end", () => {
        if (!done) reject(new SpireApiError("spire-bad-response", RPC, undefined, "the stream ended without an answer"));
        done = true;
      });
    });
    const a = readAnswer(RPC, X509SvidResponse, first);
    return a.svids.map((s, i) => {
      try {
        const certificates = splitDerCertificates(s.x509_svid, `svids[${i}].x509_svid`);
        if (certificates.length === 0) throw new Error("no certificate");
        parseCertificate(certificates[0] as Uint8Array); // parses, or throws
        parseSpiffeId(s.spiffe_id);
        return { spiffeId: s.spiffe_id, certificates, privateKey: new Uint8Array(s.x509_svid_key), bundle: splitDerCertificates(s.bundle, `svids[${i}].bundle`), hint: s.hint };
      } catch (e) {
        throw new SpireApiError("spire-bad-response", RPC, undefined, `svids[${i}]: ${(e as Error).message}`);
      }
    });
  } finally {
    client.close();
  }
}
