/**
 * Attestation and admission end to end, everything real on loopback: NetBox 4.7 (setup + nodes file applied),
 * swtpm manufactured with EK certificates and carrying a HookOS boot, SoftHSM2 holding the CA key, the
 * attestation server (express + SQLite), fleetd's TPM client as the machine, Talos's own ADV reader for META.
 * A planned node runs intake, then provision; its LDevID/LAK chain to the bundle and meet SPIRE's rules; the
 * install code is unwrapped by the TPM and written to META; the config is fetched once; the device is active;
 * the journal tells the story. Then the refusals: each leaves nothing signed and names its check.
 */
import { strict as assert } from "node:assert";
import { createHash, X509Certificate, randomBytes } from "node:crypto";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { checkKeyAttributes, LDEVID_POLICY, AK_POLICY, Checks } from "@fleetd/verify/attest";
import { listDevices, readJournal, patchDevice } from "@fleetd/platform/netbox";
import { attest, type AttestResult } from "@fleetd/platform/protocol/client";
import { buildGptImage } from "@fleetd/testkit/talosMeta";
import { decodeExact } from "@fleetd/verify/codec";
import { TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { TcpTransport, TpmClient } from "@fleetd/platform/tpmclient";
import { startSwtpm } from "../harness/swtpm.js";
import { advread, TALOS_VERSION } from "../talos/goTools.js";
import { issued, refusal as refused, runHonest } from "./machine.js";
import { NODE, startWorld, type World } from "./world.js";
const run = (mode: "intake" | "provision" | "attest", over = {}) => runHonest(w, mode, over);

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");

let w: World;
before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION });
}, { timeout: 20 * 60_000 });
after(async () => {
  await w?.stop();
});

async function device() {
  const [d] = await listDevices(w.fleet.client(w.fleet.nb.authorization.replace(/^Bearer /, "")), { name: NODE });
  assert.ok(d, "device exists");
  return d;
}
async function journal(): Promise<string[]> {
  const d = await device();
  return (await readJournal(w.fleet.client(w.fleet.nb.authorization.replace(/^Bearer /, "")), d.id)).map((j) => j.comments);
}
const issuedCount = async () => (await w.store.listIssued(await w.deviceId(NODE))).length;

let provisioned: AttestResult;

test("intake: a planned node proves both EKs and its HookOS boot, and gets an LDevID and LAK", async () => {
  assert.equal((await device()).status, "planned");
  const r = await run("intake");
  assert.equal(r.mode, "intake");
  const d = await device();
  assert.equal(d.cf["attestation_verdict"], "pass");
  assert.equal(d.cf["attested_serial"], w.claims().serial);
  assert.match(String(d.cf["ldevid_serial"]), /^[0-9a-f]+$/);
});

test("provision: LDevID + LAK chain to the bundle and meet SPIRE tpm_devid's rules; the code unwraps in the TPM", async () => {
  provisioned = await run("provision");
  assert.match(provisioned.installCode ?? "", /^[0-9a-f]{64}$/);
  const bundle = issued(provisioned).caBundle;
  const ca = new X509Certificate(bundle);
  for (const [kind, cert] of [["ldevid", issued(provisioned).ldevid.certificate], ["lak", issued(provisioned).lak.certificate]] as const) {
    const x = new X509Certificate(Buffer.from(cert));
    assert.ok(x.checkIssued(ca) && x.verify(ca.publicKey), `${kind} chains to the bundle`);
    assert.match(x.subject, new RegExp(`CN=${NODE}\\.g2${kind === "lak" ? "\\.lak" : ""}`), `${kind} subject (generation 2: intake was 1)`);
    const days = (Date.parse(x.validTo) - Date.parse(x.validFrom)) / 86400_000;
    assert.ok(days <= 30.01, `${kind} lives ≤ 30 days (${days})`);
  }
  // The LDevID key, attribute by attribute (SPIRE tpm_devid), and the certificate holds exactly that key.
  const ldevid = decodeExact(TPMT_PUBLIC, issued(provisioned).ldevid.blobs.publicBytes);
  const c = new Checks();
  assert.ok(checkKeyAttributes(c, "ldevid", ldevid, LDEVID_POLICY), JSON.stringify(c.reasons));
  const lak = decodeExact(TPMT_PUBLIC, issued(provisioned).lak.blobs.publicBytes);
  assert.ok(checkKeyAttributes(new Checks(), "lak", lak, AK_POLICY));
  // Blobs are stored without the TPM2B size prefix, as SPIRE reads them.
  assert.notEqual((issued(provisioned).ldevid.blobs.publicBytes[0]! << 8) | issued(provisioned).ldevid.blobs.publicBytes[1]!, issued(provisioned).ldevid.blobs.publicBytes.length - 2);
});

test("write-meta puts the code into META key 0x0b; Talos's own reader sees it and the existing 0x11 key", () => {
  const img = join(w.dir, "disk.img");
  writeFileSync(img, buildGptImage({}).bytes);
  const code = provisioned.installCode ?? "";
  const wm = spawnSync(process.execPath, [join(repo, "tink-action/dist/cli.js"), "write-meta", "--disk", img, "--code", code], { encoding: "utf8" });
  assert.equal(wm.status, 0, wm.stderr);
  assert.ok(!wm.stdout.includes(code) && !wm.stderr.includes(code), "the code is never printed");
  const t = advread(img);
  assert.equal(t.tags["0x0b"]?.text, code);
  assert.ok(t.copies.every((x) => x.valid), "both ADV copies valid");
});

test("the config is fetched once: a wrong code fails, the right one succeeds, the second fetch fails; the device becomes active", async () => {
  const uuid = w.claims().uuid;
  // At rest the config is sealed to the code: the stored row names neither the node nor any of its secrets.
  const codeHash = createHash("sha256").update(Buffer.from(provisioned.installCode ?? "", "hex")).digest("hex");
  const row = await w.store.claimInstallCode(codeHash, "probe", Date.now(), 0);
  assert.ok(row, "the install code's row is stored");
  await w.store.releaseInstallCode(codeHash, "probe");
  assert.match(row.config, /^sealed:v1:[A-Za-z0-9+/=]+$/);
  assert.ok(!row.config.includes(NODE) && !row.config.includes("machine:"), "no plaintext config at rest");
  const wrong = await fetch(`${w.baseUrl}/talos/config?uuid=${uuid}&code=${"0".repeat(64)}`);
  assert.equal(wrong.status, 404);
  const literal = await fetch(`${w.baseUrl}/talos/config?uuid=${uuid}&code=$%7Bcode%7D`);
  assert.equal(literal.status, 400);
  const ok = await fetch(`${w.baseUrl}/talos/config?uuid=${uuid}&code=${provisioned.installCode}`);
  assert.equal(ok.status, 200);
  const yaml = await ok.text();
  assert.match(yaml, new RegExp(`hostname: ${NODE}`));
  assert.match(yaml, /\/var\/lib\/fleetd\/seed\/ldevid-chain\.pem\.b64/);
  const again = await fetch(`${w.baseUrl}/talos/config?uuid=${uuid}&code=${provisioned.installCode}`);
  assert.equal(again.status, 404, "a second fetch fails");
  for (let i = 0; i < 50 && (await device()).status !== "active"; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal((await device()).status, "active");
  const j = (await journal()).join("\n");
  for (const step of ["intake: TPM evidence passed", "intake confirmed", "provision: TPM evidence passed", "provision confirmed", "fetched its one-time config"]) {
    assert.ok(j.includes(step), `journal tells: ${step}`);
  }
});

test("refused: another machine's TPM (unknown EKs) waits as pending; nothing signed", async () => {
  const before = await issuedCount();
  const other = await startSwtpm({ pcrBanks: ["sha1", "sha256"] });
  try {
    const tpm = new TpmClient(new TcpTransport(other.host, other.port));
    try {
      const r = await refused(attest({ tpm, server: w.transport, claims: w.claims({ serial: "STRANGER-1" }), eventLog: w.eventLog }));
      assert.equal(r.status, 403);
      assert.equal(r.refusal.error, "pending");
      assert.ok(r.pending);
    } finally {
      await tpm.close();
    }
  } finally {
    await other.stop();
  }
  const pending = await w.store.listPendingEks();
  assert.ok(pending.some((p) => p.serial === "STRANGER-1"), "listed as pending with its claimed serial");
  assert.equal(await issuedCount(), before);
});

test("refused: claims changed (another serial) and a device moved to decommissioning; journalled, nothing signed", async () => {
  const before = await issuedCount();
  const r1 = await refused(run("attest", { serial: "SOMETHING-ELSE" }));
  assert.ok(r1.refusal.reasons.some((x) => x.check === "claims.serial"), JSON.stringify(r1.refusal));
  const admin = w.fleet.client(w.fleet.nb.authorization.replace(/^Bearer /, ""));
  await patchDevice(admin, (await device()).id, { status: "decommissioning" }, null, "test");
  const r2 = await refused(run("attest"));
  assert.ok(r2.refusal.reasons.some((x) => x.check === "gate.status"), JSON.stringify(r2.refusal));
  await patchDevice(admin, (await device()).id, { status: "active" }, null, "test");
  assert.equal(await issuedCount(), before);
  const j = (await journal()).join("\n");
  assert.match(j, /claims\.serial/);
  assert.match(j, /gate\.status/);
});

test("attest mode on the active node passes again with a fresh AK, and issues nothing while the LDevID is not due", async () => {
  const before = await issuedCount();
  const r = await run("attest");
  assert.equal(r.mode, "attest");
  assert.equal(r.issued, undefined, "no certificate: renewal is not due");
  assert.equal(await issuedCount(), before, "nothing recorded as issued");
  assert.match((await journal()).at(-1) ?? "", /attest: TPM evidence passed .*no certificate issued \(the LDevID g2 is valid until .*renewal not due\)/);
  void randomBytes;
});
