import { strict as assert } from "node:assert";
import { chmodSync, existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { handlerStoreContract, storeContract } from "@fleetd/testkit/stateContract";
import { test } from "node:test";
import Database from "better-sqlite3";
import { SqliteAttestationStore, SqliteHandlerStore, StateFileError } from "@fleetd/platform/state";

storeContract("sqlite (file)", async () => new SqliteAttestationStore(join(mkdtempSync(join(tmpdir(), "fleetd-store-")), "state.db")));
storeContract("sqlite (memory)", async () => new SqliteAttestationStore(":memory:"));
handlerStoreContract("sqlite (file)", async () => {
  const file = join(mkdtempSync(join(tmpdir(), "fleetd-handler-")), "handler.db");
  return async () => new SqliteHandlerStore(file);
});

test("a schema-2 state file is migrated in place (issued certificates can be voided; sessions can be claimed; the outbox exists); a schema-1 file is refused", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-store-"));
  chmodSync(dir, 0o700);
  const file = join(dir, "state.db");
  const old = new Database(file);
  old.exec(`CREATE TABLE sessions (id TEXT PRIMARY KEY, ak_name TEXT);
    CREATE TABLE issued (serial TEXT PRIMARY KEY, device_id INTEGER NOT NULL, node TEXT NOT NULL, kind TEXT NOT NULL,
      generation INTEGER NOT NULL, not_after INTEGER NOT NULL, issued_at INTEGER NOT NULL, der TEXT NOT NULL, key_public TEXT NOT NULL);
    INSERT INTO issued VALUES ('0a', 7, 'worker-1', 'ldevid', 1, 9, 1, '30', '00');`);
  old.pragma("user_version = 2");
  old.close();
  chmodSync(file, 0o600);
  const s = new SqliteAttestationStore(file);
  try {
    assert.deepEqual((await s.listIssued(7)).map((r) => [r.serial, r.voided]), [["0a", undefined]]);
    await s.voidIssued(["0a"], 3, "why");
    assert.deepEqual((await s.listIssued(7))[0]?.voided, { at: 3, why: "why" });
    assert.deepEqual(await s.listOutbox(), []);
    assert.equal(await s.releaseAllClaims(), 0);
  } finally {
    await s.close();
  }
  const v1 = join(dir, "v1.db");
  const one = new Database(v1);
  one.exec(`CREATE TABLE sessions (id TEXT PRIMARY KEY);`);
  one.pragma("user_version = 1");
  one.close();
  chmodSync(v1, 0o600);
  assert.throws(() => new SqliteAttestationStore(v1), (e: unknown) => e instanceof StateFileError && /schema version 1, this fleetd needs 4/.test(e.message));
});

test("delivered, voided and replaced configs leave no copy in the database file or its WAL once the store is closed (the checkpoint after them is coalesced, not skipped)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-store-"));
  const file = join(dir, "state.db");
  const s = new SqliteAttestationStore(file);
  const marks = ["delivered", "voided", "replaced"].map((w) => `config-${w}-${"q".repeat(64)}`);
  const put = (hash: string, deviceId: number, config: string) => s.putInstallCode({ codeHash: hash, node: { deviceId, name: `n${deviceId}` }, uuid: "u", sourceAddress: "a", config, expiresAt: Date.now() + 60_000 });
  await put("d", 1, marks[0]!);
  await put("v", 2, marks[1]!);
  await put("r", 3, marks[2]!);
  assert.ok(await s.claimInstallCode("d", "A", Date.now(), 60_000));
  assert.equal(await s.commit({ delivered: { codeHash: "d", claimer: "A" } }, Date.now()), true);
  assert.equal(await s.voidInstallCodes(2), 1);
  await put("r2", 3, "the newer config");
  await s.close();
  const bytes = Buffer.concat([file, `${file}-wal`].filter((f) => existsSync(f)).map((f) => readFileSync(f)));
  for (const m of marks) assert.equal(bytes.includes(m), false, `${m.slice(0, 16)}… is gone from the files`);
  assert.ok(bytes.includes("the newer config"), "the live config is there (the search would find one)");
});
