/**
 * The production wiring of `server.ha`: two `talos-config-server/dist/main.js` processes (lab mode, plain HTTP
 * on loopback) with the same configuration but their identity and address, against one real kube-apiserver,
 * the attestation world's NetBox, swtpm and SoftHSM2 token, and one CA bundle file. One process holds the
 * `fleetd-ca-signer` Lease and opens the token; an intake sent to the other is forwarded and signed by the
 * leader; the leader killed with SIGKILL → the other takes the Lease, opens the token and signs a provision;
 * the issuance records are shared in the `fleetd-ca-bundle-state` Secret.
 */
import { strict as assert } from "node:assert";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { stringify } from "yaml";
import { loadKube, type Kube } from "@fleetd/shared/kube/client";
import { addCa, emptyBundleState } from "@fleetd/shared/pki/bundle";
import { parseBundleState, serializeBundleState } from "@fleetd/shared/pki/bundleState";
import type { ServerTransport } from "@fleetd/shared/protocol/client/attest";
import { siteConfigFixture } from "@fleetd/shared/talos/config/testkit";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { ManagedProcess } from "../harness/managedProcess.js";
import { freePort, waitFor } from "../harness/ports.js";
import { idleConnections } from "../harness/idleConnections.js";
import { DEFAULT_LISTENER_LIMITS } from "@fleetd/shared/http/listenerLimits";
import { GROUP, repoRoot } from "../netbox/fixture.js";
import { runHonest } from "../attestation/machine.js";
import { startWorld, type World } from "../attestation/world.js";

const MAIN = join(repoRoot, "talos-config-server/dist/main.js");
const TALOS_VERSION = /github\.com\/siderolabs\/talos\/pkg\/machinery (v\d+\.\d+\.\d+)\b/.exec(readFileSync(join(repoRoot, "tests/go/talos/go.mod"), "utf8"))?.[1] ?? "v1.13.9";
const NS = "fleetd";

let cp: ControlPlane;
let w: World;
let kube: Kube;
let dir: string;

interface Proc {
  id: string;
  url: string;
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
  writeFileSync(peerSecretFile, randomBytes(32).toString("hex"), { mode: 0o600 });
  // SOFTHSM2_CONF and the PIN variable are in this process's environment (the harness set them)
  const env = { ...process.env, FLEETD_NETBOX_TOKEN: w.fleet.handler.token, FLEETD_CONFIG: "" };
  for (const id of ["tcs-a", "tcs-b"]) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const file = join(dir, `${id}.yaml`);
    writeFileSync(
      file,
      stringify({
        netbox: { url: w.fleet.nb.url },
        accounts: { apply: w.fleet.apply.username, handler: w.fleet.handler.username },
        authorizedGroup: GROUP,
        server: {
          mode: "lab",
          listen: { host: "127.0.0.1", port },
          roleSlugs: { worker: "worker", "control-plane": "control-plane" },
          ekRootsDir: w.tpm.caDir,
          siteAuthoritiesDir: w.siteAuthoritiesDir,
          ca: { signer: w.hsm.signerConfig("fleetd-ca", "ca"), bundleStateFile: bundleFile, ldevidLifetimeDays: 7 },
          talos: { siteFile: talosSite },
          logLevel: "info",
          ha: { kubeconfig: cp.kubeconfig, namespace: NS, identity: id, internalUrl: url, peerSecretFile, leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 1 },
        },
      }),
    );
    const log = join(dir, `${id}.log`);
    const proc = new ManagedProcess(id, log, process.execPath, [MAIN, "--config", file], { env });
    await waitFor(`${id} /healthz`, 60_000, async () => (await fetch(`${url}/healthz`)).status === 200, () => proc.deadReason());
    const transport: ServerTransport = {
      async post(path, body) {
        const r = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        return { status: r.status, body: await r.json() };
      },
    };
    procs.push({ id, url, log, proc, transport });
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
  const secrets = await kube.core.listNamespacedSecret({ namespace: NS, labelSelector: "app.kubernetes.io/managed-by=fleetd" });
  const kinds = new Set(secrets.items.map((s) => s.metadata?.labels?.["fleetd.io/kind"] ?? s.metadata?.name));
  for (const k of ["session", "ak-name", "issued", "generation", "fleetd-ca-bundle-state"]) assert.ok(kinds.has(k), `${k} in Kubernetes (${[...kinds].join(", ")})`);
});

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
