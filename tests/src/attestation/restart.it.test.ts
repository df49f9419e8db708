/**
 * The attestation server killed (SIGKILL, by a failpoint: FLEETD_FAILPOINTS) at exact points of an admission and
 * restarted on its SQLite state, against the world's real NetBox, swtpm, SoftHSM2 CA and Kubernetes (the token
 * Secrets are real, in the workload cluster). The machine — fleetd's client, retrying the same request through
 * the restart — completes every time. Afterwards: NetBox holds one verdict and each journal entry once, the
 * store holds no valid certificate, code or token without the verdict that released it, and the workload
 * cluster holds only the recorded bootstrap token.
 *
 * The points: right after the CA signed (the certificates were never recorded valid: their reserved serials stay
 * listed as void); right after a worker's bootstrap token Secret was made (its clean-up, queued before, deletes
 * it); right after a config was delivered and recorded (NetBox hears of it after the restart); right after a
 * journal entry reached NetBox but before the outbox marked it delivered (delivered again: not doubled); after an
 * evidence was answered, before its journal entry was delivered (with the confirm's, after the restart, once). And the
 * process's /readyz turns false, naming NetBox, while NetBox's web server is down.
 */
import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { join } from "node:path";
import { after, before, test } from "node:test";
import * as k8s from "@kubernetes/client-node";
import { KubeBootstrapTokens, kubeFromConfig } from "@fleetd/platform/kube";
import { readDevice, readJournal } from "@fleetd/platform/netbox";
import { attest, type AttestResult } from "@fleetd/platform/protocol/client";
import type { Claims } from "@fleetd/platform/protocol";
import { SqliteAttestationStore } from "@fleetd/platform/state";
import { pollValue } from "../harness/ports.js";
import { httpsRequest, startServerProcess, type ServerProcess } from "./serverProcess.js";
import { NODE, startWorld, type World } from "./world.js";
import { TALOS_VERSION } from "../talos/goTools.js";

/** The server's claim staleness (and so the delay of a token's queued clean-up): short here. */
const STALE_SECONDS = 5;

let w: World;
let sp: ServerProcess;
let tokens: KubeBootstrapTokens;
let restarts = 0;

before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION });
  sp = await startServerProcess(w, {
    name: "restart",
    over: (c) => void ((c["server"] as Record<string, unknown>)["ttl"] = { staleClaimSeconds: STALE_SECONDS }),
  });
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(w.cp.kubeconfig);
  tokens = new KubeBootstrapTokens(kubeFromConfig(kc));
}, { timeout: 20 * 60_000 });

after(async () => {
  await sp?.stop();
  await w?.stop();
});

/**
 * Runs one attestation of `mode` with a server process armed to kill itself at `failpoint`; when it dies, a clean
 * process starts on the same state. The client retries the same request (transport failures and 503s).
 */
async function killedAt(failpoint: string, mode: Claims["mode"], answers?: { step: string; status: number; restarts: number }[]): Promise<AttestResult> {
  const armed = await sp.start({ FLEETD_FAILPOINTS: failpoint });
  const restarted = armed.waitExit().then(async () => {
    assert.equal(armed.exit?.signal, "SIGKILL", `the process stopped at ${failpoint}: ${armed.tail(5)}`);
    restarts++;
    await sp.start();
  });
  const result = await run(mode, answers);
  await restarted;
  return result;
}

/**
 * One attestation through the server process; the same request is sent again across restarts and 503s.
 * `answers`: each answer the machine got, with the restarts counted when it got it.
 */
async function run(mode: Claims["mode"], answers?: { step: string; status: number; restarts: number }[]): Promise<AttestResult> {
  const tpm = w.client();
  const transport = sp.transport();
  try {
    return await attest({
      tpm,
      server: {
        ...transport,
        async post(path, body) {
          const r = await transport.post(path, body);
          answers?.push({ step: path.split("/").pop() ?? path, status: r.status, restarts });
          return r;
        },
      },
      claims: w.claims({ mode }),
      eventLog: w.eventLog,
      retryUnavailable: { deadline: Date.now() + 300_000, delayMs: () => 300 },
    });
  } finally {
    await tpm.close();
  }
}

/** The server's state as the restarted process sees it (read-only here: a second connection to the file). */
async function withState<T>(f: (s: SqliteAttestationStore) => Promise<T>): Promise<T> {
  const s = new SqliteAttestationStore(join(sp.dir, "state", "state.db"));
  try {
    return await f(s);
  } finally {
    await s.close();
  }
}

async function journal(): Promise<string[]> {
  return (await readJournal(w.admin, await w.deviceId(NODE))).map((j) => j.comments);
}
const count = (lines: string[], re: RegExp) => lines.filter((l) => re.test(l)).length;

/** Until the restarted server's outbox has delivered everything of the node. */
async function settled(): Promise<void> {
  const id = await w.deviceId(NODE);
  await pollValue("the outbox delivered the node's writes", async () => ((await withState((s) => s.listOutbox(id))).length === 0 ? true : undefined), { timeoutMs: 120_000 });
}

test("killed right after the CA signed: the retry completes; the dead step's serials stay listed void; one pass journalled", async () => {
  const id = await w.deviceId(NODE);
  const before = count(await journal(), /intake: TPM evidence passed/);
  const r = await killedAt("evidence.afterSign", "intake");
  assert.equal(r.mode, "intake");
  assert.equal(restarts, 1);
  await settled();
  const issued = await withState((s) => s.listIssued(id));
  const dead = issued.filter((c) => c.voided);
  assert.equal(dead.length, 2, "the LDevID and LAK the dead process signed");
  for (const c of dead) assert.match(c.voided?.why ?? "", /^reserved by intake evidence/);
  const valid = issued.filter((c) => !c.voided && c.kind === "ldevid");
  assert.equal(valid.length, 1);
  const held = new X509Certificate(Buffer.from(r.issued?.ldevid.certificate ?? new Uint8Array()));
  assert.equal(held.serialNumber.toLowerCase().replace(/^0+/, ""), valid[0]?.serial.replace(/^0+/, ""), "the machine holds the one valid LDevID");
  const { device } = await readDevice(w.admin, id);
  assert.equal(device.cf["attestation_verdict"], "pass");
  assert.equal(String(device.cf["ldevid_serial"]).replace(/^0+/, ""), valid[0]?.serial.replace(/^0+/, ""), "NetBox names it");
  assert.equal(count(await journal(), /intake: TPM evidence passed/), before + 1, "journalled once");
});

test("killed after the evidence was answered but before its journal entry was delivered: after the restart NetBox holds the verdict and each entry once", async () => {
  const id = await w.deviceId(NODE);
  const lines = await journal();
  const before = { passed: count(lines, /intake: TPM evidence passed/), confirmed: count(lines, /intake confirmed/), admission: count(lines, /admission is not automated/) };
  const at = String((await readDevice(w.admin, id)).device.cf["attested_at"] ?? "");
  // the evidence's answer does not wait for its journal entry: it lingers for the confirm's, to go in one
  // request; the process dies as the outbox is about to send them (the confirm committed, not yet answered)
  const answers: { step: string; status: number; restarts: number }[] = [];
  const dead = restarts;
  const r = await killedAt("outbox.beforeDeliver.netbox.journal", "intake", answers);
  assert.equal(r.mode, "intake");
  assert.equal(restarts, dead + 1);
  assert.ok(answers.some((a) => a.step === "evidence" && a.status === 200 && a.restarts === dead), `the killed process answered the evidence: ${JSON.stringify(answers)}`);
  await settled();
  const { device } = await readDevice(w.admin, id);
  assert.equal(device.cf["attestation_verdict"], "pass");
  assert.notEqual(String(device.cf["attested_at"] ?? ""), at, "this attestation's verdict reached NetBox");
  const after = await journal();
  assert.equal(count(after, /intake: TPM evidence passed/), before.passed + 1, "the evidence's entry once");
  assert.equal(count(after, /intake confirmed/), before.confirmed + 1, "the confirm's once");
  assert.equal(count(after, /admission is not automated/), before.admission + 1, "the admission's once");
});

test("killed right after a worker's bootstrap token Secret was made: the retry completes with one code; the orphan Secret is deleted by its queued clean-up", async () => {
  const id = await w.deviceId(NODE);
  const before = count(await journal(), /provision confirmed/);
  const r = await killedAt("confirm.afterToken", "provision");
  assert.match(r.installCode ?? "", /^[0-9a-f]{64}$/);
  const recorded = await withState((s) => s.getBootstrapToken(id));
  assert.ok(recorded, "the completed confirm recorded its token");
  // the dead confirm's Secret exists until its clean-up is due (the claim staleness), then only the recorded one
  const live = await pollValue(
    "only the recorded token Secret left",
    async () => {
      const mine = (await tokens.ofNode(NODE)).map((t) => t.tokenId);
      return mine.length === 1 ? mine : undefined;
    },
    { timeoutMs: 120_000 },
  );
  assert.deepEqual(live, [recorded.tokenId]);
  await settled();
  assert.equal((await readDevice(w.admin, id)).device.status, "staged");
  assert.equal(count(await journal(), /provision confirmed/), before + 1, "journalled once");
  const cfg = await httpsRequest(`${sp.url}/talos/config?uuid=${w.claims().uuid}&code=${r.installCode}`, { ca: sp.certPem });
  assert.equal(cfg.status, 200, "the code the machine holds fetches the config");
  assert.match(cfg.text, new RegExp(`token: ${recorded.tokenId}\\.`), "with the recorded token");
  // the delivery is recorded once the response went out (just after the client has it)
  await pollValue("one code, now delivered", async () => ((await withState((s) => s.hasInstallCodeFor(id, Date.now()))) ? undefined : true), { timeoutMs: 30_000 });
});

test("killed right after a config was delivered and recorded: after the restart NetBox says active and the delivery is journalled once", async () => {
  const id = await w.deviceId(NODE);
  const { installCode } = await run("provision");
  await settled();
  const before = count(await journal(), /Talos fetched its one-time config/);
  const armed = await sp.start({ FLEETD_FAILPOINTS: "config.afterDelivered" });
  const cfg = await httpsRequest(`${sp.url}/talos/config?uuid=${w.claims().uuid}&code=${installCode}`, { ca: sp.certPem });
  assert.equal(cfg.status, 200);
  await armed.waitExit();
  assert.equal(armed.exit?.signal, "SIGKILL");
  await sp.start();
  await settled();
  assert.equal((await readDevice(w.admin, id)).device.status, "active");
  assert.equal(count(await journal(), /Talos fetched its one-time config/), before + 1, "journalled once");
  assert.equal((await httpsRequest(`${sp.url}/talos/config?uuid=${w.claims().uuid}&code=${installCode}`, { ca: sp.certPem })).status, 404, "never twice");
});

test("killed after a journal entry reached NetBox but before the outbox marked it delivered: delivered again after the restart, and not doubled", async () => {
  const before = count(await journal(), /attest: TPM evidence passed/);
  const r = await killedAt("outbox.afterDeliver.netbox.journal", "attest");
  assert.equal(r.mode, "attest");
  await settled();
  assert.equal(count(await journal(), /attest: TPM evidence passed/), before + 1, "the entry once, though it was sent twice");
});

test("/readyz of the server process: ready with NetBox, the state store and the CA token; not ready, naming NetBox, while NetBox's web server is down; ready again after", async () => {
  const readyz = async () => {
    const r = await httpsRequest(`${sp.url}/readyz`, { ca: sp.certPem });
    return { status: r.status, body: JSON.parse(r.text) as { ready: boolean; checks: Record<string, { ok: boolean; detail?: string }> } };
  };
  const up = await readyz();
  assert.equal(up.status, 200, JSON.stringify(up.body));
  assert.deepEqual(Object.keys(up.body.checks).sort(), ["netbox", "signer", "state"]);
  await w.fleet.nb.stopWeb();
  try {
    // the probe is cached for 5 s: the answer turns within a few seconds
    const down = await pollValue("/readyz not ready", async () => {
      const r = await readyz();
      return r.status === 503 ? r : undefined;
    }, { timeoutMs: 30_000 });
    assert.equal(down.body.ready, false);
    assert.equal(down.body.checks["netbox"]?.ok, false);
    assert.equal(down.body.checks["signer"]?.ok, true, "the CA token is still there");
    assert.equal(down.body.checks["state"]?.ok, true, "the state store still answers");
  } finally {
    await w.fleet.nb.startWeb();
  }
  await pollValue("/readyz ready again", async () => ((await readyz()).status === 200 ? true : undefined), { timeoutMs: 30_000 });
});
