/**
 * The server's profile and authority caches (ProfileCache, AuthorityCache): a file is parsed once while it is
 * unchanged, and an edited, replaced or removed file takes effect on the next load.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, renameSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { makeTestCa } from "@fleetd/testkit/certs";
import { AuthorityCache, defaultPolicyDir, ProfileCache } from "@fleetd/platform/trust";

const ubuntu = readFileSync(join(defaultPolicyDir(), "ubuntu.yaml"), "utf8");

test("ProfileCache: one parse while the file is unchanged; an edit, a replacement or a removal is seen on the next load", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-profiles-"));
  const path = join(dir, "site.yaml");
  writeFileSync(path, ubuntu.replace("name: ubuntu", "name: site"));
  const cache = new ProfileCache(dir);
  const first = cache.load("site");
  assert.equal(first.name, "site");
  assert.equal(cache.load("site"), first, "unchanged file: the same (frozen) profile");
  assert.ok(Object.isFrozen(first) && Object.isFrozen(first.banks.allowed));

  writeFileSync(path, ubuntu.replace("name: ubuntu", "name: site").replace("minEntries: 77", "minEntries: 78"));
  utimesSync(path, new Date(), new Date(Date.now() + 5000)); // the edit's stamp differs even on a coarse clock
  assert.equal(cache.load("site").secureBoot.dbx?.minEntries, 78, "an edit is seen");

  const other = join(dir, "other.yaml");
  writeFileSync(other, ubuntu.replace("name: ubuntu", "name: site").replace("minEntries: 77", "minEntries: 99"));
  renameSync(other, path);
  assert.equal(cache.load("site").secureBoot.dbx?.minEntries, 99, "a replacement (new inode) is seen");

  rmSync(path);
  assert.throws(() => cache.load("site"), /no profile "site"/, "a removed profile is not served from the cache");
});

test("AuthorityCache: a site set is read once while its file is unchanged; adding, changing or removing the file is seen", async () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-site-"));
  const cache = new AuthorityCache(dir);
  const refs = ["builtin:microsoft-uefi-ca-2011", "site:lab-db"];
  const none = cache.resolve(refs);
  assert.equal(none.get("site:lab-db")?.source, undefined, "not configured");
  assert.equal(cache.resolve(refs), none);

  const a = await makeTestCa("lab db A");
  writeFileSync(join(dir, "lab-db.pem"), a.pem);
  const one = cache.resolve(refs);
  assert.equal(one.get("site:lab-db")?.certs.length, 1, "a new site file is seen");
  assert.equal(cache.resolve(refs), one, "and then read once");

  const b = await makeTestCa("lab db B");
  writeFileSync(join(dir, "lab-db.pem"), a.pem + b.pem);
  assert.equal(cache.resolve(refs).get("site:lab-db")?.certs.length, 2, "a changed site file is seen");

  rmSync(join(dir, "lab-db.pem"));
  assert.equal(cache.resolve(refs).get("site:lab-db")?.source, undefined, "a removed site file is seen");
});
