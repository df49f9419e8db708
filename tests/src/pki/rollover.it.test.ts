/**
 * CA rollover with two CA keys on a real SoftHSM2 token: the bundle keeps the old CA until its last
 * issuance + 30 days and drops it after; OpenSSL, given the bundle PEM, agrees at each point in time.
 */
import { strict as assert } from "node:assert";
import { generateKeyPairSync } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import {
  type IssuedCertificate, addCa, bundleAt, bundlePem, currentCa, emptyBundleState, issueLdevidCertificate,
  parseBundleState, PkiError, recordIssuance, serializeBundleState, verifyIssued, type BundleState,
} from "@fleetd/platform/pki";
import { createSoftHsmCa, startSoftHsm, type SoftHsm, type SoftHsmCa } from "../harness/softhsm.js";
import { openssl } from "../harness/openssl.js";

const TOKEN = "fleetd-rollover";
const day = 86_400_000;
const base = new Date(Math.floor(Date.now() / 1000) * 1000);
const at = (days: number) => new Date(base.getTime() + days * day);
let hsm: SoftHsm;
let caA: SoftHsmCa;
let caB: SoftHsmCa;

before(async () => {
  hsm = await startSoftHsm([
    { label: TOKEN, pin: "rollover-pin", soPin: "rollover-so", keys: [{ label: "ca-a", id: "a1", type: "ec-p256" }, { label: "ca-b", id: "b1", type: "ec-p256" }] },
  ]);
  caA = await createSoftHsmCa(hsm, { token: TOKEN, key: "ca-a", commonName: "fleetd CA 2026-a", notBefore: at(-1), lifetimeDays: 365 });
  caB = await createSoftHsmCa(hsm, { token: TOKEN, key: "ca-b", commonName: "fleetd CA 2026-b", notBefore: at(-1), lifetimeDays: 365 });
});

after(async () => {
  await caA?.signer.close();
  await caB?.signer.close();
  hsm?.close();
});

const spki = () => new Uint8Array(generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ type: "spki", format: "der" }));

/** What the server does: pick the current CA, record the issuance (and persist) first, then sign. */
async function issue(state: BundleState, now: Date, node: string): Promise<{ state: BundleState; leaf: IssuedCertificate }> {
  const current = currentCa(state, now);
  const ca = current.fingerprint === caA.ca.fingerprint ? caA : caB;
  const notBefore = new Date(now.getTime() - 5 * 60_000);
  const next = recordIssuance(state, { issuerFingerprint: current.fingerprint, at: now, notAfter: new Date(notBefore.getTime() + 30 * day) });
  const leaf = await issueLdevidCertificate({ certificate: ca.ca.pem, signer: ca.signer }, { node, generation: 1, publicKey: spki(), notBefore, lifetimeDays: 30 });
  return { state: next, leaf };
}

function opensslVerify(bundle: string, leaf: IssuedCertificate, time: Date | "ignore"): { ok: boolean; out: string } {
  const bundlePath = join(hsm.dir, "bundle.pem");
  const leafPath = join(hsm.dir, "leaf.pem");
  writeFileSync(bundlePath, bundle);
  writeFileSync(leafPath, leaf.pem);
  const timeArgs = time === "ignore" ? ["-no_check_time"] : ["-attime", String(Math.floor(time.getTime() / 1000))];
  const r = openssl(["verify", "-x509_strict", ...timeArgs, "-CAfile", bundlePath, leafPath]);
  return { ok: r.status === 0, out: r.stdout + r.stderr };
}

test("the old CA stays in the bundle until its last issuance + 30 days, then leaves", async () => {
  let state = addCa(emptyBundleState(), caA.ca.pem, base);
  const first = await issue(state, base, "node-a");
  state = first.state;
  assert.equal(first.leaf.issuerFingerprint, caA.ca.fingerprint);

  state = addCa(state, caB.ca.pem, at(1));
  const second = await issue(state, at(2), "node-b");
  state = second.state;
  assert.equal(second.leaf.issuerFingerprint, caB.ca.fingerprint);
  assert.throws(
    () => recordIssuance(state, { issuerFingerprint: caA.ca.fingerprint, at: at(3), notAfter: at(33) }),
    (e) => e instanceof PkiError && e.code === "ca-not-current",
  );

  // the state survives a trip through its file
  const file = join(hsm.dir, "ca-bundle.json");
  writeFileSync(file, serializeBundleState(state));
  state = parseBundleState(readFileSync(file, "utf8"), file);

  // day 29: both CAs; the A-issued leaf chains (OpenSSL and fleetd agree)
  const t1 = at(29);
  assert.deepEqual(bundleAt(state, t1).map((e) => [e.record.fingerprint, e.status]), [
    [caB.ca.fingerprint, "current"],
    [caA.ca.fingerprint, "retired"],
  ]);
  assert.equal(bundleAt(state, t1)[1]?.removalDate?.toISOString(), at(30).toISOString());
  const pem1 = bundlePem(state, t1);
  const v1 = opensslVerify(pem1, first.leaf, t1);
  assert.ok(v1.ok, v1.out);
  assert.ok(opensslVerify(pem1, second.leaf, t1).ok);
  assert.equal(verifyIssued(first.leaf.der, bundleAt(state, t1).map((e) => e.record.certificatePem), t1).verdict, "pass");

  // just past day 30: A is gone. OpenSSL, told to ignore time, fails for the missing issuer
  const t2 = new Date(at(30).getTime() + 1000);
  assert.deepEqual(bundleAt(state, t2).map((e) => e.record.fingerprint), [caB.ca.fingerprint]);
  const pem2 = bundlePem(state, t2);
  const v2 = opensslVerify(pem2, first.leaf, "ignore");
  assert.ok(!v2.ok);
  assert.match(v2.out, /unable to get local issuer certificate/);
  assert.ok(opensslVerify(pem2, second.leaf, t2).ok, "B's leaf still verifies");
  const verdict = verifyIssued(first.leaf.der, bundleAt(state, t2).map((e) => e.record.certificatePem), t2);
  assert.ok(verdict.reasons.some((r) => r.check === "pki.chain"));
});
