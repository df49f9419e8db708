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
 */
import { Objects } from "@fleetd/shared/tinkerbell/objects";
import { TinkerbellWorkflowGate } from "@fleetd/shared/tinkerbell/workflowGate";
import { strict as assert } from "node:assert";
import { createServer, type Server } from "node:http";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import pino from "pino";
import { loadKube } from "@fleetd/shared/kube/client";
import { INTERNAL_URL_ANNOTATION, LeaderElector } from "@fleetd/shared/kube/leader";
import { listDevices } from "@fleetd/shared/netbox/device";
import { readJournal } from "@fleetd/shared/netbox/journal";
import { addCa, emptyBundleState } from "@fleetd/shared/pki/bundle";
import type { BundleState } from "@fleetd/shared/pki/bundleState";
import { openPkcs11Signer } from "@fleetd/shared/pki/pkcs11Signer";
import { AttestationRefused, type ServerTransport } from "@fleetd/shared/protocol/client/attest";
import { PkiIssuer } from "@fleetd/shared/protocol/server/adapters/issuer";
import { KubeAttestationStore } from "@fleetd/shared/state/kubeStore";
import { createForwarder } from "@fleetd/talos-config-server/ha/forward";
import { internalRouter } from "@fleetd/talos-config-server/ha/internalApi";
import { LeaderIssuer, type OpenSigner } from "@fleetd/talos-config-server/ha/leaderIssuer";
import { BUNDLE_SECRET, SharedBundleState } from "@fleetd/talos-config-server/ha/sharedBundle";
import { parseBundleState } from "@fleetd/shared/pki/bundleState";
import { PeerVerifier, PEER_SIGNATURE, signPeerRequest, verifyPeerResponse } from "@fleetd/talos-config-server/ha/peerAuth";
import { ISSUE_PATH, toWire, type IssueRequest } from "@fleetd/talos-config-server/ha/wire";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { waitFor } from "../harness/ports.js";
import { repoRoot } from "../netbox/fixture.js";
import { challenge, confirmBody, evidence, runHonest, sendConfirm, sendEvidence, unwrap, withMachine } from "../attestation/machine.js";
import { attestationServer, NODE, startWorld, type World } from "../attestation/world.js";
import { OpenApiValidator } from "../attestation/openapi.js";

const TALOS_VERSION = /github\.com\/siderolabs\/talos\/pkg\/machinery (v\d+\.\d+\.\d+)\b/.exec(readFileSync(join(repoRoot, "tests/go/talos/go.mod"), "utf8"))?.[1] ?? "v1.13.9";
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

interface Replica {
  id: string;
  url: string;
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

async function startReplica(id: string, opts: { secret?: Uint8Array; campaign?: boolean } = {}): Promise<Replica> {
  const server: Server = createServer();
  await new Promise<void>((res) => server.listen(0, "127.0.0.1", res));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const kube = loadKube(cp.kubeconfig); // clients of its own
  const store = new KubeAttestationStore({ kube, namespace: NS });
  const log = pino({ level: process.env["FLEETD_LOG_LEVEL"] ?? "silent" }).child({ replica: id });
  const elector = new LeaderElector({ kube, namespace: NS, name: LEASE, identity: id, annotations: { [INTERNAL_URL_ANNOTATION]: url }, log, ...fast });
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
      const forward = createForwarder({ elector, secret: peerSecret });
      return (req: IssueRequest) => {
        lastForwarded = req;
        return forward(req);
      };
    })(),
    journal: w.inventory,
    log,
  });
  issuer.attach();
  const { app } = attestationServer({
    store,
    inventory: w.inventory,
    issuer,
    // the workload cluster's token Secrets are the CSR-gate tests' subject; here they are only recorded
    bootstrapTokens: { create: async () => undefined, delete: async () => false },
    siteAuthoritiesDir: w.siteAuthoritiesDir,
    ekCaDir: w.tpm.caDir,
    talosVersion: TALOS_VERSION,
    log,
    metrics: createMetrics(),
    now,
    internal: internalRouter({ issuer, verifier: new PeerVerifier(peerSecret, id, (token, expiresAt, at) => store.recordOnce(token, expiresAt, at)), secret: peerSecret, log }),
    workflows: new TinkerbellWorkflowGate(new Objects(w.kube, w.tinkerbellNamespace)),
  });
  server.on("request", app);
  if (opts.campaign !== false) elector.start();
  const transport: ServerTransport = w.withWorkflows({
    async post(path, body) {
      const r = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    },
  });

  const closeServer = () =>
    new Promise<void>((res) => {
      server.close(() => res());
      server.closeAllConnections();
    });
  let stopped = false;
  return {
    id,
    url,
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
      await issuer.close(); // a dead process's PKCS#11 session is gone with it
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await closeServer();
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
const issued = async () => (await a.store.listIssued(await w.deviceId(NODE))).length;
const deviceId = async () => (await listDevices(w.admin, { name: [NODE] }))[0]?.id ?? 0;

before(async () => {
  [cp, w] = await Promise.all([startControlPlane(), startWorld({ talosVersion: TALOS_VERSION })]);
  await loadKube(cp.kubeconfig).core.createNamespace({ body: { metadata: { name: NS } } });
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
  assert.equal(lease.metadata?.annotations?.[INTERNAL_URL_ANNOTATION], l.url);
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

test("the internal endpoint: exchanges as openapi.yaml documents them; the answer's MAC verifies; a replay, no MAC, a bad body are refused", async () => {
  const l = leader();
  assert.ok(lastForwarded, "a follower forwarded an issuance earlier");
  const body = new Uint8Array(Buffer.from(JSON.stringify(toWire(lastForwarded)), "utf8"));
  assert.deepEqual(doc.requestValueProblems("post", ISSUE_PATH, JSON.parse(Buffer.from(body).toString("utf8"))), []);
  const send = async (headers: Record<string, string>, b: Uint8Array) => {
    const r = await fetch(l.url + ISSUE_PATH, { method: "POST", headers: { ...headers, "content-type": "application/json" }, body: b });
    const bytes = new Uint8Array(await r.arrayBuffer());
    return { status: r.status, bytes, json: JSON.parse(Buffer.from(bytes).toString("utf8")) as unknown, signature: r.headers.get(PEER_SIGNATURE) ?? undefined };
  };
  const signed = signPeerRequest(secret, "POST", ISSUE_PATH, body, Date.now(), l.id);
  const before = l.signatures();
  const ok = await send(signed.headers, body);
  assert.equal(ok.status, 200, JSON.stringify(ok.json));
  assert.equal(l.signatures() - before, 2);
  verifyPeerResponse(secret, signed.nonce, 200, ok.bytes, ok.signature);
  assert.deepEqual(doc.responseProblems({ method: "post", path: ISSUE_PATH, status: 200, contentType: "application/json", body: ok.json }), []);
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
      const r = await fetch(other.url + ISSUE_PATH, { method: "POST", headers: { ...headers, "content-type": "application/json" }, body });
      return { status: r.status, error: (await r.json()) as { error: string; detail: string } };
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
  for (const r of refusals) assert.deepEqual(doc.responseProblems({ method: "post", path: ISSUE_PATH, status: r.status, contentType: "application/json", body: r.json }), []);
  assert.equal(l.signatures() - before, 2, "refusals sign nothing");
});

// The kubelet CSR gate (wt-csr's startCsrGate) runs as a leader-only loop (talos-config-server ServerHooks.loops,
// runWhileLeader on the `fleetd-config-server` Lease). Once it is merged: start it on both replicas against the
// workload control plane, submit one kubelet CSR with the node's bootstrap token, and assert one approval
// (one Approved condition, one journal entry) while both replicas run.
// No double CSR approval with two replicas: tests/src/kube/csrGate.it.test.ts ("two replicas: …").
