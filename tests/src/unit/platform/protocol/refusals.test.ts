/**
 * The refusal matrix of tests/src/attestation/refusals.it.test.ts, run against the protocol engine alone: the
 * AttestationService over in-memory adapters (memoryWorld.ts) and machines whose TPM is a node:crypto model
 * (@fleetd/testkit/softwareTpm), no NetBox, swtpm or SoftHSM2. Same cases, same names, same expected step,
 * status, error and checks; after each refusal
 *  - nothing is signed: the node's issued certificates and the CA key's signature count do not move;
 *  - no install code is issued (and the machine got none to write to its disk);
 *  - the device's journal gets an entry naming the check (an unknown machine has no device: it is listed as
 *    pending instead).
 * The real-platform matrix stays: it is what proves the engine's wiring to NetBox, swtpm and PKCS#11.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { EV } from "@fleetd/verify/eventlog";
import { AttestationRefused } from "@fleetd/platform/protocol/client";
import type { Claims } from "@fleetd/platform/protocol";
import { akTemplate } from "@fleetd/platform/tpmclient";
import { flipEventDataByte } from "../../../attestation/machine.js";
import {
  challenge, confirmBody, ekFromTemplate, evidence, honest, machineOf, NODE, sendConfirm, sendEvidence, startMemoryWorld, uncertifiedKey, unwrap,
  type Machine, type MemoryWorld, type WorldMachine,
} from "./memoryWorld.js";

/** A machine whose firmware runs with Secure Boot off (its TPM measured that boot). */
const INSECURE = "worker-sb-off";
/** A machine whose TPM another manufacturer made: its EK certificates chain to a CA the server does not trust. */
const FOREIGN = "worker-foreign";
/** The same kind of TPM on a node that approves its EKs with `chain: false`: the control for the chain case. */
const UNCHAINED = "worker-unchained";

let w: MemoryWorld;
before(async () => {
  w = await startMemoryWorld({ machines: { [INSECURE]: { boot: { secureBoot: 0 } }, [FOREIGN]: { manufacturer: "foreign" }, [UNCHAINED]: { manufacturer: "foreign", chain: false } } });
});
after(async () => {
  await w?.stop();
});

const machine = (name = NODE): WorldMachine => w.machines[name] as WorldMachine;
const run = <T>(fn: (m: Machine) => Promise<T>, name = NODE): Promise<T> => fn(machineOf(machine(name), w.transport));
const provision = (name = NODE, over: Partial<Claims> = {}) => machine(name).claims({ mode: "provision", ...over });
const journal = (name: string): string[] => w.journalOf(name);

interface Baseline {
  node: string;
  issued: number;
  signatures: number;
  codes: number;
  hasCode: boolean;
  journal: number;
}
async function baseline(node: string): Promise<Baseline> {
  return {
    node,
    issued: (await w.store.listIssued(w.deviceId(node))).length,
    signatures: w.signatures(),
    codes: w.installCodesIssued(),
    hasCode: await w.store.hasInstallCodeFor(w.deviceId(node), Date.now()),
    journal: journal(node).length,
  };
}

/** The machine's run from here: the protocol steps; an install code it got fails the test (it would write it). */
async function refusedRun(steps: () => Promise<string | undefined>): Promise<AttestationRefused> {
  let code: string | undefined;
  try {
    code = await steps();
  } catch (e) {
    if (e instanceof AttestationRefused) return e;
    throw e;
  }
  assert.fail(`accepted, but it must be refused${code ? " (and the machine got an install code)" : ""}`);
}

interface Expect {
  step: "challenge" | "evidence" | "confirm";
  /** Check names that must be among the reasons and in the journal entry. */
  checks: (string | RegExp)[];
  status?: number;
  error?: string;
  /** false: the machine is unknown, so there is no device to journal on. */
  journalled?: boolean;
}
const has = (names: string[], want: string | RegExp) => names.some((n) => (typeof want === "string" ? n === want : want.test(n)));

/** Refused at the expected step naming the checks; nothing signed, no code, journalled. */
async function assertRefusal(b: Baseline, r: AttestationRefused, e: Expect): Promise<void> {
  const names = r.refusal.reasons.map((x) => x.check);
  assert.equal(r.step, e.step, r.message);
  assert.equal(r.status, e.status ?? 403, r.message);
  assert.equal(r.refusal.error, e.error ?? "refused", r.message);
  for (const c of e.checks) assert.ok(has(names, c), `${String(c)} among ${names.join(", ")}`);
  assert.equal((await w.store.listIssued(w.deviceId(b.node))).length, b.issued, "no certificate issued");
  assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
  assert.equal(w.installCodesIssued(), b.codes, "no install code issued");
  assert.equal(await w.store.hasInstallCodeFor(w.deviceId(b.node), Date.now()), b.hasCode, "no install code for the node");
  const entries = journal(b.node);
  if (e.journalled === false) {
    assert.equal(entries.length, b.journal, "no journal entry");
    return;
  }
  const added = entries.slice(b.journal).join("\n");
  assert.ok(added.length > 0, "a journal entry was written");
  assert.match(added, new RegExp(`${e.step} refused`));
  for (const c of names.filter((n) => e.checks.some((x) => has([n], x)))) assert.ok(added.includes(`\`${c}\``), `journal names ${c}:\n${added}`);
}

/** A request answered from what was kept: nothing signed, issued, coded or journalled since `b`. */
async function assertUnchanged(b: Baseline): Promise<void> {
  assert.equal((await w.store.listIssued(w.deviceId(b.node))).length, b.issued, "no certificate issued");
  assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
  assert.equal(w.installCodesIssued(), b.codes, "no install code issued");
  assert.equal(await w.store.hasInstallCodeFor(w.deviceId(b.node), Date.now()), b.hasCode, "the install code is as it was");
  assert.equal(journal(b.node).length, b.journal, "no journal entry");
}

/** Count of a config-fetch outcome in the server's metrics. */
async function fetchOutcomes(baseUrl: string, outcome: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const m = new RegExp(`^fleetd_talos_config_fetches_total\\{outcome="${outcome}"\\} (\\d+)`, "m").exec(text);
  return Number(m?.[1] ?? 0);
}

test("unknown EK: the machine is listed as pending; nothing signed, no device journalled", async () => {
  const b = await baseline(NODE);
  let presented = "";
  const r = await refusedRun(() =>
    run(async (m) => {
      // This TPM's P-256 EK (default template, no certificate): no node approves it.
      const stranger = ekFromTemplate(m, "L-2");
      presented = stranger.binding;
      await challenge(m, provision(NODE, { serial: "STRANGER-2" }), { present: [stranger] });
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "challenge", checks: ["ek.unknown"], error: "pending", journalled: false });
  const pending = await w.store.listPendingEks();
  assert.ok(pending.some((p) => p.binding === presented && p.serial === "STRANGER-2"), "listed as pending with its binding and claimed serial");
});

test("an approved EK missing: the node approves RSA and ECC, the machine presents only the RSA EK", async () => {
  const b = await baseline(NODE);
  const r = await refusedRun(() =>
    run(async (m) => {
      const rsaOnly = [m.tpm.eks.rsa, m.tpm.eks.ecc].filter((e) => e.binding === machine().bindings.rsa);
      assert.equal(rsaOnly.length, 1);
      await challenge(m, provision(), { present: rsaOnly });
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "challenge", checks: ["ek.missing"] });
  assert.ok(r.refusal.reasons.some((x) => x.check === "ek.missing" && x.detail.includes(machine().bindings.ecc)), "names the missing ECC EK");
});

test("a bad EK chain: a TPM whose EK certificates another manufacturer's CA issued", async () => {
  const b = await baseline(FOREIGN);
  const r = await refusedRun(() => run(async (m) => (await honest(m, provision(FOREIGN))).code, FOREIGN));
  await assertRefusal(b, r, { step: "challenge", checks: ["ek.chain.signature"] });
});

test("control for the chain case: a foreign-made TPM on a node approving its EKs with chain: false passes", async () => {
  const done = await run(async (m) => honest(m, machine(UNCHAINED).claims({ mode: "intake" })), UNCHAINED);
  assert.equal(done.accepted.verdict, "pass");
  assert.equal((await w.store.listIssued(w.deviceId(UNCHAINED))).length, 2, "LDevID and LAK issued");
});

test("a replayed nonce: the evidence sent again gets its own answer back and nothing more; a new quote over the spent nonce is refused", async () => {
  const first = await run(async (m) => {
    const s = await challenge(m, provision());
    const ev = evidence(m, s);
    return { s, ev, accepted: await sendEvidence(m, ev.body) };
  });
  const b = await baseline(NODE);
  // The same request again (a machine that lost the answer retries): the answer kept for it, nothing done twice.
  assert.deepEqual(await run((m) => sendEvidence(m, first.ev.body)), first.accepted, "the kept answer, as it was");
  await assertUnchanged(b);
  // Anything else over that nonce — here a fresh quote and certify by the same TPM — is a reuse.
  const r = await refusedRun(() => run(async (m) => void (await sendEvidence(m, evidence(m, first.s).body))));
  await assertRefusal(b, r, { step: "evidence", status: 409, checks: ["nonce.reused"] });
});

test("claims changed after the challenge: the quote binds another serial", async () => {
  const b = await baseline(NODE);
  const r = await refusedRun(() =>
    run(async (m) => {
      const s = await challenge(m, provision());
      const ev = evidence(m, s, { quoteClaims: { ...s.claims, serial: "7XK2LM9" } });
      await sendEvidence(m, ev.body);
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "evidence", checks: ["quote.extraData"] });
});

test("claims changed: the LLDP switch port is not the one NetBox cables the node to", async () => {
  const b = await baseline(NODE);
  const lldp = { chassisId: "tor-a1", portId: "ethernet1/1/9" };
  const r = await refusedRun(() => run(async (m) => (await honest(m, provision(NODE, { lldp }))).code));
  await assertRefusal(b, r, { step: "evidence", checks: ["gate.switchPort"] });
});

test("a quote over other PCRs: PCRs 0–7 quoted, values for 0–15 sent", async () => {
  const b = await baseline(NODE);
  const r = await refusedRun(() =>
    run(async (m) => {
      const s = await challenge(m, provision());
      const ev = evidence(m, s, {
        quoteSelection: [{ hash: TPM_ALG.SHA256, pcrs: [0, 1, 2, 3, 4, 5, 6, 7] }],
        sendPcrs: [{ hash: TPM_ALG.SHA256, pcrs: Array.from({ length: 16 }, (_, i) => i) }],
      });
      await sendEvidence(m, ev.body);
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "evidence", checks: ["quote.pcrSelect"] });
});

test("a quote over other PCRs: only PCRs 8–15 quoted (consistently), so the boot PCRs 0–7 are unproven", async () => {
  const b = await baseline(NODE);
  const r = await refusedRun(() =>
    run(async (m) => {
      const s = await challenge(m, provision());
      const ev = evidence(m, s, { quoteSelection: [{ hash: TPM_ALG.SHA256, pcrs: [8, 9, 10, 11, 12, 13, 14, 15] }] });
      await sendEvidence(m, ev.body);
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "evidence", checks: ["policy.pcr-missing"] });
});

test("a tampered log: one byte of the HookOS signing authority event flipped", async () => {
  const b = await baseline(NODE);
  const { log, event } = flipEventDataByte(machine().eventLog, (e) => e.type === EV.EFI_VARIABLE_AUTHORITY);
  const r = await refusedRun(() =>
    run(async (m) => {
      const s = await challenge(m, provision());
      await sendEvidence(m, evidence(m, s, { eventLog: log }).body);
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "evidence", checks: ["policy.event-digest"] });
  assert.ok(r.refusal.reasons.some((x) => x.check === "policy.event-digest" && x.event === event.index), `names event ${event.index}`);
});

test("a policy failure: a machine that booted with Secure Boot off (its log replays, the policy refuses it)", async () => {
  const b = await baseline(INSECURE);
  const r = await refusedRun(() => run(async (m) => (await honest(m, provision(INSECURE))).code, INSECURE));
  await assertRefusal(b, r, { step: "evidence", checks: ["policy.secure-boot"] });
  assert.ok(!r.refusal.reasons.some((x) => x.check.startsWith("quote.")), "the quote itself holds");
});

test("a certify from an earlier session: session 1's LDevID certify sent in session 2", async () => {
  const earlier = await run(async (m) => evidence(m, await challenge(m, provision())));
  const b = await baseline(NODE);
  const r = await refusedRun(() =>
    run(async (m) => {
      const s = await challenge(m, provision());
      await sendEvidence(m, evidence(m, s, { ldevid: earlier.ldevid }).body);
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "evidence", checks: ["ldevid.certify.extraData"] });
});

test("a reused AK: the AK of an earlier session presented again (the same challenge retried while its session is open gets that session back)", async () => {
  const first = await run(async (m) => {
    const claims = provision();
    const s = await challenge(m, claims);
    // The identical challenge again before the session moved on: the same session, nothing new opened.
    const again = await challenge(m, claims, { ak: s.ak });
    assert.equal(again.response.sessionId, s.response.sessionId, "the retried challenge gets its own session back");
    await sendEvidence(m, evidence(m, s).body);
    return s;
  });
  const b = await baseline(NODE);
  const r = await refusedRun(() => run(async (m) => void (await challenge(m, provision(), { ak: first.ak }))));
  await assertRefusal(b, r, { step: "challenge", checks: ["ak.reused"] });
});

test("an LDevID key with the wrong attributes: created from the AK template (restricted)", async () => {
  const b = await baseline(NODE);
  const r = await refusedRun(() =>
    run(async (m) => {
      const s = await challenge(m, provision());
      await sendEvidence(m, evidence(m, s, { ldevidTemplate: akTemplate }).body);
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "evidence", checks: ["ldevid.attributes.restricted"] });
});

test("a confirm signed by another key: a fresh key nobody certified signs the confirm digest", async () => {
  const state = await run(async (m) => {
    const s = await challenge(m, provision());
    const ev = evidence(m, s);
    return { s, ev, accepted: await sendEvidence(m, ev.body) };
  });
  const b = await baseline(NODE);
  const r = await refusedRun(() =>
    run(async (m) => {
      const other = uncertifiedKey(m);
      await sendConfirm(m, confirmBody(m, state.s, state.ev, state.accepted, other));
      return undefined;
    }),
  );
  await assertRefusal(b, r, { step: "confirm", checks: ["confirm.signature.signature"] });
});

test("a device moved to decommissioning between challenge and evidence", async () => {
  const id = w.deviceId(NODE);
  const status = w.inventory.get(id)?.status ?? "planned";
  const b = await baseline(NODE);
  try {
    const r = await refusedRun(() =>
      run(async (m) => {
        const s = await challenge(m, provision());
        w.inventory.update(id, { status: "decommissioning" });
        await sendEvidence(m, evidence(m, s).body);
        return undefined;
      }),
    );
    await assertRefusal(b, r, { step: "evidence", checks: ["gate.status"] });
  } finally {
    w.inventory.update(id, { status });
  }
});

test("a device moved to decommissioning between evidence and confirm: no install code", async () => {
  const id = w.deviceId(NODE);
  const status = w.inventory.get(id)?.status ?? "planned";
  const state = await run(async (m) => {
    const s = await challenge(m, provision());
    const ev = evidence(m, s);
    const accepted = await sendEvidence(m, ev.body);
    return { s, ev, body: confirmBody(m, s, ev, accepted) };
  });
  const b = await baseline(NODE);
  try {
    w.inventory.update(id, { status: "decommissioning" });
    const r = await refusedRun(() => run(async (m) => unwrap(m, state.s, await sendConfirm(m, state.body))));
    await assertRefusal(b, r, { step: "confirm", checks: ["gate.status"] });
  } finally {
    w.inventory.update(id, { status });
  }
});

let installCode = "";

test("a confirm replayed: the accepted confirm sent again gets its own answer (the stored code); any other confirm for that session gets nothing", async () => {
  // The honest run: it gets an install code (the control for "no code" above).
  const done = await run(async (m) => honest(m, provision()));
  assert.match(done.code ?? "", /^[0-9a-f]{64}$/);
  installCode = done.code as string;

  const b = await baseline(NODE);
  assert.ok(b.hasCode);
  // The same confirm again (the machine lost the answer): the same code, wrapped to the same TPM; nothing new.
  assert.equal(await run(async (m) => unwrap(m, done.session, await sendConfirm(m, done.confirm))), installCode, "the kept answer unwraps to the stored code");
  await assertUnchanged(b);
  // A confirm that is not that request — signed by another key — for the confirmed session gets nothing.
  const r = await refusedRun(() =>
    run(async (m) => unwrap(m, done.session, await sendConfirm(m, confirmBody(m, done.session, done.evidence, done.accepted, uncertifiedKey(m))))),
  );
  await assertRefusal(b, r, { step: "confirm", status: 409, checks: ["confirm.replayed"] });
});

test("a config fetch with a wrong code, and a second fetch: 404, nothing signed, no code issued", async () => {
  assert.ok(installCode, "the previous test left an install code");
  const { baseUrl } = await w.configServer();
  const b = await baseline(NODE);
  const uuid = machine().claims().uuid;
  const unknown = await fetchOutcomes(baseUrl, "unknown-code");
  const wrong = await fetch(`${baseUrl}/talos/config?uuid=${uuid}&code=${"1".repeat(64)}`);
  assert.equal(wrong.status, 404);
  assert.equal(((await wrong.json()) as { error: string }).error, "unknown-code");
  assert.equal(await w.store.hasInstallCodeFor(w.deviceId(NODE), Date.now()), true, "a wrong code does not spend the right one");
  const ok = await fetch(`${baseUrl}/talos/config?uuid=${uuid}&code=${installCode}`);
  assert.equal(ok.status, 200);
  await ok.text();
  const again = await fetch(`${baseUrl}/talos/config?uuid=${uuid}&code=${installCode}`);
  assert.equal(again.status, 404);
  assert.equal(((await again.json()) as { error: string }).error, "unknown-code");
  assert.equal(await fetchOutcomes(baseUrl, "unknown-code"), unknown + 2, "both refusals counted as unknown-code");
  assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
  assert.equal(w.installCodesIssued(), b.codes, "no install code issued");
  assert.equal((await w.store.listIssued(w.deviceId(NODE))).length, b.issued);
  // A config fetch names no node until its code matches (a UUID is public): refusals are metrics and log
  // lines, never journal entries; the one entry added is the delivery's (queued when the response finished).
  for (let i = 0; i < 50 && journal(NODE).length === b.journal; i++) {
    await w.outbox.flush(w.deviceId(NODE));
    await new Promise((res) => setTimeout(res, 20));
  }
  const added = journal(NODE).slice(b.journal);
  assert.equal(added.length, 1, added.join("\n"));
  assert.match(added[0] ?? "", /fetched its one-time config/);
});

test("the same cases as the real-platform matrix (refusals.it.test.ts), by name", () => {
  const src = resolve(fileURLToPath(import.meta.url), "../../../../../src");
  const names = (file: string) => [...readFileSync(file, "utf8").matchAll(/^test\("((?:[^"\\]|\\.)*)"/gm)].map((m) => m[1] as string).filter((n) => !n.startsWith("the same cases as"));
  const real = names(join(src, "attestation/refusals.it.test.ts"));
  assert.ok(real.length >= 19, `read ${real.length} cases from the real-platform matrix`);
  assert.deepEqual(names(join(src, "unit/platform/protocol/refusals.test.ts")), real);
});
