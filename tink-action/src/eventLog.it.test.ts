/**
 * The securityfs mount, for real: in a private mount namespace (unshare -m, so this machine's mounts are left
 * alone) where /sys/kernel/security is not mounted, reading the event log from the real root mounts it first,
 * as the action must in a container (tinkerbell.md §4). Needs root and util-linux's unshare.
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const dist = resolve(fileURLToPath(import.meta.url), "..");
const securityfsHere = () => readFileSync("/proc/self/mounts", "utf8").split("\n").some((l) => l.split(" ")[2] === "securityfs");

test("a missing event log on the real root makes the step mount securityfs (inside a private mount namespace)", () => {
  const hostBefore = securityfsHere();
  const script = `
    import { readEventLog } from ${JSON.stringify(join(dist, "eventLog.js"))};
    import { existsSync, readFileSync } from "node:fs";
    const mounted = () => readFileSync("/proc/self/mounts", "utf8").split("\\n").some((l) => l.split(" ")[1] === "/sys/kernel/security" && l.split(" ")[2] === "securityfs");
    const before = mounted();
    let outcome;
    try { const r = await readEventLog("/"); outcome = { ok: true, mounted: r.mounted, bytes: r.bytes.length }; }
    catch (e) { outcome = { ok: false, code: e.code, message: e.message }; }
    console.log(JSON.stringify({ before, after: mounted(), lsm: existsSync("/sys/kernel/security/lsm"), outcome }));
  `;
  const r = spawnSync("unshare", ["--mount", "--propagation", "private", "sh", "-c", 'umount /sys/kernel/security 2>/dev/null; exec "$0" --input-type=module -e "$1"', process.execPath, script], { encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  const got = JSON.parse(r.stdout.trim().split("\n").pop() ?? "{}") as { before: boolean; after: boolean; lsm: boolean; outcome: { ok: boolean; mounted?: boolean; code?: string; message?: string } };
  assert.equal(got.before, false, "securityfs was not mounted in the namespace");
  assert.equal(got.after, true, "the step mounted it");
  assert.ok(got.lsm, "securityfs content is visible");
  if (got.outcome.ok) assert.equal(got.outcome.mounted, true);
  else {
    // A machine without a TPM (this one) has no tpm0 directory even with securityfs mounted.
    assert.equal(got.outcome.code, "event-log-missing");
    assert.match(got.outcome.message ?? "", /securityfs is mounted now/);
  }
  assert.equal(securityfsHere(), hostBefore, "this machine's mounts are unchanged");
});
