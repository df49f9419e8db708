/**
 * The contract every AttestationStore backend passes (SQLite now, the Kubernetes backend later). Exported as a
 * function that registers node:test tests for a factory, so each backend's test file is one line.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { AttestationStore, SessionRecord } from "./store.js";

export function storeContract(name: string, open: () => Promise<AttestationStore>): void {
  const session = (id: string, over: Partial<SessionRecord> = {}): SessionRecord => ({
    id,
    node: "node-a",
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
      assert.equal(await s.recordAkName("000baa", "n", 1), true);
      assert.equal(await s.recordAkName("000baa", "m", 2), false);
    } finally {
      await s.close();
    }
  });

  test(`${name}: pending EKs are listed with first/last seen and a count`, async () => {
    const s = await open();
    try {
      await s.recordPendingEk({ binding: "b1", serial: "S1", macs: ["02:00:00:00:00:01"], sourceAddress: "127.0.0.1" }, 10);
      await s.recordPendingEk({ binding: "b1", serial: "S1", macs: ["02:00:00:00:00:01"], sourceAddress: "127.0.0.1" }, 20);
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
      await s.putInstallCode({ codeHash: "c1", node: "n1", uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 5000 });
      assert.equal(await s.hasInstallCodeFor("n1", 100), true);
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
      await s.putInstallCode({ codeHash: "c2", node: "n2", uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 200 });
      assert.equal(await s.claimInstallCode("c2", "A", 200, 60_000), undefined, "expired");
      await s.putInstallCode({ codeHash: "c3", node: "n2", uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 9000 });
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
      const aks = await Promise.all(Array.from({ length: N }, (_, i) => s.recordAkName("000bcc", `n${i}`, i)));
      assert.equal(aks.filter(Boolean).length, 1, "one recording of an AK Name");
      const gens = await Promise.all(Array.from({ length: N }, () => s.nextGeneration("g")));
      assert.deepEqual([...gens].sort((a, b) => a - b), Array.from({ length: N }, (_, i) => i + 1), "each generation handed out once");
      await s.putInstallCode({ codeHash: "c9", node: "n9", uuid: "u", sourceAddress: "a", config: "cfg", expiresAt: 9000 });
      const claims = await Promise.all(Array.from({ length: N }, (_, i) => s.claimInstallCode("c9", `Y${i}`, 300, 60_000)));
      const winners = claims.filter((c): c is NonNullable<typeof c> => c !== undefined);
      assert.equal(winners.length, 1, "one claim");
      const claimer = winners[0]?.claimedBy ?? "";
      const finishes = await Promise.all(Array.from({ length: N }, () => s.finishInstallCode("c9", claimer)));
      assert.equal(finishes.filter(Boolean).length, 1, "one finish");
      await Promise.all(Array.from({ length: N }, (_, i) => s.recordPendingEk({ binding: "b9", serial: "S", macs: [], sourceAddress: "x" }, 100 + i)));
      assert.equal((await s.listPendingEks()).find((p) => p.binding === "b9")?.count, N, "every sighting counted");
    } finally {
      await s.close();
    }
  });

  test(`${name}: generations count up per node; issued certificates and bootstrap tokens are kept`, async () => {
    const s = await open();
    try {
      assert.equal(await s.nextGeneration("n"), 1);
      assert.equal(await s.nextGeneration("n"), 2);
      assert.equal(await s.nextGeneration("m"), 1);
      await s.recordIssued({ serial: "01", node: "n", kind: "ldevid", generation: 2, notAfter: 9, issuedAt: 1 });
      assert.equal((await s.listIssued("n")).length, 1);
      await s.setBootstrapToken("n", "abc123", 99);
      assert.equal(await s.nodeForBootstrapToken("abc123"), "n");
      await s.deleteBootstrapToken("n");
      assert.equal(await s.nodeForBootstrapToken("abc123"), undefined);
    } finally {
      await s.close();
    }
  });
}
