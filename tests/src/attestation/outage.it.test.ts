/**
 * NetBox outages in the middle of an admission (issue: reliability), against the attestation world's real
 * NetBox: its web server is stopped right before one protocol step reaches the server and started again once
 * the server has answered that step. The server must answer 503 `unavailable` (reason `netbox-unavailable`,
 * `Retry-After`), spend nothing, and the machine's retry of the **same request** (fleetd's client with
 * `retryUnavailable`) must complete: one verdict, one install code, each journal entry once, never a 500.
 * A refusal while NetBox is down is still the refusal (4xx), not a 500.
 *
 * Right after the signature and right after the install code is stored (hooks inside the server's steps): what
 * the step had made is void (certificates, listed) or undone (code, token), and the retry releases one of each.
 *
 * Not here yet (the outbox): an outage after the config is delivered.
 */
import { strict as assert } from "node:assert";
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { readJournal } from "@fleetd/shared/netbox/journal";
import { readDevice } from "@fleetd/shared/netbox/device";
import { netboxReachable } from "@fleetd/shared/netbox/client";
import { attest, type AttestResult, type AttestStep, type ServerTransport } from "@fleetd/shared/protocol/client/attest";
import type { Claims } from "@fleetd/shared/protocol/messages";
import { challenge, evidence, withMachine } from "./machine.js";
import { NODE, startWorld, type World } from "./world.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");
const TALOS_VERSION = /github\.com\/siderolabs\/talos\/pkg\/machinery (v\d+\.\d+\.\d+)\b/.exec(readFileSync(join(repo, "tests/go/talos/go.mod"), "utf8"))?.[1] ?? "v1.13.9";

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

test("a refusal while NetBox is down is still the refusal (403), never a 500; readiness says NetBox is down meanwhile", async () => {
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
    } finally {
      await w.fleet.nb.startWeb();
    }
    assert.deepEqual(await netboxReachable(w.admin, 2_000), { ok: true });
  });
});

test("NetBox down right after the certificates are signed: that pair is void and listed, the retry gets a new one; NetBox and the machine hold the same", async () => {
  const id = await w.deviceId(NODE);
  const before = count(await journal(), /provision: TPM evidence passed/);
  w.hooks.afterIssue = stopNetBox; // inside the evidence step: signed, nothing recorded yet
  const { result, answers } = await run("provision", undefined);
  assertOutageAnswered(answers, "evidence");
  const issued = await w.store.listIssued(id);
  const voided = issued.filter((r) => r.voided);
  assert.equal(voided.length, 2, "the LDevID and LAK of the step that did not complete");
  for (const r of voided) assert.match(r.voided?.why ?? "", /provision evidence did not complete \(netbox-unavailable\); never delivered/);
  const valid = issued.filter((r) => !r.voided && r.kind === "ldevid").sort((a, b) => b.generation - a.generation)[0];
  assert.ok(valid && voided.every((v) => v.generation < valid.generation), "the delivered pair is newer than the void one");
  const delivered = new X509Certificate(Buffer.from(result.issued?.ldevid.certificate ?? new Uint8Array()));
  assert.equal(delivered.serialNumber.toLowerCase().replace(/^0+/, ""), valid.serial.replace(/^0+/, ""), "the machine holds the valid pair");
  const { device: d } = await readDevice(w.admin, id);
  assert.equal(String(d.cf["ldevid_serial"]).replace(/^0+/, ""), valid.serial.replace(/^0+/, ""), "NetBox names the delivered LDevID");
  assert.equal(count(await journal(), /provision: TPM evidence passed/), before + 1, "journalled once");
});

test("NetBox down right after the confirm stored its install code: code and token are undone, the retry releases one of each", async () => {
  const id = await w.deviceId(NODE);
  const before = count(await journal(), /provision confirmed/);
  w.hooks.afterPutInstallCode = stopNetBox; // inside the confirm: code stored, device not yet staged
  const { result, answers } = await run("provision", undefined);
  assertOutageAnswered(answers, "confirm");
  const token = await w.store.getBootstrapToken(id);
  const live = [...w.liveTokens()].filter(([, node]) => node === NODE).map(([t]) => t);
  assert.deepEqual(live, [token?.tokenId], "one token Secret, the recorded one (the undone confirm's is deleted)");
  assert.equal(count(await journal(), /provision confirmed/), before + 1, "journalled once");
  const res = await fetch(`${w.baseUrl}/talos/config?uuid=${w.claims().uuid}&code=${result.installCode}`);
  assert.equal(res.status, 200, "the code the machine holds fetches the config");
  assert.match(await res.text(), new RegExp(`token: ${token?.tokenId}\\.`), "and that config carries the recorded token");
  assert.equal(await w.store.hasInstallCodeFor(id, Date.now()), false, "no other code is left");
});
