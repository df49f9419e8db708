/**
 * The contracts every state backend passes (SQLite and Kubernetes-held): `storeContract` for AttestationStore,
 * `handlerStoreContract` for HandlerStore (netbox-script's queue and intents). Exported as functions that
 * register node:test tests for a factory, so each backend's test file is one line per contract.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { AttestationStore, HandlerStore, NewHandlerJob, NodeRef, SessionRecord } from "@fleetd/platform/state";

const N1: NodeRef = { deviceId: 1, name: "n1" };
const N2: NodeRef = { deviceId: 2, name: "n2" };
const N9: NodeRef = { deviceId: 9, name: "n9" };

export function storeContract(name: string, open: () => Promise<AttestationStore>): void {
  const session = (id: string, over: Partial<SessionRecord> = {}): SessionRecord => ({
    id,
    node: { deviceId: 7, name: "node-a" },
    mode: "provision",
    nonce: "00".repeat(32),
    claimsHash: "11".repeat(32),
    akName: "000b" + "22".repeat(32),
    akPublic: "",
    secretHashes: ["33".repeat(32)],
    ekBindings: ["44".repeat(32)],
    data: { k: 1 },
    state: "challenged",
    createdAt: 1000,
    expiresAt: 2000,
    ...over,
  });

  test(`${name}: a session moves forward once; expired or unknown sessions never move`, async () => {
    const s = await open();
    try {
      await s.createSession(session("s1"));
      await assert.rejects(s.createSession(session("s1")));
      const got = await s.getSession("s1");
      assert.deepEqual(got?.secretHashes, ["33".repeat(32)]);
      assert.equal(await s.transitionSession("s1", "challenged", "evidenced", { x: 2 }, 1500), true);
      assert.equal(await s.transitionSession("s1", "challenged", "evidenced", { x: 3 }, 1500), false);
      assert.deepEqual((await s.getSession("s1"))?.data, { x: 2 });
      assert.equal(await s.transitionSession("s1", "evidenced", "confirmed", {}, 2000), false, "expired at 2000");
      assert.equal(await s.transitionSession("nope", "challenged", "evidenced", {}, 1500), false);
      assert.equal(await s.expireSessions(2000), 1);
      assert.equal(await s.getSession("s1"), undefined);
    } finally {
      await s.close();
    }
  });

  test(`${name}: concurrent transitions of one session: exactly one wins`, async () => {
    const s = await open();
    try {
      await s.createSession(session("s2"));
      const results = await Promise.all(Array.from({ length: 16 }, () => s.transitionSession("s2", "challenged", "evidenced", {}, 1500)));
      assert.equal(results.filter(Boolean).length, 1);
    } finally {
      await s.close();
    }
  });

  test(`${name}: an AK Name is accepted once`, async () => {
    const s = await open();
    try {
      assert.equal(await s.recordAkName("000baa", 1, 1), true);
      assert.equal(await s.recordAkName("000baa", 2, 2), false);
    } finally {
      await s.close();
    }
  });

  test(`${name}: pending EKs are listed with first/last seen and a count`, async () => {
    const s = await open();
    try {
      await s.recordPendingEk({ binding: "b1", serial: "S1", macs: ["02:00:00:00:00:01"], sourceAddress: "127.0.0.1" }, 10, 100);
      await s.recordPendingEk({ binding: "b1", serial: "S1", macs: ["02:00:00:00:00:01"], sourceAddress: "127.0.0.1" }, 20, 100);
      const [p] = await s.listPendingEks();
      assert.deepEqual({ first: p?.firstSeen, last: p?.lastSeen, count: p?.count }, { first: 10, last: 20, count: 2 });
      await s.deletePendingEk("b1");
      assert.deepEqual(await s.listPendingEks(), []);
    } finally {
      await s.close();
    }
  });

  test(`${name}: install codes: one claim at a time, release on close, delete on finish, expiry`, async () => {
    const s = await open();
    try {
      await s.putInstallCode({ codeHash: "c1", node: N1, uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 5000 });
      assert.equal(await s.hasInstallCodeFor(1, 100), true);
      const a = await s.claimInstallCode("c1", "A", 100, 60_000);
      assert.equal(a?.config, "cfg");
      assert.equal(await s.claimInstallCode("c1", "B", 101, 60_000), undefined, "claimed by A");
      await s.releaseInstallCode("c1", "B");
      assert.equal(await s.claimInstallCode("c1", "B", 102, 60_000), undefined, "B cannot release A's claim");
      await s.releaseInstallCode("c1", "A");
      assert.ok(await s.claimInstallCode("c1", "B", 103, 60_000));
      assert.equal(await s.finishInstallCode("c1", "A"), false);
      assert.equal(await s.finishInstallCode("c1", "B"), true);
      assert.equal(await s.claimInstallCode("c1", "C", 104, 60_000), undefined, "gone after finish");
      await s.putInstallCode({ codeHash: "c2", node: N2, uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 200 });
      assert.equal(await s.claimInstallCode("c2", "A", 200, 60_000), undefined, "expired");
      await s.putInstallCode({ codeHash: "c3", node: N2, uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 9000 });
      assert.equal(await s.claimInstallCode("c2", "A", 100, 60_000), undefined, "replaced by the node's newer code");
      const claims = await Promise.all(Array.from({ length: 8 }, (_, i) => s.claimInstallCode("c3", `X${i}`, 300, 60_000)));
      assert.equal(claims.filter(Boolean).length, 1);
    } finally {
      await s.close();
    }
  });

  test(`${name}: concurrent first-one-wins operations: one session create, one AK Name, one finish, distinct generations`, async () => {
    const s = await open();
    try {
      const N = 8;
      const creates = await Promise.allSettled(Array.from({ length: N }, () => s.createSession(session("s3"))));
      assert.equal(creates.filter((r) => r.status === "fulfilled").length, 1, "one create of a session id");
      const aks = await Promise.all(Array.from({ length: N }, (_, i) => s.recordAkName("000bcc", i + 1, i)));
      assert.equal(aks.filter(Boolean).length, 1, "one recording of an AK Name");
      const gens = await Promise.all(Array.from({ length: N }, () => s.nextGeneration(77)));
      assert.deepEqual([...gens].sort((a, b) => a - b), Array.from({ length: N }, (_, i) => i + 1), "each generation handed out once");
      await s.putInstallCode({ codeHash: "c9", node: N9, uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 9000 });
      const claims = await Promise.all(Array.from({ length: N }, (_, i) => s.claimInstallCode("c9", `Y${i}`, 300, 60_000)));
      const winners = claims.filter((c): c is NonNullable<typeof c> => c !== undefined);
      assert.equal(winners.length, 1, "one claim");
      const claimer = winners[0]?.claimedBy ?? "";
      const finishes = await Promise.all(Array.from({ length: N }, () => s.finishInstallCode("c9", claimer)));
      assert.equal(finishes.filter(Boolean).length, 1, "one finish");
      await Promise.all(Array.from({ length: N }, (_, i) => s.recordPendingEk({ binding: "b9", serial: "S", macs: [], sourceAddress: "x" }, 100 + i, 100)));
      assert.equal((await s.listPendingEks()).find((p) => p.binding === "b9")?.count, N, "every sighting counted");
    } finally {
      await s.close();
    }
  });

  test(`${name}: generations count up per node; issued certificates and bootstrap tokens are kept`, async () => {
    const s = await open();
    try {
      assert.equal(await s.nextGeneration(1), 1);
      assert.equal(await s.nextGeneration(1), 2);
      assert.equal(await s.nextGeneration(2), 1);
      await s.recordIssued({ serial: "01", node: N1, kind: "ldevid", generation: 2, notAfter: 9, issuedAt: 1, der: "30", keyPublic: "00" });
      assert.deepEqual((await s.listIssued(1)).map((r) => [r.serial, r.node, r.der]), [["01", N1, "30"]]);
      assert.deepEqual(await s.listIssued(2), []);
      // a certificate whose step did not complete is void, and stays listed with why; voiding is idempotent
      await s.recordIssued({ serial: "02", node: N1, kind: "lak", generation: 2, notAfter: 9, issuedAt: 2, der: "31", keyPublic: "01" });
      await s.voidIssued(["02", "ff"], 5, "evidence did not complete: netbox-unavailable");
      await s.voidIssued(["02"], 6, "again");
      assert.deepEqual((await s.listIssued(1)).map((r) => [r.serial, r.voided]), [["01", undefined], ["02", { at: 5, why: "evidence did not complete: netbox-unavailable" }]]);
      await s.setBootstrapToken(N1, "abc123", 99);
      assert.deepEqual(await s.nodeForBootstrapToken("abc123"), N1);
      await s.deleteBootstrapToken(1);
      assert.equal(await s.nodeForBootstrapToken("abc123"), undefined);
    } finally {
      await s.close();
    }
  });

  test(`${name}: state follows the device ID, not the name: a renamed device keeps its state, another device with the old name gets none`, async () => {
    const s = await open();
    try {
      const a: NodeRef = { deviceId: 10, name: "worker-a" };
      await s.nextGeneration(10);
      await s.setBootstrapToken(a, "tok111", 99);
      await s.putInstallCode({ codeHash: "ca", node: a, uuid: "u", sourceAddress: "x", config: "cfg", expiresAt: 9000 });
      // device 11 is renamed worker-a in NetBox: nothing of device 10's is its
      assert.equal(await s.hasInstallCodeFor(11, 100), false);
      assert.equal(await s.getBootstrapToken(11), undefined);
      assert.equal(await s.nextGeneration(11), 1);
      assert.equal(await s.nextGeneration(10), 2);
      assert.equal(await s.voidInstallCodes(10), 1);
      assert.equal(await s.hasInstallCodeFor(10, 100), false);
    } finally {
      await s.close();
    }
  });

  test(`${name}: the pending table is capped; known bindings are still refreshed`, async () => {
    const s = await open();
    try {
      const p = (b: string) => ({ binding: b, serial: "S", macs: [], sourceAddress: "x" });
      assert.equal(await s.recordPendingEk(p("p1"), 1, 2), true);
      assert.equal(await s.recordPendingEk(p("p2"), 2, 2), true);
      assert.equal(await s.recordPendingEk(p("p3"), 3, 2), false, "full");
      assert.equal(await s.recordPendingEk(p("p1"), 4, 2), true, "a known binding is refreshed");
      assert.deepEqual((await s.listPendingEks()).map((x) => [x.binding, x.count]), [["p1", 2], ["p2", 1]]);
    } finally {
      await s.close();
    }
  });

  test(`${name}: expired install codes are taken once, without their config`, async () => {
    const s = await open();
    try {
      await s.putInstallCode({ codeHash: "e1", node: N1, uuid: "u", sourceAddress: "x", config: "secret-config", expiresAt: 100 });
      await s.putInstallCode({ codeHash: "e2", node: N2, uuid: "u", sourceAddress: "x", config: "cfg", expiresAt: 900 });
      const taken = await s.takeExpiredInstallCodes(100);
      assert.deepEqual(taken.map((c) => [c.codeHash, c.node, c.config]), [["e1", N1, ""]]);
      assert.deepEqual(await s.takeExpiredInstallCodes(100), []);
      assert.equal(await s.hasInstallCodeFor(2, 100), true);
    } finally {
      await s.close();
    }
  });

  test(`${name}: failure budgets are charged before the work, atomically, and refunded on success`, async () => {
    const s = await open();
    try {
      const charges = await Promise.all(Array.from({ length: 12 }, () => s.chargeLimit("addr:10.0.0.9", 1000, 60_000, 5)));
      assert.equal(charges.filter((c) => c.allowed).length, 5, "exactly the budget passes, however many race");
      assert.equal((await s.chargeLimit("addr:10.0.0.8", 1000, 60_000, 5)).allowed, true, "per key");
      await s.refundLimit("addr:10.0.0.8", 1001, 60_000);
      assert.equal((await s.chargeLimit("addr:10.0.0.8", 1002, 60_000, 1)).count, 1, "the refund took the charge back");
      assert.equal((await s.chargeLimit("addr:10.0.0.9", 61_000, 60_000, 5)).allowed, true, "a new window");
    } finally {
      await s.close();
    }
  });

  test(`${name}: a single-use token is accepted once until it expires`, async () => {
    const s = await open();
    try {
      const results = await Promise.all(Array.from({ length: 6 }, () => s.recordOnce("req-1", 500, 100)));
      assert.equal(results.filter(Boolean).length, 1);
      assert.equal(await s.recordOnce("req-1", 900, 600), true, "after expiry the token may be recorded again");
    } finally {
      await s.close();
    }
  });

  test(`${name}: session claims: one request at a time, released on an outage, stale claims taken over, nothing spent`, async () => {
    const s = await open();
    try {
      await s.createSession(session("c1"));
      assert.deepEqual(await s.claimSession("nope", "challenged", "A", 1100, 60_000), { ok: false, why: "unknown" });
      const a = await s.claimSession("c1", "challenged", "A", 1100, 60_000);
      assert.equal(a.ok, true);
      assert.equal(a.ok && a.session.claimedBy, "A");
      const b = await s.claimSession("c1", "challenged", "B", 1101, 60_000);
      assert.deepEqual({ ok: b.ok, why: !b.ok && b.why }, { ok: false, why: "busy" });
      await s.releaseSession("c1", "B");
      assert.equal((await s.claimSession("c1", "challenged", "B", 1102, 60_000)).ok, false, "B cannot release A's claim");
      await s.releaseSession("c1", "A");
      assert.equal((await s.getSession("c1"))?.state, "challenged", "a released claim spent nothing");
      assert.equal((await s.claimSession("c1", "challenged", "B", 1103, 60_000)).ok, true);
      assert.equal((await s.claimSession("c1", "challenged", "C", 1150, 40)).ok, true, "a claim older than staleMs is taken over");
      const wrong = await s.claimSession("c1", "evidenced", "D", 1200, 60_000);
      assert.deepEqual({ ok: wrong.ok, why: !wrong.ok && wrong.why }, { ok: false, why: "state" });
      const late = await s.claimSession("c1", "challenged", "D", 2000, 0);
      assert.deepEqual({ ok: late.ok, why: !late.ok && late.why }, { ok: false, why: "expired" });
      assert.equal((await s.chargeLimit("lock:provision:7", 1250, 60_000, 1)).allowed, true);
      assert.equal((await s.chargeLimit("lock:provision:7", 1251, 60_000, 1)).allowed, false, "a request's lock is held");
      await s.chargeLimit("addr:10.0.0.1", 1250, 60_000, 1);
      assert.equal(await s.releaseAllClaims() >= 2, true);
      assert.equal((await s.claimSession("c1", "challenged", "E", 1300, 60_000)).ok, true, "all claims released");
      assert.equal((await s.chargeLimit("lock:provision:7", 1301, 60_000, 1)).allowed, true, "and the locks");
      assert.equal((await s.chargeLimit("addr:10.0.0.1", 1301, 60_000, 1)).allowed, false, "but not the failure budgets");
      await s.createSession(session("race"));
      const wins = await Promise.all(["P", "Q", "R", "S"].map((c) => s.claimSession("race", "challenged", c, 1400, 60_000)));
      assert.equal(wins.filter((w) => w.ok).length, 1, "one claim of concurrent ones");
    } finally {
      await s.close();
    }
  });

  test(`${name}: a commit records a step's outcome and all it released at once, or nothing when its claim was lost`, async () => {
    const s = await open();
    try {
      const node = { deviceId: 7, name: "node-a" };
      await s.createSession(session("k1"));
      const cert = (serial: string, voided?: { at: number; why: string }) => ({ serial, node, kind: "ldevid" as const, generation: 1, notAfter: 9e12, issuedAt: 1100, der: "30", keyPublic: "00", ...(voided ? { voided } : {}) });
      await s.recordIssued(cert("aa01", { at: 1100, why: "reserved" }));
      assert.equal((await s.listIssued(7))[0]?.voided?.why, "reserved", "a reservation is void until its commit");
      await s.putInstallCode({ codeHash: "old", node, uuid: "u", sourceAddress: "a", config: "old", expiresAt: 9000 });
      assert.ok((await s.claimSession("k1", "challenged", "A", 1100, 60_000)).ok);
      const item = (key: string, deviceId: number | null = 7) => ({ key, deviceId, effect: { kind: "test", key }, notBefore: 0 });
      await s.enqueue([item("comp", null)], 1100);
      // another request took the claim over (A's was stale): A's commit changes nothing
      assert.ok((await s.claimSession("k1", "challenged", "B", 1200, 50)).ok);
      const lost = await s.commit({ session: { id: "k1", claimer: "A", to: "evidenced", data: { by: "A" } }, issued: [cert("aa01")], outbox: [item("k1:a")] }, 1201);
      assert.equal(lost, false);
      assert.equal((await s.getSession("k1"))?.state, "challenged");
      assert.equal((await s.listIssued(7))[0]?.voided?.why, "reserved");
      assert.deepEqual((await s.listOutbox()).map((o) => o.key), ["comp"]);
      const ok = await s.commit(
        {
          session: { id: "k1", claimer: "B", to: "evidenced", data: { by: "B" } },
          issued: [cert("aa01")],
          installCode: { codeHash: "new", node, uuid: "u", sourceAddress: "a", config: "new", expiresAt: 9000 },
          bootstrapToken: { node, tokenId: "abc123", expiresAt: 9000 },
          outbox: [item("k1:verdict"), item("k1:journal")],
          cancel: ["comp"],
        },
        1202,
      );
      assert.equal(ok, true);
      const after = await s.getSession("k1");
      assert.deepEqual({ state: after?.state, data: after?.data, claimedBy: after?.claimedBy ?? null }, { state: "evidenced", data: { by: "B" }, claimedBy: null });
      const issued = await s.listIssued(7);
      assert.deepEqual(issued.map((r) => [r.serial, r.voided]), [["aa01", undefined]], "the reservation became the issued certificate");
      assert.equal(await s.claimInstallCode("old", "X", 1300, 60_000), undefined, "the node's other code is void");
      assert.equal((await s.claimInstallCode("new", "X", 1300, 60_000))?.config, "new");
      assert.deepEqual(await s.getBootstrapToken(7), { tokenId: "abc123", expiresAt: 9000 });
      assert.deepEqual((await s.listOutbox()).map((o) => o.key), ["k1:verdict", "k1:journal"], "queued in order; the compensation cancelled");
      assert.equal(await s.commit({ session: { id: "k1", claimer: "B", to: "confirmed", data: {} } }, 1300), false, "a commit ends the claim");
      await s.recover(1400);
      assert.equal((await s.listOutbox()).length, 2, "recover changes nothing that is complete");
    } finally {
      await s.close();
    }
  });

  test(`${name}: runtime verdicts and the quarantine latch change only with a commit; a lost claim changes nothing; issued records are found by serial`, async () => {
    const s = await open();
    try {
      const node = { deviceId: 8, name: "node-r" };
      assert.equal(await s.getRuntime(8), undefined);
      const cert = { serial: "bb02", node, kind: "ldevid" as const, generation: 2, notAfter: 9e12, issuedAt: 1100, der: "30", keyPublic: "00" };
      await s.recordIssued(cert);
      assert.deepEqual(await s.issuedBySerial("bb02"), cert);
      assert.equal(await s.issuedBySerial("bb03"), undefined);
      // a failed verdict of a worker: latched and cordoned, in the step's commit
      await s.createSession(session("r1", { node }));
      assert.ok((await s.claimSession("r1", "challenged", "A", 1100, 60_000)).ok);
      assert.ok((await s.claimSession("r1", "challenged", "B", 1200, 50)).ok);
      const fail = { node, verdict: { verdict: "fail" as const, at: 1201 }, quarantine: { latch: { at: 1201, why: "policy.authority" } }, cordoned: true };
      assert.equal(await s.commit({ session: { id: "r1", claimer: "A", to: "evidenced", data: {} }, runtime: fail }, 1201), false);
      assert.equal(await s.getRuntime(8), undefined, "a lost claim's commit changes no verdict");
      assert.equal(await s.commit({ session: { id: "r1", claimer: "B", to: "evidenced", data: {} }, runtime: fail }, 1201), true);
      assert.deepEqual(await s.getRuntime(8), { node, verdict: { verdict: "fail", at: 1201 }, lastPassAt: null, quarantine: { at: 1201, why: "policy.authority" }, cordoned: true });
      // a later latch keeps the first; a pass does not release it
      await s.commit({ runtime: { node, verdict: { verdict: "pass", at: 1300 }, quarantine: { latch: { at: 1300, why: "other" } } } }, 1300);
      const held = await s.getRuntime(8);
      assert.deepEqual(held?.quarantine, { at: 1201, why: "policy.authority" });
      assert.equal(held?.lastPassAt, 1300);
      assert.equal(held?.verdict?.verdict, "pass");
      // only a release clears it; the cordon stays until it is lifted
      await s.commit({ runtime: { node, quarantine: "release" } }, 1400);
      assert.deepEqual({ q: (await s.getRuntime(8))?.quarantine, c: (await s.getRuntime(8))?.cordoned }, { q: null, c: true });
      await s.commit({ runtime: { node, verdict: { verdict: "pass", at: 1500 }, cordoned: false } }, 1500);
      assert.deepEqual(await s.getRuntime(8), { node, verdict: { verdict: "pass", at: 1500 }, lastPassAt: 1500, quarantine: null, cordoned: false });
      assert.equal(await s.getRuntime(7), undefined, "per device");
    } finally {
      await s.close();
    }
  });

  test(`${name}: a delivered install code is deleted with its outbox items at once; another claimer's commit changes nothing`, async () => {
    const s = await open();
    try {
      await s.putInstallCode({ codeHash: "d1", node: N1, uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 9000 });
      const claimed = await s.claimInstallCode("d1", "A", 100, 60_000);
      assert.ok(claimed);
      const items = [{ key: "d1:active", deviceId: 1, effect: { kind: "status" }, notBefore: 0 }];
      assert.equal(await s.commit({ delivered: { codeHash: "d1", claimer: "B" }, outbox: items }, 101), false);
      assert.deepEqual(await s.listOutbox(), []);
      assert.equal(await s.commit({ delivered: { codeHash: "d1", claimer: "A" }, outbox: items }, 102), true);
      assert.equal(await s.hasInstallCodeFor(1, 103), false);
      assert.equal(await s.claimInstallCode("d1", "C", 103, 0), undefined, "never claimable again");
      assert.deepEqual((await s.listOutbox()).map((o) => o.key), ["d1:active"]);
      await s.putInstallCode({ codeHash: "x1", node: N2, uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 500 });
      const taken = await s.takeExpiredInstallCodes(600, (r) => [{ key: `expired:${r.codeHash}`, deviceId: r.node.deviceId, effect: { kind: "failed" }, notBefore: 0 }]);
      assert.deepEqual(taken.map((r) => r.codeHash), ["x1"]);
      assert.deepEqual((await s.listOutbox()).map((o) => o.key), ["d1:active", "expired:x1"], "the expired code's effects with it");
    } finally {
      await s.close();
    }
  });

  test(`${name}: the outbox delivers each device's items in order, at most once at a time, and keeps failed ones with their error`, async () => {
    const s = await open();
    try {
      const item = (key: string, deviceId: number | null, notBefore = 0) => ({ key, deviceId, effect: { kind: "test", key }, notBefore });
      await s.enqueue([item("a1", 1), item("a2", 1), item("b1", 2)], 100);
      await s.enqueue([item("a1", 1), item("n1", null), item("n2", null, 5000), item("c1", 3, 5000), item("c2", 3)], 101);
      assert.deepEqual((await s.listOutbox()).map((o) => o.key), ["a1", "a2", "b1", "n1", "n2", "c1", "c2"], "a key queued twice is kept once");
      const first = await s.claimOutbox(200, "W1", 60_000, 10);
      assert.deepEqual(first.map((o) => o.key).sort(), ["a1", "b1", "n1"], "of each device its oldest item, if due; independent items on their own");
      assert.deepEqual(first.find((o) => o.key === "a1")?.effect, { kind: "test", key: "a1" });
      assert.deepEqual(await s.claimOutbox(201, "W2", 60_000, 10), [], "claimed items are not handed out twice; a2 waits for a1, c2 for c1");
      await s.completeOutbox("a1", "W2");
      assert.equal((await s.listOutbox()).some((o) => o.key === "a1"), true, "only the claimer completes");
      await s.completeOutbox("a1", "W1");
      await s.deferOutbox("b1", "W1", 1000, "NetBox unreachable");
      await s.completeOutbox("n1", "W1");
      const b1 = (await s.listOutbox()).find((o) => o.key === "b1");
      assert.deepEqual({ attempts: b1?.attempts, lastError: b1?.lastError, notBefore: b1?.notBefore }, { attempts: 1, lastError: "NetBox unreachable", notBefore: 1000 });
      assert.deepEqual((await s.claimOutbox(300, "W2", 60_000, 10)).map((o) => o.key), ["a2"], "a2 is now device 1's oldest; b1 waits until 1000");
      const early = await s.claimOutbox(300, "W9", 60_000, 10, 2, Number.MAX_SAFE_INTEGER);
      assert.deepEqual(early.map((o) => o.key), ["b1"], "a device's deferred item, when someone waits for it (due)");
      await s.deferOutbox("b1", "W9", 1000, "still down");
      const taken = await s.claimOutbox(400, "W3", 50, 10);
      assert.deepEqual(taken.map((o) => [o.key, o.attempts]), [["a2", 1]], "a stale claim is taken over, counted as an attempt (its claimer may have delivered it)");
      assert.deepEqual((await s.claimOutbox(6000, "W4", 60_000, 1)).length, 1, "the limit holds");
      assert.deepEqual((await s.claimOutbox(6000, "W5", 60_000, 10, 3)).map((o) => o.key), ["c1"], "one device's only");
      assert.deepEqual((await s.listOutbox(3)).map((o) => o.key), ["c1", "c2"]);
    } finally {
      await s.close();
    }
  });

  test(`${name}: a device's head run is claimed as a prefix of its queue: due, unclaimed (or stale) items, in order, up to the limit`, async () => {
    const s = await open();
    try {
      const item = (key: string, deviceId: number | null, notBefore = 0) => ({ key, deviceId, effect: { kind: "test", key }, notBefore });
      await s.enqueue([item("a1", 1), item("a2", 1, 5000), item("a3", 1), item("b1", 2)], 100);
      assert.deepEqual((await s.claimOutboxRun(200, "W1", 60_000, 1, 10)).map((o) => o.key), ["a1"], "the run stops at an item not yet due");
      assert.deepEqual(await s.claimOutboxRun(201, "W2", 60_000, 1, 10, Number.MAX_SAFE_INTEGER), [], "a head claimed by another: nothing");
      assert.deepEqual(await s.claimOutbox(201, "W2", 60_000, 10, 1, Number.MAX_SAFE_INTEGER), [], "nor by claimOutbox");
      await s.completeOutbox("a1", "W1");
      await s.enqueue([item("a4", 1)], 300);
      assert.deepEqual((await s.claimOutboxRun(300, "W3", 60_000, 1, 2, Number.MAX_SAFE_INTEGER)).map((o) => o.key), ["a2", "a3"], "someone waits: not-yet-due items too, up to the limit");
      assert.deepEqual(await s.claimOutbox(300, "W4", 60_000, 10, 1, Number.MAX_SAFE_INTEGER), [], "the device's head is held");
      assert.deepEqual((await s.claimOutboxRun(400, "W5", 50, 1, 10, Number.MAX_SAFE_INTEGER)).map((o) => [o.key, o.attempts]), [["a2", 1], ["a3", 1], ["a4", 0]], "stale claims are taken over, counted as attempts");
      assert.deepEqual((await s.claimOutbox(400, "W6", 60_000, 10)).map((o) => o.key), ["b1"], "other devices untouched");
      for (const k of ["a2", "a3", "a4"]) await s.completeOutbox(k, "W5");
      assert.deepEqual((await s.listOutbox(1)).map((o) => o.key), []);
    } finally {
      await s.close();
    }
  });
}

/**
 * HandlerStore's contract. `open` prepares one backing store (a database file, a namespace) for a case and
 * returns the function that opens an instance on it: two instances are two replicas (or a process and its
 * restart) on the same state.
 */
export function handlerStoreContract(name: string, open: () => Promise<() => Promise<HandlerStore>>): void {
  const job = (id: string, deviceId: number, receivedAt: string): NewHandlerJob => ({ id, deviceId, source: "webhook", receivedAt, hintEvent: "updated" });
  const withStores = async (n: number, f: (...s: HandlerStore[]) => Promise<void>): Promise<void> => {
    const opener = await open();
    const stores: HandlerStore[] = [];
    try {
      for (let i = 0; i < n; i++) stores.push(await opener());
      await f(...stores);
    } finally {
      for (const s of stores) await s.close();
    }
  };

  test(`${name} (handler): a job enqueued is visible to a second instance; enqueue is idempotent by id; oldest first`, () =>
    withStores(2, async (a, b) => {
      const first = await a.enqueueJob(job("wh:1", 3, "2026-01-01T00:00:01Z"));
      assert.deepEqual(first, { ...job("wh:1", 3, "2026-01-01T00:00:01Z"), attempts: 0, notBefore: 0, lastError: null, parkedAt: null });
      await a.enqueueJob(job("wh:0", 4, "2026-01-01T00:00:00Z"));
      await b.enqueueJob(job("wh:1", 9, "2026-01-02T00:00:00Z"));
      assert.deepEqual((await b.listJobs("pending")).map((j) => [j.id, j.deviceId]), [["wh:0", 4], ["wh:1", 3]], "the second enqueue of wh:1 changed nothing");
      assert.deepEqual(await b.listJobs("parked"), []);
    }));

  test(`${name} (handler): two takers never both get one job; a stale claim is taken over; only the claimer completes`, () =>
    withStores(2, async (a, b) => {
      for (let i = 0; i < 6; i++) await a.enqueueJob(job(`wh:${i}`, 10 + i, `2026-01-01T00:00:0${i}Z`));
      const got = await Promise.all([a.takeJobs(1000, "A", 60_000, 10), b.takeJobs(1000, "B", 60_000, 10), a.takeJobs(1000, "A2", 60_000, 10), b.takeJobs(1000, "B2", 60_000, 10)]);
      const ids = got.flat().map((j) => j.id).sort();
      assert.deepEqual(ids, ["wh:0", "wh:1", "wh:2", "wh:3", "wh:4", "wh:5"], "each job taken exactly once");
      assert.deepEqual(await a.takeJobs(2000, "C", 60_000, 10), [], "all claimed, none stale");
      const holder = got.findIndex((g) => g.some((j) => j.id === "wh:0"));
      const claimer = ["A", "B", "A2", "B2"][holder] ?? "";
      assert.equal(await b.completeJob("wh:0", "C"), false, "not C's");
      assert.equal(await b.completeJob("wh:0", claimer), true);
      assert.deepEqual((await a.takeJobs(1000 + 60_000, "D", 60_000, 2)).map((j) => j.id), ["wh:1", "wh:2"], "stale claims are taken over, oldest first, up to the limit");
      assert.equal(await a.completeJob("wh:1", ["A", "B", "A2", "B2"][got.findIndex((g) => g.some((j) => j.id === "wh:1"))] ?? ""), false, "the dead claimer lost it");
      assert.equal(await a.releaseJobs("D"), 2);
      assert.deepEqual((await b.takeJobs(1001, "E", 60_000, 10)).map((j) => j.id), ["wh:1", "wh:2"], "released: due again");
      assert.ok((await a.releaseJobs()) >= 5);
      assert.equal((await a.takeJobs(1002, "F", 60_000, 10)).length, 5);
    }));

  test(`${name} (handler): a failed job backs off, is parked after maxAttempts, and a parked job survives reopen`, async () => {
    const opener = await open();
    const a = await opener();
    try {
      await a.enqueueJob(job("wh:7", 7, "2026-01-01T00:00:00Z"));
      const [t] = await a.takeJobs(1000, "W", 60_000, 10);
      assert.equal(t?.id, "wh:7");
      assert.equal(await a.failJob("wh:7", "X", "not mine", 5000, 2), "lost");
      assert.equal(await a.failJob("wh:7", "W", "NetBox down", 5000, 2), "retry");
      const [p] = await a.listJobs("pending");
      assert.deepEqual({ attempts: p?.attempts, notBefore: p?.notBefore, lastError: p?.lastError }, { attempts: 1, notBefore: 5000, lastError: "NetBox down" });
      assert.deepEqual(await a.takeJobs(4999, "W", 60_000, 10), [], "not before its backoff ends");
      assert.equal((await a.takeJobs(5000, "W", 60_000, 10)).length, 1);
      assert.equal(await a.failJob("wh:7", "W", "NetBox still down", 9000, 2), "parked");
      assert.deepEqual(await a.takeJobs(10_000, "W", 60_000, 10), [], "a parked job is never taken");
    } finally {
      await a.close();
    }
    const b = await opener();
    try {
      assert.deepEqual(await b.listJobs("pending"), []);
      const parked = await b.listJobs("parked");
      assert.deepEqual(parked.map((j) => [j.id, j.attempts, j.lastError]), [["wh:7", 2, "NetBox still down"]]);
      assert.ok(parked[0]?.parkedAt !== null);
    } finally {
      await b.close();
    }
  });

  test(`${name} (handler): a delivery id replayed inside its window is a duplicate (on every instance); after it, it is new`, () =>
    withStores(2, async (a, b) => {
      const id = "a".repeat(64);
      assert.equal(await a.rememberDelivery(id, 2000, 1000), true);
      assert.equal(await a.rememberDelivery(id, 2500, 1500), false);
      assert.equal(await b.rememberDelivery(id, 2500, 1999), false, "another replica sees it");
      const race = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 ? a : b).rememberDelivery("b".repeat(64), 5000, 1000)));
      assert.equal(race.filter(Boolean).length, 1, "first one wins");
      assert.equal(await b.rememberDelivery(id, 4000, 2000), true, "past its window: new (the body is refused as stale anyway)");
      assert.equal(await a.rememberDelivery(id, 4000, 2001), false);
    }));

  test(`${name} (handler): intents are claimed once per device, settled once per request, abandoned claims free the device`, () =>
    withStores(2, async (a, b) => {
      const provision = { action: "provision", deviceId: 5, node: "w1", requestedBy: "alice" };
      assert.equal(await a.claimIntent("desired_action:5:100", 5, provision, 10), "claimed");
      assert.equal(await b.claimIntent("desired_action:5:100", 5, provision, 11), "claimed", "the same request: still claimed");
      assert.equal(await b.claimIntent("desired_action:5:101", 5, provision, 12), "busy", "at most one claimed request per device");
      assert.deepEqual(await b.unsettledIntent(5), { key: "desired_action:5:100", deviceId: 5, intent: provision, state: "claimed", recordedAt: 10 });
      assert.equal(await b.unsettledIntent(6), undefined);
      assert.deepEqual(await a.listIntents(), [], "claims are not listed");
      const rec = await b.settleIntent("desired_action:5:100", 5, provision, { effect: "workflow", workflow: "wf-1" }, 20);
      assert.deepEqual(rec, { key: "desired_action:5:100", deviceId: 5, intent: provision, effect: { effect: "workflow", workflow: "wf-1" }, state: "settled", recordedAt: 20 });
      assert.equal(await a.settleIntent("desired_action:5:100", 5, provision, undefined, 21), undefined, "settled once");
      assert.equal(await a.claimIntent("desired_action:5:100", 5, provision, 22), "settled", "a settled request is never claimed again");
      assert.equal(await a.unsettledIntent(5), undefined);
      assert.equal(await a.claimIntent("desired_action:5:101", 5, provision, 30), "claimed", "the device is free again");
      await b.abandonIntent("desired_action:5:101", 6, 31); // not device 6's claim: nothing
      assert.equal((await a.unsettledIntent(5))?.key, "desired_action:5:101");
      await b.abandonIntent("desired_action:5:101", 5, 31);
      assert.equal(await a.unsettledIntent(5), undefined);
      await a.abandonIntent("desired_action:5:101", 5, 32);
      assert.equal(await a.claimIntent("desired_action:5:101", 5, provision, 33), "claimed", "an abandoned request may be claimed again");
      await a.abandonIntent("desired_action:5:101", 5, 34);
      const wipe = { action: "wipe", deviceId: 5, node: "w1", requestedBy: "bob" };
      const claims = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).claimIntent(`desired_action:5:${200 + i}`, 5, wipe, 40)));
      assert.equal(claims.filter((c) => c === "claimed").length, 1, "racing claims of one device: one wins");
      await a.settleIntent("decommissioning:8:300", 8, { action: "retire", deviceId: 8, node: "w8", requestedBy: "carol" }, undefined, 50);
      assert.deepEqual((await b.listIntents()).map((r) => [r.key, r.effect]), [["desired_action:5:100", { effect: "workflow", workflow: "wf-1" }], ["decommissioning:8:300", undefined]], "settled, in order");
    }));
}
