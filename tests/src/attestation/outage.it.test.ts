/**
 * NetBox outages in the middle of an admission (issue: reliability), against the attestation world's real
 * NetBox: its web server is stopped right before one protocol step reaches the server and started again once
 * the server has answered that step. Where the step must read NetBox (the gates), the server answers 503
 * `unavailable` (reason `netbox-unavailable`, `Retry-After`), spends nothing, and the machine's retry of the
 * **same request** (fleetd's client with `retryUnavailable`) completes: one verdict, one install code, each
 * journal entry once, never a 500. A refusal while NetBox is down is still the refusal (4xx).
 *
 * After the gates (right after the signature, right after the bootstrap token is made), and after the config is
 * delivered, NetBox is no longer needed: the step's outcome is committed with what NetBox must hear (the
 * outbox), the machine gets its answer, and NetBox gets the writes — once each — when it is back.
 */
import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { after, before, test } from "node:test";
import { readJournal, readDevice, netboxReachable } from "@fleetd/platform/netbox";
import { attest, type AttestResult, type AttestStep, type ServerTransport } from "@fleetd/platform/protocol/client";
import type { Claims } from "@fleetd/platform/protocol";
import { pollValue } from "../harness/ports.js";
import { challenge, evidence, withMachine } from "./machine.js";
import { NODE, startWorld, type World } from "./world.js";
import { TALOS_VERSION } from "../talos/goTools.js";

let w: World;
before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION });
}, { timeout: 60 * 60_000 });
after(async () => {
  await w?.fleet.nb.startWeb().catch(() => undefined); // a failed test may leave it stopped
  await w?.stop();
});

interface Answer {
  step: string;
  status: number;
  retryAfter: string | null;
  body: { error?: string; reason?: string };
}

/**
 * The server over HTTP with the handler's part (the claimed Workflow exists), recording every answer; when
 * `outageAt` is the step about to be sent, NetBox's web server is stopped first and started again after the
 * server's answer to that request.
 */
function outageTransport(outageAt: AttestStep | undefined, answers: Answer[]): ServerTransport {
  let armed = outageAt;
  const http: ServerTransport = {
    async post(path, body) {
      const step = path.split("/").pop() ?? path;
      if (armed !== undefined && step === armed) {
        armed = undefined;
        await stopNetBox();
      }
      try {
        const r = await fetch(w.baseUrl + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        const answer = { step, status: r.status, retryAfter: r.headers.get("retry-after"), body: (await r.json()) as Answer["body"] };
        answers.push(answer);
        return { status: answer.status, body: answer.body };
      } finally {
        // NetBox comes back once the server has answered the request that met the outage
        if (netboxDown) await startNetBox();
      }
    },
  };
  return w.withWorkflows(http);
}

let netboxDown = false;
async function stopNetBox(): Promise<void> {
  netboxDown = true;
  await w.fleet.nb.stopWeb();
}
async function startNetBox(): Promise<void> {
  await w.fleet.nb.startWeb();
  netboxDown = false;
}

async function run(mode: Claims["mode"], outageAt: AttestStep | undefined): Promise<{ result: AttestResult; answers: Answer[] }> {
  const answers: Answer[] = [];
  const tpm = w.client();
  try {
    const result = await attest({
      tpm,
      server: outageTransport(outageAt, answers),
      claims: w.claims({ mode }),
      eventLog: w.eventLog,
      retryUnavailable: { deadline: Date.now() + 120_000, delayMs: () => 200 },
    });
    return { result, answers };
  } finally {
    await tpm.close();
  }
}

/**
 * Until the node's outbox is empty once NetBox is back: a flush right after NetBox returns can still meet a
 * delivery the worker began during the outage (it is retried), so this asks again, within a bound.
 */
async function outboxDelivered(id: number): Promise<void> {
  await pollValue("the outbox delivered the node's writes", async () => ((await w.outbox.flush(id)) ? true : undefined), { timeoutMs: 60_000, intervalMs: 500 });
}

async function journal(): Promise<string[]> {
  return (await readJournal(w.admin, await w.deviceId(NODE))).map((j) => j.comments);
}
const count = (lines: string[], re: RegExp) => lines.filter((l) => re.test(l)).length;

/** The outage's answer: a 503 that names NetBox and says when to retry; then the same step answered 200. */
function assertOutageAnswered(answers: Answer[], step: AttestStep): void {
  assert.ok(answers.every((a) => a.status !== 500), `no 500: ${JSON.stringify(answers)}`);
  const i = answers.findIndex((a) => a.status === 503);
  assert.ok(i >= 0, `a 503: ${JSON.stringify(answers)}`);
  const a = answers[i]!;
  assert.equal(a.step, step);
  assert.equal(a.body.error, "unavailable");
  assert.equal(a.body.reason, "netbox-unavailable");
  assert.match(a.retryAfter ?? "", /^[1-9][0-9]*$/, "Retry-After in seconds");
  assert.deepEqual({ step: answers[i + 1]?.step, status: answers[i + 1]?.status }, { step, status: 200 }, "the retry of the same request succeeded");
}

test("NetBox down when the challenge arrives: 503 netbox-unavailable with Retry-After; the retry completes the intake", async () => {
  const { result, answers } = await run("intake", "challenge");
  assert.equal(result.mode, "intake");
  assertOutageAnswered(answers, "challenge");
  const { device: d } = await readDevice(w.admin, await w.deviceId(NODE));
  assert.equal(d.cf["attestation_verdict"], "pass");
  assert.equal(count(await journal(), /intake: TPM evidence passed/), 1, "the pass is journalled once");
});

test("NetBox down when the evidence arrives: the nonce is not spent, the same evidence passes on retry; one pass journalled", async () => {
  const before = count(await journal(), /provision: TPM evidence passed/);
  const codes = w.installCodesIssued();
  const { result, answers } = await run("provision", "evidence");
  assert.equal(result.mode, "provision");
  assert.match(result.installCode ?? "", /^[0-9a-f]{64}$/);
  assertOutageAnswered(answers, "evidence");
  assert.equal(count(await journal(), /provision: TPM evidence passed/), before + 1);
  assert.equal(w.installCodesIssued(), codes + 1, "one install code");
});

test("NetBox down when the confirm arrives: the session is not spent, the retry gets the one install code; one confirm journalled", async () => {
  const before = count(await journal(), /provision confirmed/);
  const codes = w.installCodesIssued();
  const { result, answers } = await run("provision", "confirm");
  assert.match(result.installCode ?? "", /^[0-9a-f]{64}$/);
  assertOutageAnswered(answers, "confirm");
  assert.equal(count(await journal(), /provision confirmed/), before + 1, "journalled once");
  assert.equal(w.installCodesIssued(), codes + 1, "one install code stored");
  const { device: d } = await readDevice(w.admin, await w.deviceId(NODE));
  assert.equal(d.status, "staged");
  // the code the machine holds is the one that fetches the config
  const res = await fetch(`${w.baseUrl}/talos/config?uuid=${w.claims().uuid}&code=${result.installCode}`);
  assert.equal(res.status, 200);
});

test("a refusal while NetBox is down is still the refusal (403), never a 500; its journal entry arrives, once, when NetBox is back", async () => {
  const id = await w.deviceId(NODE);
  const before = count(await journal(), /evidence refused/);
  await withMachine(w.machines[NODE]!, w.transport, async (m) => {
    const s = await challenge(m, w.claims({ mode: "attest" }));
    const ev = await evidence(m, s);
    // secrets no TPM recovered: refused before activation verified (its journal entry needs NetBox)
    const body = { ...ev.body, secrets: ev.body.secrets.map(() => Buffer.alloc(32, 7).toString("base64")) };
    await w.fleet.nb.stopWeb();
    try {
      const probe = await netboxReachable(w.admin, 2_000);
      assert.equal(probe.ok, false, "readiness: NetBox is down");
      const r = await w.rawTransport.post("/v1/attest/evidence", body);
      assert.equal(r.status, 403, JSON.stringify(r.body));
      assert.equal((r.body as { error: string }).error, "refused");
      assert.ok((await w.store.listOutbox(id)).length >= 1, "the refusal's journal entry waits in the outbox");
    } finally {
      await w.fleet.nb.startWeb();
    }
    assert.deepEqual(await netboxReachable(w.admin, 2_000), { ok: true });
  });
  await outboxDelivered(id);
  assert.equal(count(await journal(), /evidence refused/), before + 1, "journalled once");
});

test("NetBox down right after the certificates are signed: the step completes (200) and the machine holds the valid pair; NetBox gets the verdict once when it is back", async () => {
  const id = await w.deviceId(NODE);
  const before = count(await journal(), /provision: TPM evidence passed/);
  w.hooks.afterIssue = stopNetBox; // inside the evidence step: gates passed, signed, nothing recorded yet
  const { result, answers } = await run("provision", undefined);
  assert.ok(answers.every((a) => a.status !== 500), JSON.stringify(answers));
  assert.deepEqual(answers.find((a) => a.step === "evidence")?.status, 200, "no retry was needed: NetBox is not read after the gates");
  const issued = await w.store.listIssued(id);
  assert.deepEqual(issued.filter((r) => r.voided && r.issuedAt >= Date.now() - 600_000 && r.voided.why.startsWith("reserved")), [], "the reservations became the issued pair");
  const valid = issued.filter((r) => !r.voided && r.kind === "ldevid").sort((a, b) => b.generation - a.generation)[0];
  const delivered = new X509Certificate(Buffer.from(result.issued?.ldevid.certificate ?? new Uint8Array()));
  assert.equal(delivered.serialNumber.toLowerCase().replace(/^0+/, ""), valid?.serial.replace(/^0+/, ""), "the machine holds the valid pair");
  await outboxDelivered(id);
  const { device: d } = await readDevice(w.admin, id);
  assert.equal(String(d.cf["ldevid_serial"]).replace(/^0+/, ""), valid?.serial.replace(/^0+/, ""), "NetBox names the delivered LDevID");
  assert.equal(count(await journal(), /provision: TPM evidence passed/), before + 1, "journalled once");
});

test("NetBox down right after the bootstrap token is made: the confirm completes with one code and one token; staged and journalled once when NetBox is back", async () => {
  const id = await w.deviceId(NODE);
  const before = count(await journal(), /provision confirmed/);
  w.hooks.afterBootstrapToken = stopNetBox; // inside the confirm: gates passed, token Secret made, nothing recorded yet
  const { result, answers } = await run("provision", undefined);
  assert.ok(answers.every((a) => a.status !== 500), JSON.stringify(answers));
  assert.deepEqual(answers.find((a) => a.step === "confirm")?.status, 200);
  const token = await w.store.getBootstrapToken(id);
  const live = [...w.liveTokens()].filter(([, node]) => node === NODE).map(([t]) => t);
  assert.deepEqual(live, [token?.tokenId], "one token Secret, the recorded one");
  await outboxDelivered(id);
  assert.equal((await readDevice(w.admin, id)).device.status, "staged");
  assert.equal(count(await journal(), /provision confirmed/), before + 1, "journalled once");
  const res = await fetch(`${w.baseUrl}/talos/config?uuid=${w.claims().uuid}&code=${result.installCode}`);
  assert.equal(res.status, 200, "the code the machine holds fetches the config");
  assert.match(await res.text(), new RegExp(`token: ${token?.tokenId}\\.`), "and that config carries the recorded token");
  assert.equal(await w.store.hasInstallCodeFor(id, Date.now()), false, "no other code is left");
});

test("NetBox down when Talos fetches its config: 503 and the code is not spent; the retry gets the config, the device becomes active, journalled once", async () => {
  const id = await w.deviceId(NODE);
  const { result } = await run("provision", undefined);
  await outboxDelivered(id);
  const before = count(await journal(), /Talos fetched its one-time config/);
  const url = `${w.baseUrl}/talos/config?uuid=${w.claims().uuid}&code=${result.installCode}`;
  await w.fleet.nb.stopWeb();
  try {
    const down = await fetch(url);
    assert.equal(down.status, 503);
    assert.match(down.headers.get("retry-after") ?? "", /^[1-9][0-9]*$/);
    assert.equal(((await down.json()) as { reason: string }).reason, "netbox-unavailable");
  } finally {
    await w.fleet.nb.startWeb();
  }
  const ok = await fetch(url);
  assert.equal(ok.status, 200);
  await ok.text();
  assert.equal((await fetch(url)).status, 404, "once");
  await waitForActive(id);
  assert.equal(count(await journal(), /Talos fetched its one-time config/), before + 1, "journalled once");
});

test("NetBox down right after the config is delivered: the device still becomes active and the delivery is journalled once, when NetBox is back", async () => {
  const id = await w.deviceId(NODE);
  const { result } = await run("provision", undefined);
  await outboxDelivered(id);
  const before = count(await journal(), /Talos fetched its one-time config/);
  await w.outbox.stop(); // nothing is delivered until NetBox is down: the after-delivery writes meet the outage
  try {
    const ok = await fetch(`${w.baseUrl}/talos/config?uuid=${w.claims().uuid}&code=${result.installCode}`);
    assert.equal(ok.status, 200);
    await ok.text();
    await pollValue("the delivery recorded", async () => ((await w.store.listOutbox(id)).length >= 2 ? true : undefined), { timeoutMs: 30_000 });
    await w.fleet.nb.stopWeb();
    w.outbox.start();
    assert.equal(await w.outbox.flush(id), false, "NetBox is down: the writes wait");
    assert.equal((await w.store.listOutbox(id)).length >= 2, true);
  } finally {
    w.outbox.start();
    await w.fleet.nb.startWeb();
  }
  await waitForActive(id);
  assert.equal(count(await journal(), /Talos fetched its one-time config/), before + 1, "journalled once");
});

async function waitForActive(id: number): Promise<void> {
  await pollValue("the device active in NetBox", async () => ((await w.store.listOutbox(id)).length === 0 && (await readDevice(w.admin, id)).device.status === "active" ? true : undefined), { timeoutMs: 60_000 });
}
