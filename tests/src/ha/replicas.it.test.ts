/**
 * Two talos-config-server replicas (in this process, each with its own Kubernetes clients, HTTP listener,
 * Lease candidate and PKCS#11 session) sharing the Kubernetes-backed state on one real kube-apiserver, the
 * attestation world's NetBox, swtpm machine and SoftHSM2 CA token (one token: PKCS#11 allows several sessions;
 * the point is that only the leader opens one and signs).
 *
 * Proved: one leader, and at no time two replicas with the token open; an attestation sent to the follower
 * is signed by the leader (the follower makes no signature); the same evidence sent to both replicas at once
 * yields one issuance (two signatures, two serials recorded, one 200); the same install code fetched from both
 * at once is served once; a forward with the wrong peer secret fails closed (503 `unavailable`, reason
 * `signer-unavailable`, journalled, nothing signed); the leader killed (halted without stepping down) → the other
 * takes the Lease once it lapses, opens the token and signs.
 *
 * The internal API is on each replica's own listener (talos-config-server's createInternalListener, mutual TLS
 * with the peer CA made here) and not on the public one: the public listener answers 404 to a correctly MACed
 * issuance request; the internal listener refuses a client without a certificate and one with a certificate from
 * another CA (no HTTP, nothing signed); a follower that does not trust the leader's certificate fails closed.
 */
import { Objects, TinkerbellWorkflowGate } from "@fleetd/platform/tinkerbell";
import { strict as assert } from "node:assert";
import { createServer, type Server } from "node:http";
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import pino from "pino";
import { loadKube, INTERNAL_URL_ANNOTATION, LeaderElector } from "@fleetd/platform/kube";
import { listDevices, readJournal } from "@fleetd/platform/netbox";
import { addCa, emptyBundleState, type BundleState, openPkcs11Signer, parseBundleState } from "@fleetd/platform/pki";
import { AttestationRefused, type ServerTransport } from "@fleetd/platform/protocol/client";
import { PkiIssuer } from "@fleetd/platform/protocol/server";
import { KubeAttestationStore } from "@fleetd/platform/state";
import { DEFAULT_LISTENER_LIMITS } from "@fleetd/platform/http";
import { createForwarder } from "@fleetd/talos-config-server/ha/forward";
import { createInternalListener, type InternalTls } from "@fleetd/talos-config-server/ha/internalListener";
import { internalRouter } from "@fleetd/talos-config-server/ha/internalApi";
import { LeaderIssuer, type OpenSigner } from "@fleetd/talos-config-server/ha/leaderIssuer";
import { BUNDLE_SECRET, SharedBundleState } from "@fleetd/talos-config-server/ha/sharedBundle";
import { PeerVerifier, PEER_SIGNATURE, signPeerRequest, verifyPeerResponse } from "@fleetd/talos-config-server/ha/peerAuth";
import { ISSUE_PATH, toWire, type IssueRequest } from "@fleetd/talos-config-server/ha/wire";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { freePort, waitFor } from "../harness/ports.js";
import { challenge, confirmBody, evidence, runHonest, sendConfirm, sendEvidence, unwrap, withMachine } from "../attestation/machine.js";
import { attestationServer, NODE, startWorld, type World } from "../attestation/world.js";
import { INTERNAL_OPENAPI_FILE, OpenApiValidator } from "../attestation/openapi.js";
import { makePeerPki, NoAnswer, peerPost, type PeerAnswer, type PeerPki } from "./peerTls.js";
import { TALOS_VERSION } from "../talos/goTools.js";

const NS = "fleetd";
const LEASE = "fleetd-ca-signer";
const fast = { leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 0.5 };

let cp: ControlPlane;
let w: World;
const secret = new Uint8Array(randomBytes(32));
/** The CA bundle state as the operator's file has it (each replica starts from it; records are shared by Secret). */
let fileBundle: BundleState;
/** Replicas with the token open right now, and the most ever at once. */
let openNow = 0;
let maxOpen = 0;
/** The last issuance a follower forwarded (for the document check at the end). */
let lastForwarded: IssueRequest | undefined;
const doc = OpenApiValidator.fromFile();
const internalDoc = OpenApiValidator.fromFile(INTERNAL_OPENAPI_FILE);
/** The peer CA and the replicas' certificates (and another CA's). */
let pki: PeerPki;

interface Replica {
  id: string;
  /** The public listener (attestation API, config fetch). */
  url: string;
  /** The internal listener (mutual TLS), the URL published on the Lease. */
  internalUrl: string;
  /** The internal API's routes (what the internal listener serves). */
  internalRoutes: string[];
  elector: LeaderElector;
  issuer: LeaderIssuer;
  store: KubeAttestationStore;
  transport: ServerTransport;
  /** Signatures this replica's token session made. */
  signatures: () => number;
  opens: () => number;
  /** SIGKILL, as far as the others can tell: no step-down, no Lease release; the listener gone. */
  kill(): Promise<void>;
  stop(): Promise<void>;
}

/** `forwardTls`: what the replica trusts and presents when it forwards (default: the peer CA and its client certificate). */
async function startReplica(id: string, opts: { secret?: Uint8Array; campaign?: boolean; forwardTls?: Pick<InternalTls, "ca" | "client"> } = {}): Promise<Replica> {
  const server: Server = createServer();
  await new Promise<void>((res) => server.listen(0, "127.0.0.1", res));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const kube = loadKube(cp.kubeconfig); // clients of its own
  const store = new KubeAttestationStore({ kube, namespace: NS });
  const log = pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" }).child({ replica: id });
  const internalPort = await freePort();
  const internalUrl = `https://127.0.0.1:${internalPort}`;
  const elector = new LeaderElector({ kube, namespace: NS, name: LEASE, identity: id, annotations: { [INTERNAL_URL_ANNOTATION]: internalUrl }, log, ...fast });
  let signatures = 0;
  let opens = 0;
  const now = () => new Date();
  const peerSecret = opts.secret ?? secret;
  const shared = new SharedBundleState(kube, NS, id);
  let bundle = fileBundle;
  const issuer = new LeaderIssuer({
    elector,
    async openSigner(): Promise<OpenSigner> {
      const s = await openPkcs11Signer(w.hsm.signerConfig("fleetd-ca", "ca"));
      bundle = await shared.load(fileBundle);
      opens++;
      openNow++;
      maxOpen = Math.max(maxOpen, openNow);
      return {
        publicKey: s.publicKey,
        signatureAlgorithm: s.signatureAlgorithm,
        description: s.description,
        sign: (data) => {
          signatures++;
          return s.sign(data);
        },
        async close() {
          openNow--;
          await s.close();
        },
      };
    },
    issuerFor: (signer) =>
      new PkiIssuer({
        signer,
        state: () => bundle,
        save: async (next) => {
          await shared.save(next);
          bundle = next;
        },
        lifetimeDays: 30,
        now,
      }),
    forward: (() => {
      const forward = createForwarder({ elector, secret: peerSecret, tls: opts.forwardTls ?? pki.tls });
      return (req: IssueRequest) => {
        lastForwarded = req;
        return forward(req);
      };
    })(),
    journal: w.inventory,
    log,
  });
  issuer.attach();
  const { app, outbox } = attestationServer({
    store,
    inventory: w.inventory,
    netbox: w.netbox,
    issuer,
    // the workload cluster's token Secrets are the CSR-gate tests' subject; here they are only recorded
    bootstrapTokens: { create: async () => undefined, delete: async () => false },
    siteAuthoritiesDir: w.siteAuthoritiesDir,
    ekCaDir: w.tpm.caDir,
    talosVersion: TALOS_VERSION,
    log,
    metrics: createMetrics(),
    now,
    workflows: new TinkerbellWorkflowGate(new Objects(w.kube, w.tinkerbellNamespace)),
  });
  server.on("request", app);
  // The internal API on its own listener, as server.ts wires it: mutual TLS with the peer CA, the API alone.
  const router = internalRouter({ issuer, verifier: new PeerVerifier(peerSecret, id, (token, expiresAt, at) => store.recordOnce(token, expiresAt, at)), secret: peerSecret, log });
  const internalServer = createInternalListener({ tls: pki.tls, limits: DEFAULT_LISTENER_LIMITS, router, log });
  await new Promise<void>((res) => internalServer.listen(internalPort, "127.0.0.1", res));
  const internalRoutes = (router.stack as { route?: { path: string; methods: Record<string, boolean> } }[])
    .flatMap((l) => (l.route ? Object.keys(l.route.methods).filter((m) => l.route?.methods[m]).map((m) => `${m} ${l.route?.path}`) : []))
    .sort();
  if (opts.campaign !== false) elector.start();
  const transport: ServerTransport = w.withWorkflows({
    async post(path, body) {
      const r = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    },
  });

  const closeServer = () =>
    Promise.all(
      [server, internalServer].map(
        (srv) =>
          new Promise<void>((res) => {
            srv.close(() => res());
            srv.closeAllConnections();
          }),
      ),
    );
  let stopped = false;
  return {
    id,
    url,
    internalUrl,
    internalRoutes,
    elector,
    issuer,
    store,
    transport,
    signatures: () => signatures,
    opens: () => opens,
    async kill() {
      stopped = true;
      await elector.halt();
      await closeServer();
      await outbox.stop(); // a dead process delivers nothing more; its claims go stale
      await issuer.close(); // a dead process's PKCS#11 session is gone with it
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await closeServer();
      await outbox.stop();
      await elector.stop();
      await issuer.close();
    },
  };
}

let a: Replica;
let b: Replica;
const replicas = (): Replica[] => [a, b];
const leader = (): Replica => {
  const l = replicas().filter((r) => r.elector.isLeader());
  assert.equal(l.length, 1, `exactly one leader (${l.map((r) => r.id).join(", ")})`);
  return l[0] as Replica;
};
const follower = (): Replica => replicas().find((r) => r !== leader()) as Replica;
/** Certificates recorded valid for the node (a serial reserved before a signing that did not happen stays void). */
const issued = async () => (await a.store.listIssued(await w.deviceId(NODE))).filter((r) => !r.voided).length;
const deviceId = async () => (await listDevices(w.admin, { name: [NODE] }))[0]?.id ?? 0;
/** The client side of a replica: trusts the peer CA, presents its client certificate. */
const peer = { get ca() { return pki.tls.ca; }, get cert() { return pki.tls.client.cert; }, get key() { return pki.tls.client.key; } };
/** The last forwarded issuance's body (a real node's public areas). */
const issueBody = (): Uint8Array => {
  assert.ok(lastForwarded, "a follower forwarded an issuance earlier");
  return new Uint8Array(Buffer.from(JSON.stringify(toWire(lastForwarded)), "utf8"));
};

before(async () => {
  [cp, w] = await Promise.all([startControlPlane(), startWorld({ talosVersion: TALOS_VERSION })]);
  await loadKube(cp.kubeconfig).core.createNamespace({ body: { metadata: { name: NS } } });
  pki = await makePeerPki(mkdtempSync(join(tmpdir(), "fleetd-peer-pki-")));
  fileBundle = addCa(emptyBundleState(), w.caPem, new Date(Date.now() - 3600_000));
  a = await startReplica("replica-a");
  b = await startReplica("replica-b");
  await waitFor("a leader", 30_000, async () => a.elector.isLeader() || b.elector.isLeader());
  await Promise.all([a.elector.settled(), b.elector.settled()]);
}, { timeout: 60 * 60_000 });

after(async () => {
  await a?.stop();
  await b?.stop();
  await w?.stop();
  await cp?.stop();
});

test("one leader holds the CA signer Lease and the token; the follower has no session open", async () => {
  const l = leader();
  assert.equal(l.issuer.signerOpen, true);
  assert.equal(follower().issuer.signerOpen, false);
  const lease = await loadKube(cp.kubeconfig).coordination.readNamespacedLease({ name: LEASE, namespace: NS });
  assert.equal(lease.spec?.holderIdentity, l.id);
  assert.equal(lease.metadata?.annotations?.[INTERNAL_URL_ANNOTATION], l.internalUrl, "the internal listener's URL, not the public one");
  assert.match(l.internalUrl, /^https:/);
  assert.equal(maxOpen, 1);
});

test("intake through the follower: the leader signs (2 signatures), the follower none; the certificates chain", async () => {
  const l = leader();
  const f = follower();
  const before = { l: l.signatures(), f: f.signatures(), issued: await issued() };
  const r = await runHonest(w, "intake", {}, f.transport);
  assert.equal(r.mode, "intake");
  assert.equal(l.signatures() - before.l, 2, "LDevID and LAK signed by the leader");
  assert.equal(f.signatures() - before.f, 0, "the follower signed nothing");
  assert.equal(f.opens(), 0, "the follower never opened the token");
  assert.equal((await issued()) - before.issued, 2, "two serials recorded in the shared state");
  assert.match(r.issued?.caBundle ?? "", /BEGIN CERTIFICATE/);
});

let installCode = "";

test("the same evidence sent to both replicas at once: one issuance, one 200; the other refused", async () => {
  const before = { sig: a.signatures() + b.signatures(), issued: await issued() };
  const wm = w.machines[NODE];
  assert.ok(wm);
  installCode = await withMachine(wm, a.transport, async (m) => {
    const s = await challenge(m, w.claims({ mode: "provision" }));
    const ev = await evidence(m, s);
    const results = await Promise.allSettled([sendEvidence({ ...m, server: a.transport }, ev.body), sendEvidence({ ...m, server: b.transport }, ev.body)]);
    const ok = results.filter((x) => x.status === "fulfilled");
    assert.equal(ok.length, 1, `one evidence accepted: ${JSON.stringify(results.map((x) => (x.status === "fulfilled" ? "ok" : String((x.reason as Error).message))))}`);
    const lost = results.find((x) => x.status === "rejected");
    assert.ok(lost && lost.reason instanceof AttestationRefused, "the other is a refusal, not an error");
    const accepted = (ok[0] as PromiseFulfilledResult<Awaited<ReturnType<typeof sendEvidence>>>).value;
    const conf = await sendConfirm({ ...m, server: b.transport }, await confirmBody(m, s, ev, accepted));
    return (await unwrap(m, s, conf)) ?? "";
  });
  assert.equal(a.signatures() + b.signatures() - before.sig, 2, "one issuance: two signatures");
  assert.equal((await issued()) - before.issued, 2, "one issuance: two serials");
  assert.match(installCode, /^[0-9a-f]{64}$/);
});

test("the same install code fetched from both replicas at once is served once", async () => {
  const uuid = w.claims().uuid;
  const got = await Promise.all(replicas().map((r) => fetch(`${r.url}/talos/config?uuid=${uuid}&code=${installCode}`).then(async (x) => ({ status: x.status, text: await x.text() }))));
  const served = got.filter((g) => g.status === 200);
  assert.equal(served.length, 1, JSON.stringify(got.map((g) => g.status)));
  assert.match(served[0]?.text ?? "", new RegExp(`hostname: ${NODE}`));
  const again = await fetch(`${a.url}/talos/config?uuid=${uuid}&code=${installCode}`);
  assert.equal(again.status, 404);
  await waitFor("the device is active", 10_000, async () => (await listDevices(w.admin, { name: [NODE] }))[0]?.status === "active");
});

test("a replica whose forward is refused (wrong peer secret) fails closed: 503 unavailable, journalled, nothing signed", async () => {
  const c = await startReplica("replica-c", { secret: new Uint8Array(randomBytes(32)), campaign: false });
  try {
    const before = { sig: a.signatures() + b.signatures() + c.signatures(), issued: await issued() };
    let refusal: AttestationRefused | undefined;
    try {
      await runHonest(w, "provision", {}, c.transport); // provision always issues (attest only when renewal is due)
    } catch (e) {
      if (!(e instanceof AttestationRefused)) throw e;
      refusal = e;
    }
    assert.ok(refusal, "refused");
    assert.equal(refusal.status, 503);
    assert.equal(refusal.refusal.error, "unavailable");
    assert.deepEqual(doc.responseProblems({ method: "post", path: "/v1/attest/evidence", status: 503, contentType: "application/json", body: refusal.refusal }), []);
    assert.equal(refusal.refusal.reason, "signer-unavailable", JSON.stringify(refusal.refusal));
    assert.ok(refusal.refusal.reasons.some((r) => r.check === "signer-unavailable"), JSON.stringify(refusal.refusal));
    assert.equal(a.signatures() + b.signatures() + c.signatures(), before.sig, "nothing signed");
    assert.equal(await issued(), before.issued, "nothing recorded");
    const journal = (await readJournal(w.admin, await deviceId())).map((j) => j.comments).join("\n");
    assert.match(journal, /nothing was issued: the CA signer is unavailable/);
  } finally {
    await c.stop();
  }
});

test("the leader killed: the other takes the Lease once it lapses, opens the token and signs", async () => {
  const dead = leader();
  const survivor = follower();
  const before = { dead: dead.signatures(), survivor: survivor.signatures(), issued: await issued() };
  const sharedRecords = async () => {
    const sec = await loadKube(cp.kubeconfig).core.readNamespacedSecret({ name: BUNDLE_SECRET, namespace: NS });
    const ca = parseBundleState(Buffer.from(sec.data?.["state"] ?? "", "base64").toString("utf8")).cas[0];
    return { lastIssuance: ca?.lastIssuance?.getTime() ?? 0, lastNotAfter: ca?.lastNotAfter?.getTime() ?? 0 };
  };
  const recordsBefore = await sharedRecords();
  assert.ok(recordsBefore.lastIssuance > 0, "the dead leader's issuances are recorded in the shared bundle state");
  await dead.kill();
  await waitFor("the survivor leads", 30_000, async () => survivor.elector.isLeader());
  await survivor.elector.settled();
  assert.equal(survivor.issuer.signerOpen, true);
  const r = await runHonest(w, "provision", {}, survivor.transport);
  assert.equal(r.mode, "provision");
  assert.equal(survivor.signatures() - before.survivor, 2, "the new leader signed");
  assert.equal(dead.signatures(), before.dead);
  assert.equal((await issued()) - before.issued, 2);
  assert.equal(maxOpen, 1, "never two replicas with the token open");
  const recordsAfter = await sharedRecords();
  assert.ok(recordsAfter.lastIssuance > recordsBefore.lastIssuance, "the new leader recorded its issuance on top of the old leader's");
  assert.ok(recordsAfter.lastNotAfter >= recordsBefore.lastNotAfter);
});

test("the internal endpoint: exchanges as openapi-internal.yaml documents them; the answer's MAC verifies; a replay, no MAC, a bad body are refused", async () => {
  const l = leader();
  assert.ok(lastForwarded, "a follower forwarded an issuance earlier");
  assert.deepEqual(l.internalRoutes, internalDoc.operations().map((o) => `${o.method} ${o.path}`).sort(), "the internal listener serves exactly the internal document's operations");
  const body = issueBody();
  assert.deepEqual(internalDoc.requestValueProblems("post", ISSUE_PATH, JSON.parse(Buffer.from(body).toString("utf8"))), []);
  const send = (headers: Record<string, string>, b: Uint8Array) => peerPost(l.internalUrl + ISSUE_PATH, headers, b, peer);
  const signed = signPeerRequest(secret, "POST", ISSUE_PATH, body, Date.now(), l.id);
  const before = l.signatures();
  const ok = await send(signed.headers, body);
  assert.equal(ok.status, 200, JSON.stringify(ok.json));
  assert.equal(l.signatures() - before, 2);
  verifyPeerResponse(secret, signed.nonce, 200, ok.bytes, ok.signature);
  assert.deepEqual(internalDoc.responseProblems({ method: "post", path: ISSUE_PATH, status: 200, contentType: "application/json", body: ok.json }), []);
  const refusals = [
    await send(signed.headers, body), // the same request again
    await send({}, body),
    await (async () => {
      const bad = new Uint8Array(Buffer.from(JSON.stringify({ node: "x", generation: 0, ldevid: "zz", lak: "00" })));
      return send(signPeerRequest(secret, "POST", ISSUE_PATH, bad, Date.now(), l.id).headers, bad);
    })(),
  ];
  // Bound to its target, replayed nowhere (issue 10): the accepted request sent to another replica, and a fresh
  // request for the leader sent to it, are refused there.
  const other = await startReplica("replica-d", { campaign: false });
  try {
    const toOther = async (headers: Record<string, string>) => {
      const r = await peerPost(other.internalUrl + ISSUE_PATH, headers, body, peer);
      return { status: r.status, error: r.json as { error: string; detail: string } };
    };
    const replayed = await toOther(signed.headers);
    assert.equal(replayed.status, 401);
    assert.match(replayed.error.detail, /peer-target-mismatch/);
    const fresh = await toOther(signPeerRequest(secret, "POST", ISSUE_PATH, body, Date.now(), l.id).headers);
    assert.match(fresh.error.detail, /peer-target-mismatch/);
  } finally {
    await other.stop();
  }
  assert.deepEqual(refusals.map((r) => [r.status, (r.json as { error: string }).error]), [[401, "peer-auth"], [401, "peer-auth"], [400, "bad-request"]]);
  for (const r of refusals) assert.deepEqual(internalDoc.responseProblems({ method: "post", path: ISSUE_PATH, status: r.status, contentType: "application/json", body: r.json }), []);
  assert.equal(l.signatures() - before, 2, "refusals sign nothing");
});

test("the public listener does not serve the internal API: a correctly MACed issuance request gets the normal 404, nothing signed", async () => {
  const l = leader();
  const before = { sig: l.signatures(), issued: await issued() };
  const body = issueBody();
  const r = await fetch(l.url + ISSUE_PATH, { method: "POST", headers: { ...signPeerRequest(secret, "POST", ISSUE_PATH, body, Date.now(), l.id).headers, "content-type": "application/json" }, body });
  const unknown = await fetch(l.url + "/internal/v1/no-such-operation", { method: "POST", headers: { "content-type": "application/json" }, body });
  assert.equal(r.status, 404);
  assert.equal(unknown.status, 404);
  assert.equal((await r.text()).replace(ISSUE_PATH, "<path>"), (await unknown.text()).replace("/internal/v1/no-such-operation", "<path>"), "the same 404 as any unknown path");
  assert.equal(r.headers.get(PEER_SIGNATURE), null);
  assert.equal(l.signatures(), before.sig, "nothing signed");
  assert.equal(await issued(), before.issued, "nothing recorded");
});

/** A request to the leader's internal listener with a valid MAC, over a TLS client with `tls`: refused in the handshake. */
async function refusedInHandshake(tls: { ca: string; cert?: string; key?: string }, code: RegExp): Promise<void> {
  const l = leader();
  const lease = await loadKube(cp.kubeconfig).coordination.readNamespacedLease({ name: LEASE, namespace: NS });
  const published = lease.metadata?.annotations?.[INTERNAL_URL_ANNOTATION] ?? "";
  assert.equal(published, l.internalUrl);
  const before = { sig: l.signatures(), issued: await issued() };
  const body = issueBody();
  let answer: PeerAnswer | undefined;
  let failure: NoAnswer | undefined;
  try {
    answer = await peerPost(published + ISSUE_PATH, signPeerRequest(secret, "POST", ISSUE_PATH, body, Date.now(), l.id).headers, body, tls);
  } catch (e) {
    if (!(e instanceof NoAnswer)) throw e;
    failure = e;
  }
  assert.equal(answer, undefined, `no HTTP answer (got ${answer?.status} ${JSON.stringify(answer?.json)})`);
  assert.match(failure?.code ?? "", code, failure?.message);
  assert.equal(l.signatures(), before.sig, "nothing signed");
  assert.equal(await issued(), before.issued, "nothing recorded");
  // The control: the same kind of request with the peer CA's client certificate is signed.
  const ok = await peerPost(published + ISSUE_PATH, signPeerRequest(secret, "POST", ISSUE_PATH, body, Date.now(), l.id).headers, body, peer);
  assert.equal(ok.status, 200, JSON.stringify(ok.json));
  assert.equal(l.signatures() - before.sig, 2);
}

test("the internal listener refuses a TLS client without a certificate: the handshake fails (certificate required), no HTTP, nothing signed", async () => {
  await refusedInHandshake({ ca: pki.tls.ca }, /^ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED$/);
});

test("the internal listener refuses a client certificate from another CA: the connection is closed after the handshake, no HTTP, nothing signed", async () => {
  // Node verifies the client certificate once OpenSSL's handshake is done and destroys the socket before HTTP.
  await refusedInHandshake({ ca: pki.tls.ca, cert: pki.other.client.cert, key: pki.other.client.key }, /^ECONNRESET$/);
});

test("a follower that cannot verify the leader's certificate against its peer CA forwards nothing: 503 unavailable, nothing signed", async () => {
  // It trusts another CA only (its own client certificate is the peer CA's, so only the server check can fail).
  const e = await startReplica("replica-e", { campaign: false, forwardTls: { ca: pki.other.ca, client: pki.tls.client } });
  try {
    const before = { sig: a.signatures() + b.signatures() + e.signatures(), issued: await issued() };
    let refusal: AttestationRefused | undefined;
    try {
      await runHonest(w, "provision", {}, e.transport);
    } catch (err) {
      if (!(err instanceof AttestationRefused)) throw err;
      refusal = err;
    }
    assert.ok(refusal, "refused");
    assert.equal(refusal.status, 503);
    assert.equal(refusal.refusal.reason, "signer-unavailable", JSON.stringify(refusal.refusal));
    // the machine is told only that the signer is unavailable; the journal says why (the TLS verification)
    const journal = (await readJournal(w.admin, await deviceId())).map((j) => j.comments).join("\n");
    assert.match(journal, /nothing was issued: the CA signer is unavailable \(forward-failed\)[^\n]*(self-signed certificate in certificate chain|unable to verify)/i);
    assert.equal(a.signatures() + b.signatures() + e.signatures(), before.sig, "nothing signed");
    assert.equal(await issued(), before.issued, "nothing recorded");
  } finally {
    await e.stop();
  }
});

// The kubelet CSR gate (wt-csr's startCsrGate) runs as a leader-only loop (talos-config-server ServerHooks.loops,
// runWhileLeader on the `fleetd-config-server` Lease). Once it is merged: start it on both replicas against the
// workload control plane, submit one kubelet CSR with the node's bootstrap token, and assert one approval
// (one Approved condition, one journal entry) while both replicas run.
// No double CSR approval with two replicas: tests/src/kube/csrGate.it.test.ts ("two replicas: …").
