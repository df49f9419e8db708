/**
 * The production wiring of `server.ha`: two `talos-config-server/dist/main.js` processes (lab mode, plain HTTP
 * on loopback) with the same configuration but their identity and address, against one real kube-apiserver,
 * the attestation world's NetBox, swtpm and SoftHSM2 token, and one CA bundle file. One process holds the
 * `fleetd-ca-signer` Lease and opens the token; an intake sent to the other is forwarded and signed by the
 * leader; the leader killed with SIGKILL → the other takes the Lease, opens the token and signs a provision;
 * the issuance records are shared in the `fleetd-ca-bundle-state` Secret.
 *
 * The internal API is on each process's own listener (`server.ha.internal`: mutual TLS with the peer CA made
 * here, published on the Lease) and not on the public one: a correctly MACed issuance request gets the public
 * listener's 404; the internal listener refuses a client without a certificate and one from another CA (no HTTP,
 * nothing signed), signs for the peer CA's client certificate, keeps the connection caps; SIGTERM closes both.
 */
import { strict as assert } from "node:assert";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { connect } from "node:net";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { stringify } from "yaml";
import { loadKube, type Kube } from "@fleetd/platform/kube";
import { addCa, emptyBundleState, parseBundleState, serializeBundleState } from "@fleetd/platform/pki";
import type { ServerTransport } from "@fleetd/platform/protocol/client";
import { siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { ManagedProcess } from "../harness/managedProcess.js";
import { freePort, waitFor } from "../harness/ports.js";
import { idleConnections } from "../harness/idleConnections.js";
import { DEFAULT_LISTENER_LIMITS } from "@fleetd/platform/http";
import { GROUP, repoRoot } from "../netbox/fixture.js";
import { runHonest } from "../attestation/machine.js";
import { startWorld, type World } from "../attestation/world.js";
import { signPeerRequest, verifyPeerResponse } from "@fleetd/talos-config-server/ha/peerAuth";
import { ISSUE_PATH, toWire } from "@fleetd/talos-config-server/ha/wire";
import { tpmPublicFromKey } from "@fleetd/testkit/tpmPublic";
import { AK_ATTRIBUTES, LDEVID_ATTRIBUTES } from "@fleetd/platform/tpmclient";
import { makePeerPki, NoAnswer, peerPost, type PeerAnswer, type PeerPki } from "./peerTls.js";
import { TALOS_VERSION } from "../talos/goTools.js";

const MAIN = join(repoRoot, "talos-config-server/dist/main.js");
const NS = "fleetd";

let cp: ControlPlane;
let w: World;
let kube: Kube;
let dir: string;
let pki: PeerPki;
/** The peer secret as the processes read it (the file's text, trimmed, as UTF-8 bytes). */
let peerSecret: Uint8Array;

interface Proc {
  id: string;
  url: string;
  /** The internal listener (mutual TLS), as published on the Lease. */
  internalUrl: string;
  log: string;
  proc: ManagedProcess;
  transport: ServerTransport;
}
let procs: Proc[] = [];

before(async () => {
  [cp, w] = await Promise.all([startControlPlane(), startWorld({ talosVersion: TALOS_VERSION })]);
  kube = loadKube(cp.kubeconfig);
  await kube.core.createNamespace({ body: { metadata: { name: NS } } });
  dir = join(w.dir, "ha");
  mkdirSync(dir);
  const bundleFile = join(dir, "ca-bundle.json");
  writeFileSync(bundleFile, serializeBundleState(addCa(emptyBundleState(), w.caPem, new Date(Date.now() - 3600_000))));
  const talosSite = join(dir, "talos-site.yaml");
  writeFileSync(talosSite, stringify(siteConfigFixture(TALOS_VERSION)));
  const peerSecretFile = join(dir, "peer-secret");
  const secretText = randomBytes(32).toString("hex");
  writeFileSync(peerSecretFile, secretText, { mode: 0o600 });
  peerSecret = new Uint8Array(Buffer.from(secretText, "utf8"));
  mkdirSync(join(dir, "pki"));
  pki = await makePeerPki(join(dir, "pki"));
  // SOFTHSM2_CONF and the PIN variable are in this process's environment (the harness set them)
  const env = { ...process.env, FLEETD_NETBOX_TOKEN: w.fleet.handler.token, FLEETD_CONFIG: "" };
  for (const id of ["tcs-a", "tcs-b"]) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const internalPort = await freePort();
    const internalUrl = `https://127.0.0.1:${internalPort}`;
    const file = join(dir, `${id}.yaml`);
    writeFileSync(
      file,
      stringify({
        netbox: { url: w.fleet.nb.url },
        accounts: { apply: w.fleet.apply.username, handler: w.fleet.handler.username },
        authorizedGroup: GROUP,
        // the management cluster: the Workflow gate reads the claimed Workflows there (the world's)
        kubernetes: { management: { kubeconfig: w.cp.kubeconfig, namespace: w.tinkerbellNamespace }, workload: { kubeconfig: w.cp.kubeconfig } },
        server: {
          mode: "lab",
          listen: { host: "127.0.0.1", port },
          roleSlugs: { worker: "worker", "control-plane": "control-plane" },
          ekRootsDir: w.tpm.caDir,
          siteAuthoritiesDir: w.siteAuthoritiesDir,
          ca: { signer: w.hsm.signerConfig("fleetd-ca", "ca"), bundleStateFile: bundleFile, ldevidLifetimeDays: 7 },
          talos: { siteFile: talosSite },
          logLevel: "info",
          ha: {
            kubeconfig: cp.kubeconfig, namespace: NS, identity: id, internalUrl, peerSecretFile, leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 1,
            internal: { listen: { host: "127.0.0.1", port: internalPort }, tls: pki.files },
          },
        },
      }),
    );
    const log = join(dir, `${id}.log`);
    const proc = new ManagedProcess(id, log, process.execPath, [MAIN, "--config", file], { env });
    await waitFor(`${id} /healthz`, 60_000, async () => (await fetch(`${url}/healthz`)).status === 200, () => proc.deadReason());
    const transport: ServerTransport = w.withWorkflows({
      async post(path, body) {
        const r = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        return { status: r.status, body: await r.json() };
      },
    });
    procs.push({ id, url, internalUrl, log, proc, transport });
  }
}, { timeout: 60 * 60_000 });

after(async () => {
  for (const p of procs) await p.proc.stop();
  await w?.stop();
  await cp?.stop();
});

const holder = async (): Promise<string | undefined> => {
  try {
    return (await kube.coordination.readNamespacedLease({ name: "fleetd-ca-signer", namespace: NS })).spec?.holderIdentity || undefined;
  } catch {
    return undefined;
  }
};
const logOf = (p: Proc) => readFileSync(p.log, "utf8");
const OPEN = /CA signer open \(this replica leads\)/;
const signedCount = (p: Proc) => logOf(p).split("\n").filter((l) => l.includes("forwarded issuance signed")).length;
/** An issuance request body (only the transport is under test: software P-256 keys in the TPM's public-area shape). */
function probeIssueBody(): Uint8Array {
  const key = () => tpmPublicFromKey(generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey, LDEVID_ATTRIBUTES);
  return new Uint8Array(Buffer.from(JSON.stringify(toWire({ node: "ha-transport-probe", generation: 1, ldevid: key(), lak: { ...key(), objectAttributes: AK_ATTRIBUTES } })), "utf8"));
}

test("one process holds the signer Lease and opens the token; an intake sent to the other is signed by the leader", async () => {
  await waitFor("a signer", 30_000, async () => {
    const h = await holder();
    return h !== undefined && OPEN.test(logOf(procs.find((p) => p.id === h) as Proc));
  });
  const leaderId = await holder();
  const leader = procs.find((p) => p.id === leaderId) as Proc;
  const follower = procs.find((p) => p !== leader) as Proc;
  assert.doesNotMatch(logOf(follower), OPEN, "the follower never opened the token");
  const r = await runHonest(w, "intake", {}, follower.transport);
  assert.equal(r.mode, "intake");
  assert.match(logOf(leader), /forwarded issuance signed/);
  assert.doesNotMatch(logOf(follower), OPEN);
  const secrets = await kube.core.listNamespacedSecret({ namespace: NS, labelSelector: "fleetd.io/owner=fleetd" });
  const kinds = new Set(secrets.items.map((s) => s.metadata?.labels?.["fleetd.io/kind"] ?? s.metadata?.name));
  for (const k of ["session", "ak-name", "issued", "generation", "fleetd-ca-bundle-state"]) assert.ok(kinds.has(k), `${k} in Kubernetes (${[...kinds].join(", ")})`);
});

/** An issuance request body, made by the first transport test. */
let issueBody: Uint8Array | undefined;

test("main.js: the public listener answers 404 to a correctly MACed /internal/v1/issue; the internal listener alone signs it", async () => {
  const leaderId = await holder();
  const leader = procs.find((p) => p.id === leaderId) as Proc;
  const lease = await kube.coordination.readNamespacedLease({ name: "fleetd-ca-signer", namespace: NS });
  assert.equal(lease.metadata?.annotations?.["fleetd.io/internal-url"], leader.internalUrl, "the Lease names the internal listener");
  issueBody = probeIssueBody();
  const signed = () => signPeerRequest(peerSecret, "POST", ISSUE_PATH, issueBody as Uint8Array, Date.now(), leader.id);
  const signedBefore = signedCount(leader);
  const pub = await fetch(leader.url + ISSUE_PATH, { method: "POST", headers: { ...signed().headers, "content-type": "application/json" }, body: issueBody });
  assert.equal(pub.status, 404, await pub.text());
  const s = signed();
  const ok = await peerPost(leader.internalUrl + ISSUE_PATH, s.headers, issueBody, { ca: pki.tls.ca, cert: pki.tls.client.cert, key: pki.tls.client.key });
  assert.equal(ok.status, 200, JSON.stringify(ok.json));
  verifyPeerResponse(peerSecret, s.nonce, 200, ok.bytes, ok.signature);
  await waitFor("the leader logs the signed issuance", 5000, async () => signedCount(leader) === signedBefore + 1);
});

for (const [what, tls, code] of [
  ["without a certificate (certificate required)", () => ({ ca: pki.tls.ca }), /^ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED$/],
  ["with a certificate from another CA", () => ({ ca: pki.tls.ca, cert: pki.other.client.cert, key: pki.other.client.key }), /^ECONNRESET$/],
] as const) {
  test(`main.js: the internal listener refuses a TLS client ${what}: no HTTP, nothing signed`, async () => {
    const leaderId = await holder();
    const leader = procs.find((p) => p.id === leaderId) as Proc;
    assert.ok(issueBody, "the previous test made a body");
    const signedBefore = signedCount(leader);
    let answer: PeerAnswer | undefined;
    let failure: NoAnswer | undefined;
    try {
      answer = await peerPost(leader.internalUrl + ISSUE_PATH, signPeerRequest(peerSecret, "POST", ISSUE_PATH, issueBody, Date.now(), leader.id).headers, issueBody, tls());
    } catch (e) {
      if (!(e instanceof NoAnswer)) throw e;
      failure = e;
    }
    assert.equal(answer, undefined, `no HTTP answer (got ${answer?.status} ${JSON.stringify(answer?.json)})`);
    assert.match(failure?.code ?? "", code, failure?.message);
    await waitFor("the refusal in the leader's log", 5000, async () => /internal listener: TLS handshake refused/.test(logOf(leader)));
    assert.equal(signedCount(leader), signedBefore, "nothing signed");
  });
}

test("the leader killed with SIGKILL: the other takes the Lease, opens the token and signs a provision", async () => {
  const leaderId = await holder();
  const leader = procs.find((p) => p.id === leaderId) as Proc;
  const survivor = procs.find((p) => p !== leader) as Proc;
  const recordsBefore = parseBundleState(Buffer.from((await kube.core.readNamespacedSecret({ name: "fleetd-ca-bundle-state", namespace: NS })).data?.["state"] ?? "", "base64").toString("utf8")).cas[0]?.lastIssuance?.getTime() ?? 0;
  leader.proc.killNow();
  await waitFor("the survivor signs", 30_000, async () => (await holder()) === survivor.id && OPEN.test(logOf(survivor)));
  const r = await runHonest(w, "provision", {}, survivor.transport);
  assert.match(r.installCode ?? "", /^[0-9a-f]{64}$/);
  const recordsAfter = parseBundleState(Buffer.from((await kube.core.readNamespacedSecret({ name: "fleetd-ca-bundle-state", namespace: NS })).data?.["state"] ?? "", "base64").toString("utf8")).cas[0]?.lastIssuance?.getTime() ?? 0;
  assert.ok(recordsAfter > recordsBefore, "the survivor's issuance is recorded on top of the dead leader's");
  // the config is served by the survivor from the shared state
  const cfg = await fetch(`${survivor.url}/talos/config?uuid=${w.claims().uuid}&code=${r.installCode}`);
  assert.equal(cfg.status, 200);
  procs = procs.filter((p) => p !== leader);
});

test("the attestation listener closes idle connections beyond the per-source cap at once (not Node's unlimited default)", async () => {
  const cap = DEFAULT_LISTENER_LIMITS.maxConnectionsPerSource;
  const live = procs[0]!; // the survivor (the killed leader was dropped from procs)
  // This process may hold a kept-alive connection of its own to the server (fetch's pool): at most `cap` stay open.
  const r = await idleConnections(live.url, cap + 8);
  assert.ok(r.open <= cap && r.open >= cap - 2 && r.closed >= 8, JSON.stringify(r));
});

test("the internal listener keeps the same connection caps: idle connections beyond the per-source cap are closed at once", async () => {
  const cap = DEFAULT_LISTENER_LIMITS.maxConnectionsPerSource;
  const live = procs[0]!;
  const r = await idleConnections(live.internalUrl, cap + 8);
  assert.ok(r.open <= cap && r.open >= cap - 2 && r.closed >= 8, JSON.stringify(r));
});

test("SIGTERM: both listeners closed, exit 0", async () => {
  const live = procs[0]!;
  await live.proc.stop("SIGTERM");
  assert.deepEqual(live.proc.exit, { code: 0, signal: null }, live.proc.tail());
  assert.match(logOf(live), /listeners \(public, internal\) closed/);
  const refused = (url: string) =>
    new Promise<boolean>((resolve) => {
      const u = new URL(url);
      const s = connect(Number(u.port), u.hostname);
      s.once("connect", () => (s.destroy(), resolve(false)));
      s.once("error", (e: NodeJS.ErrnoException) => resolve(e.code === "ECONNREFUSED"));
    });
  assert.equal(await refused(live.url), true, "the public listener is closed");
  assert.equal(await refused(live.internalUrl), true, "the internal listener is closed");
  procs = [];
});
