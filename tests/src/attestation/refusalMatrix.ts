/**
 * The refusal matrix of the attestation protocol: one table of misbehaving machines, each with the step that
 * must catch it and the checks it must name, run by two worlds —
 *  - refusals.it.test.ts: the real platform (NetBox, swtpm, SoftHSM2, the server, tink-action's write-meta);
 *  - unit/platform/protocol/refusals.test.ts: the protocol engine alone (memoryWorld.ts: in-memory adapters and
 *    a node:crypto TPM).
 * After each refusal
 *  - nothing is signed: the node's issued certificates and the CA key's signature count do not move;
 *  - no install code is issued, and where the world has a disk (a GPT image write-meta would write the code to)
 *    it keeps its SHA-256;
 *  - the device's journal gets an entry naming the check (an unknown machine has no device: it is listed as
 *    pending instead).
 * Beyond the list: a device decommissioned between evidence and confirm (the confirm re-checks the
 * gates before it releases the install code). Config fetches with a wrong or spent code name no node, so they
 * are checked by their answer and metric, not the journal.
 * FLEETD_TEST_VERBOSE=1 prints each refusal's step, status and checks.
 */
import { strict as assert } from "node:assert";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { EV } from "@fleetd/verify/eventlog";
import { AttestationRefused, type ConfirmWire, type EvidenceWire } from "@fleetd/platform/protocol/client";
import type { Claims, ConfirmResponse, EvidenceResponse } from "@fleetd/platform/protocol";
import type { AttestationStore } from "@fleetd/platform/state";
import { flipEventDataByte } from "./machine.js";
import type { Evidence, EvidenceOptions as CommonEvidenceOptions, Session } from "./machineTypes.js";

export const NODE = "worker-1";
/** A machine whose firmware runs with Secure Boot off (its TPM measured that boot). */
export const INSECURE = "worker-sb-off";
/** A machine whose TPM another manufacturer made: its EK certificates chain to a CA the server does not trust. */
export const FOREIGN = "worker-foreign";
/** The same kind of TPM on a node that approves its EKs with `chain: false`: the control for the chain case. */
export const UNCHAINED = "worker-unchained";
/** The machines a world runs the matrix with, besides worker-1 (world.ts / memoryWorld.ts MachineSpec). */
export const MATRIX_MACHINES = {
  [INSECURE]: { boot: { secureBoot: 0 } },
  [FOREIGN]: { manufacturer: "foreign" },
  [UNCHAINED]: { manufacturer: "foreign", chain: false },
} as const;

/** How a case's evidence differs from the honest machine's. */
export interface EvidenceOptions<L> extends CommonEvidenceOptions<L> {
  /** Create the "LDevID" from the AK template: a restricted key. */
  restrictedLdevid?: boolean;
}

/** A machine's steps (machine.ts on swtpm, memoryWorld.ts on the software TPM); M: the machine, Ek, Key, L its keys. */
export interface Steps<M, Ek extends { binding: string }, Key, L> {
  challenge(m: M, claims: Claims, o?: { present?: Ek[]; ak?: Key }): Promise<Session<Ek, Key>>;
  /** Every EK with a certificate (what the honest client presents). */
  eks(m: M): Ek[] | Promise<Ek[]>;
  /** An EK of this TPM from a profile template, presented without a certificate. */
  ekFromTemplate(m: M, templateId: "L-2"): Ek | Promise<Ek>;
  evidence(m: M, s: Session<Ek, Key>, o?: EvidenceOptions<L>): Evidence<L> | Promise<Evidence<L>>;
  sendEvidence(m: M, body: EvidenceWire): Promise<EvidenceResponse>;
  confirmBody(m: M, s: Session<Ek, Key>, ev: Evidence<L>, accepted: EvidenceResponse, signer?: Key): ConfirmWire | Promise<ConfirmWire>;
  sendConfirm(m: M, body: ConfirmWire): Promise<ConfirmResponse>;
  unwrap(m: M, s: Session<Ek, Key>, conf: ConfirmResponse): string | undefined | Promise<string | undefined>;
  uncertifiedKey(m: M): Key | Promise<Key>;
  honest(m: M, claims: Claims): Promise<{ session: Session<Ek, Key>; evidence: Evidence<L>; accepted: EvidenceResponse; confirm: ConfirmWire; code?: string }>;
}

/** The machine's disk: a Talos-like GPT image that write-meta writes an install code to. */
export interface Disks {
  create(): string;
  writeMeta(disk: string, code: string): void;
  /** The install code in the disk's META (tag 0x0b), as Talos would read it. */
  metaCode(disk: string): string | undefined;
}

/** A world the matrix runs in: its machines' steps and what the assertions read. */
export interface RefusalWorld<M, Ek extends { binding: string }, Key, L> {
  steps: Steps<M, Ek, Key, L>;
  /** Runs `fn` as the machine of node `name`. */
  run<T>(fn: (m: M) => Promise<T>, name: string): Promise<T>;
  machine(name: string): { claims(over?: Partial<Claims>): Claims; bindings: { rsa: string; ecc: string }; eventLog: Uint8Array };
  store: Pick<AttestationStore, "listIssued" | "hasInstallCodeFor" | "listPendingEks">;
  deviceId(name: string): Promise<number>;
  /** The texts of the journal entries on the node's device. */
  journal(name: string): Promise<string[]>;
  signatures(): number;
  installCodesIssued(): number;
  deviceStatus(name: string): Promise<string>;
  /** An operator sets the device's status (`why` for the change log). */
  setDeviceStatus(name: string, status: string, why: string): Promise<void>;
  /** The base URL of talos-config-server's app over the world's service. */
  configServer(): Promise<string>;
  /** One wait for what a step queued to reach the journal. */
  settle(name: string): Promise<void>;
  /** Where the world has disks, the matrix writes every install code a machine gets to one. */
  disks?: Disks;
}

interface Baseline {
  node: string;
  issued: number;
  signatures: number;
  codes: number;
  hasCode: boolean;
  journal: number;
  disk?: { path: string; sha: string };
}

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

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

/** Count of a config-fetch outcome in the server's metrics. */
async function fetchOutcomes(baseUrl: string, outcome: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const m = new RegExp(`^fleetd_talos_config_fetches_total\\{outcome="${outcome}"\\} (\\d+)`, "m").exec(text);
  return Number(m?.[1] ?? 0);
}

/** What the cases use in one world: the machine's steps, the baseline and the assertions after a refusal. */
export class Matrix<M, Ek extends { binding: string }, Key, L> {
  constructor(readonly w: RefusalWorld<M, Ek, Key, L>) {}

  get s(): Steps<M, Ek, Key, L> {
    return this.w.steps;
  }
  run<T>(fn: (m: M) => Promise<T>, name = NODE): Promise<T> {
    return this.w.run(fn, name);
  }
  provision(name = NODE, over: Partial<Claims> = {}): Claims {
    return this.w.machine(name).claims({ mode: "provision", ...over });
  }

  /** An honest session of worker-1 up to its accepted evidence (not confirmed). */
  accepted(): Promise<{ s: Session<Ek, Key>; ev: Evidence<L>; accepted: EvidenceResponse }> {
    return this.run(async (m) => {
      const s = await this.s.challenge(m, this.provision());
      const ev = await this.s.evidence(m, s);
      return { s, ev, accepted: await this.s.sendEvidence(m, ev.body) };
    });
  }

  async baseline(node: string): Promise<Baseline> {
    const w = this.w;
    const path = w.disks?.create();
    return {
      node,
      issued: (await w.store.listIssued(await w.deviceId(node))).length,
      signatures: w.signatures(),
      codes: w.installCodesIssued(),
      hasCode: await w.store.hasInstallCodeFor(await w.deviceId(node), Date.now()),
      journal: (await w.journal(node)).length,
      ...(path ? { disk: { path, sha: sha256(path) } } : {}),
    };
  }

  /** The machine's run from here: the protocol steps, then write-meta if (and only if) it got an install code. */
  async refusedRun(b: Baseline, steps: () => Promise<string | undefined>): Promise<AttestationRefused> {
    let code: string | undefined;
    try {
      code = await steps();
      if (code && b.disk) this.w.disks?.writeMeta(b.disk.path, code);
    } catch (e) {
      if (e instanceof AttestationRefused) return e;
      throw e;
    }
    assert.fail(`accepted, but it must be refused${code ? " (and the machine got an install code)" : ""}`);
  }

  /** Refused at the expected step naming the checks; nothing signed, no code, disk untouched, journalled. */
  async assertRefusal(b: Baseline, r: AttestationRefused, e: Expect): Promise<void> {
    const w = this.w;
    const names = r.refusal.reasons.map((x) => x.check);
    if (process.env["FLEETD_TEST_VERBOSE"]) console.log(`${e.step} ${r.status} ${r.refusal.error}: ${names.join(", ")}`);
    assert.equal(r.step, e.step, r.message);
    assert.equal(r.status, e.status ?? 403, r.message);
    assert.equal(r.refusal.error, e.error ?? "refused", r.message);
    for (const c of e.checks) assert.ok(has(names, c), `${String(c)} among ${names.join(", ")}`);
    assert.equal((await w.store.listIssued(await w.deviceId(b.node))).length, b.issued, "no certificate issued");
    assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
    assert.equal(w.installCodesIssued(), b.codes, "no install code issued");
    assert.equal(await w.store.hasInstallCodeFor(await w.deviceId(b.node), Date.now()), b.hasCode, "no install code for the node");
    if (b.disk) assert.equal(sha256(b.disk.path), b.disk.sha, "disk image untouched");
    const entries = await w.journal(b.node);
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
  async assertUnchanged(b: Baseline): Promise<void> {
    const w = this.w;
    assert.equal((await w.store.listIssued(await w.deviceId(b.node))).length, b.issued, "no certificate issued");
    assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
    assert.equal(w.installCodesIssued(), b.codes, "no install code issued");
    assert.equal(await w.store.hasInstallCodeFor(await w.deviceId(b.node), Date.now()), b.hasCode, "the install code is as it was");
    assert.equal((await w.journal(b.node)).length, b.journal, "no journal entry");
  }

  /** Runs `body` (which moves worker-1's device to decommissioning), then sets the device's `status` back. */
  async decommissioned(status: string, body: () => Promise<void>): Promise<void> {
    try {
      await body();
    } finally {
      await this.w.setDeviceStatus(NODE, status, "back");
    }
  }

  /** The install code of the replayed-confirm case, which the config-fetch case after it spends. */
  installCode = "";
}

/** One case of the matrix: its name (the test's) and what it does in a world. */
export interface RefusalCase {
  name: string;
  run<M, Ek extends { binding: string }, Key, L>(x: Matrix<M, Ek, Key, L>): Promise<void>;
}

/** A machine whose evidence differs from the honest machine's in `options` only: refused at evidence, naming `check`. */
function evidenceCase(name: string, options: (s: Session<unknown, unknown>) => EvidenceOptions<never>, check: string): RefusalCase {
  return {
    name,
    async run(x) {
      const b = await x.baseline(NODE);
      const r = await x.refusedRun(b, () =>
        x.run(async (m) => {
          const s = await x.s.challenge(m, x.provision());
          await x.s.sendEvidence(m, (await x.s.evidence(m, s, options(s))).body);
          return undefined;
        }),
      );
      await x.assertRefusal(b, r, { step: "evidence", checks: [check] });
    },
  };
}

/** The cases, in the order they run (the last two share the install code of the replayed confirm). */
export const REFUSAL_CASES: readonly RefusalCase[] = [
  {
    name: "unknown EK: the machine is listed as pending; nothing signed, no device journalled",
    async run(x) {
      const b = await x.baseline(NODE);
      let presented = "";
      const r = await x.refusedRun(b, () =>
        x.run(async (m) => {
          // This TPM's P-256 EK (default template, no certificate): no node approves it.
          const stranger = await x.s.ekFromTemplate(m, "L-2");
          presented = stranger.binding;
          await x.s.challenge(m, x.provision(NODE, { serial: "STRANGER-2" }), { present: [stranger] });
          return undefined;
        }),
      );
      await x.assertRefusal(b, r, { step: "challenge", checks: ["ek.unknown"], error: "pending", journalled: false });
      const pending = await x.w.store.listPendingEks();
      assert.ok(pending.some((p) => p.binding === presented && p.serial === "STRANGER-2"), "listed as pending with its binding and claimed serial");
    },
  },
  {
    name: "an approved EK missing: the node approves RSA and ECC, the machine presents only the RSA EK",
    async run(x) {
      const bindings = x.w.machine(NODE).bindings;
      const b = await x.baseline(NODE);
      const r = await x.refusedRun(b, () =>
        x.run(async (m) => {
          const rsaOnly = (await x.s.eks(m)).filter((e) => e.binding === bindings.rsa);
          assert.equal(rsaOnly.length, 1);
          await x.s.challenge(m, x.provision(), { present: rsaOnly });
          return undefined;
        }),
      );
      await x.assertRefusal(b, r, { step: "challenge", checks: ["ek.missing"] });
      assert.ok(r.refusal.reasons.some((c) => c.check === "ek.missing" && c.detail.includes(bindings.ecc)), "names the missing ECC EK");
    },
  },
  {
    name: "a bad EK chain: a TPM whose EK certificates another manufacturer's CA issued",
    async run(x) {
      const b = await x.baseline(FOREIGN);
      const r = await x.refusedRun(b, () => x.run(async (m) => (await x.s.honest(m, x.provision(FOREIGN))).code, FOREIGN));
      await x.assertRefusal(b, r, { step: "challenge", checks: ["ek.chain.signature"] });
    },
  },
  {
    name: "control for the chain case: a foreign-made TPM on a node approving its EKs with chain: false passes",
    async run(x) {
      const done = await x.run(async (m) => x.s.honest(m, x.w.machine(UNCHAINED).claims({ mode: "intake" })), UNCHAINED);
      assert.equal(done.accepted.verdict, "pass");
      assert.equal((await x.w.store.listIssued(await x.w.deviceId(UNCHAINED))).length, 2, "LDevID and LAK issued");
    },
  },
  {
    name: "a replayed nonce: the evidence sent again gets its own answer back and nothing more; a new quote over the spent nonce is refused",
    async run(x) {
      const first = await x.accepted();
      const b = await x.baseline(NODE);
      // The same request again (a machine that lost the answer retries): the answer kept for it, nothing done twice.
      assert.deepEqual(await x.run((m) => x.s.sendEvidence(m, first.ev.body)), first.accepted, "the kept answer, as it was");
      await x.assertUnchanged(b);
      // Anything else over that nonce — here a fresh quote and certify by the same TPM — is a reuse.
      const r = await x.refusedRun(b, () => x.run(async (m) => void (await x.s.sendEvidence(m, (await x.s.evidence(m, first.s)).body))));
      await x.assertRefusal(b, r, { step: "evidence", status: 409, checks: ["nonce.reused"] });
    },
  },
  evidenceCase("claims changed after the challenge: the quote binds another serial", (s) => ({ quoteClaims: { ...s.claims, serial: "7XK2LM9" } }), "quote.extraData"),
  {
    name: "claims changed: the LLDP switch port is not the one NetBox cables the node to",
    async run(x) {
      const b = await x.baseline(NODE);
      const lldp = { chassisId: "tor-a1", portId: "ethernet1/1/9" };
      const r = await x.refusedRun(b, () => x.run(async (m) => (await x.s.honest(m, x.provision(NODE, { lldp }))).code));
      await x.assertRefusal(b, r, { step: "evidence", checks: ["gate.switchPort"] });
    },
  },
  evidenceCase(
    "a quote over other PCRs: PCRs 0–7 quoted, values for 0–15 sent",
    () => ({
      quoteSelection: [{ hash: TPM_ALG.SHA256, pcrs: [0, 1, 2, 3, 4, 5, 6, 7] }],
      sendPcrs: [{ hash: TPM_ALG.SHA256, pcrs: Array.from({ length: 16 }, (_, i) => i) }],
    }),
    "quote.pcrSelect",
  ),
  evidenceCase(
    "a quote over other PCRs: only PCRs 8–15 quoted (consistently), so the boot PCRs 0–7 are unproven",
    () => ({ quoteSelection: [{ hash: TPM_ALG.SHA256, pcrs: [8, 9, 10, 11, 12, 13, 14, 15] }] }),
    "policy.pcr-missing",
  ),
  {
    name: "a tampered log: one byte of the HookOS signing authority event flipped",
    async run(x) {
      const b = await x.baseline(NODE);
      const { log, event } = flipEventDataByte(x.w.machine(NODE).eventLog, (e) => e.type === EV.EFI_VARIABLE_AUTHORITY);
      const r = await x.refusedRun(b, () =>
        x.run(async (m) => {
          const s = await x.s.challenge(m, x.provision());
          await x.s.sendEvidence(m, (await x.s.evidence(m, s, { eventLog: log })).body);
          return undefined;
        }),
      );
      await x.assertRefusal(b, r, { step: "evidence", checks: ["policy.event-digest"] });
      assert.ok(r.refusal.reasons.some((c) => c.check === "policy.event-digest" && c.event === event.index), `names event ${event.index}`);
    },
  },
  {
    name: "a policy failure: a machine that booted with Secure Boot off (its log replays, the policy refuses it)",
    async run(x) {
      const b = await x.baseline(INSECURE);
      const r = await x.refusedRun(b, () => x.run(async (m) => (await x.s.honest(m, x.provision(INSECURE))).code, INSECURE));
      await x.assertRefusal(b, r, { step: "evidence", checks: ["policy.secure-boot"] });
      assert.ok(!r.refusal.reasons.some((c) => c.check.startsWith("quote.")), "the quote itself holds");
    },
  },
  {
    name: "a certify from an earlier session: session 1's LDevID certify sent in session 2",
    async run(x) {
      const earlier = await x.run(async (m) => x.s.evidence(m, await x.s.challenge(m, x.provision())));
      const b = await x.baseline(NODE);
      const r = await x.refusedRun(b, () =>
        x.run(async (m) => {
          const s = await x.s.challenge(m, x.provision());
          await x.s.sendEvidence(m, (await x.s.evidence(m, s, { ldevid: earlier.ldevid })).body);
          return undefined;
        }),
      );
      await x.assertRefusal(b, r, { step: "evidence", checks: ["ldevid.certify.extraData"] });
    },
  },
  {
    name: "a reused AK: the AK of an earlier session presented again (the same challenge retried while its session is open gets that session back)",
    async run(x) {
      const first = await x.run(async (m) => {
        const claims = x.provision();
        const s = await x.s.challenge(m, claims);
        // The identical challenge again before the session moved on: the same session, nothing new opened.
        const again = await x.s.challenge(m, claims, { ak: s.ak });
        assert.equal(again.response.sessionId, s.response.sessionId, "the retried challenge gets its own session back");
        await x.s.sendEvidence(m, (await x.s.evidence(m, s)).body);
        return s;
      });
      const b = await x.baseline(NODE);
      const r = await x.refusedRun(b, () => x.run(async (m) => void (await x.s.challenge(m, x.provision(), { ak: first.ak }))));
      await x.assertRefusal(b, r, { step: "challenge", checks: ["ak.reused"] });
    },
  },
  evidenceCase("an LDevID key with the wrong attributes: created from the AK template (restricted)", () => ({ restrictedLdevid: true }), "ldevid.attributes.restricted"),
  {
    name: "a confirm signed by another key: a fresh key nobody certified signs the confirm digest",
    async run(x) {
      const state = await x.accepted();
      const b = await x.baseline(NODE);
      const r = await x.refusedRun(b, () =>
        x.run(async (m) => {
          const other = await x.s.uncertifiedKey(m);
          await x.s.sendConfirm(m, await x.s.confirmBody(m, state.s, state.ev, state.accepted, other));
          return undefined;
        }),
      );
      await x.assertRefusal(b, r, { step: "confirm", checks: ["confirm.signature.signature"] });
    },
  },
  {
    name: "a device moved to decommissioning between challenge and evidence",
    async run(x) {
      const status = await x.w.deviceStatus(NODE);
      const b = await x.baseline(NODE);
      await x.decommissioned(status, async () => {
        const r = await x.refusedRun(b, () =>
          x.run(async (m) => {
            const s = await x.s.challenge(m, x.provision());
            await x.w.setDeviceStatus(NODE, "decommissioning", "decommissioning");
            await x.s.sendEvidence(m, (await x.s.evidence(m, s)).body);
            return undefined;
          }),
        );
        await x.assertRefusal(b, r, { step: "evidence", checks: ["gate.status"] });
      });
    },
  },
  {
    name: "a device moved to decommissioning between evidence and confirm: no install code",
    async run(x) {
      const status = await x.w.deviceStatus(NODE);
      const { s, ev, accepted } = await x.accepted();
      const state = { s, body: await x.run(async (m) => x.s.confirmBody(m, s, ev, accepted)) };
      const b = await x.baseline(NODE);
      await x.decommissioned(status, async () => {
        await x.w.setDeviceStatus(NODE, "decommissioning", "decommissioning");
        const r = await x.refusedRun(b, () => x.run(async (m) => x.s.unwrap(m, state.s, await x.s.sendConfirm(m, state.body))));
        await x.assertRefusal(b, r, { step: "confirm", checks: ["gate.status"] });
      });
    },
  },
  {
    name: "a confirm replayed: the accepted confirm sent again gets its own answer (the stored code); any other confirm for that session gets nothing",
    async run(x) {
      // The honest run: it gets an install code, which goes to META on the machine's disk where the world has
      // disks (the control for "no code" and "untouched" above).
      const disk = x.w.disks?.create();
      const before = disk ? sha256(disk) : "";
      const done = await x.run(async (m) => x.s.honest(m, x.provision()));
      assert.match(done.code ?? "", /^[0-9a-f]{64}$/);
      x.installCode = done.code as string;
      if (disk && x.w.disks) {
        x.w.disks.writeMeta(disk, x.installCode);
        assert.notEqual(sha256(disk), before, "write-meta changed the disk");
        assert.equal(x.w.disks.metaCode(disk), x.installCode);
      }

      const b = await x.baseline(NODE);
      assert.ok(b.hasCode);
      // The same confirm again (the machine lost the answer): the same code, wrapped to the same TPM; nothing new.
      assert.equal(await x.run(async (m) => x.s.unwrap(m, done.session, await x.s.sendConfirm(m, done.confirm))), x.installCode, "the kept answer unwraps to the stored code");
      await x.assertUnchanged(b);
      // A confirm that is not that request — signed by another key — for the confirmed session gets nothing.
      const r = await x.refusedRun(b, () =>
        x.run(async (m) => x.s.unwrap(m, done.session, await x.s.sendConfirm(m, await x.s.confirmBody(m, done.session, done.evidence, done.accepted, await x.s.uncertifiedKey(m))))),
      );
      await x.assertRefusal(b, r, { step: "confirm", status: 409, checks: ["confirm.replayed"] });
    },
  },
  {
    name: "a config fetch with a wrong code, and a second fetch: 404, nothing signed, no code issued",
    async run(x) {
      const w = x.w;
      assert.ok(x.installCode, "the previous test left an install code");
      const baseUrl = await w.configServer();
      const b = await x.baseline(NODE);
      const uuid = w.machine(NODE).claims().uuid;
      const unknown = await fetchOutcomes(baseUrl, "unknown-code");
      const wrong = await fetch(`${baseUrl}/talos/config?uuid=${uuid}&code=${"1".repeat(64)}`);
      assert.equal(wrong.status, 404);
      assert.equal(((await wrong.json()) as { error: string }).error, "unknown-code");
      assert.equal(await w.store.hasInstallCodeFor(await w.deviceId(NODE), Date.now()), true, "a wrong code does not spend the right one");
      const ok = await fetch(`${baseUrl}/talos/config?uuid=${uuid}&code=${x.installCode}`);
      assert.equal(ok.status, 200);
      await ok.text();
      const again = await fetch(`${baseUrl}/talos/config?uuid=${uuid}&code=${x.installCode}`);
      assert.equal(again.status, 404);
      assert.equal(((await again.json()) as { error: string }).error, "unknown-code");
      assert.equal(await fetchOutcomes(baseUrl, "unknown-code"), unknown + 2, "both refusals counted as unknown-code");
      assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
      assert.equal(w.installCodesIssued(), b.codes, "no install code issued");
      assert.equal((await w.store.listIssued(await w.deviceId(NODE))).length, b.issued);
      // A config fetch names no node until its code matches (a UUID is public): refusals are metrics and log
      // lines, never journal entries; the one entry added is the delivery's (queued when the response finished).
      for (let i = 0; i < 50 && (await w.journal(NODE)).length === b.journal; i++) await w.settle(NODE);
      const added = (await w.journal(NODE)).slice(b.journal);
      assert.equal(added.length, 1, added.join("\n"));
      assert.match(added[0] ?? "", /fetched its one-time config/);
    },
  },
];

/** The matrix's cases over `w`, in order (`test(c.name, c.run)` each); one state per world (the install code). */
export function refusalMatrix<M, Ek extends { binding: string }, Key, L>(w: () => RefusalWorld<M, Ek, Key, L>): { name: string; run: () => Promise<void> }[] {
  let x: Matrix<M, Ek, Key, L> | undefined;
  const matrix = () => (x ??= new Matrix(w()));
  return REFUSAL_CASES.map((c) => ({ name: c.name, run: () => c.run(matrix()) }));
}
