/**
 * The PKCS#11 signer's behaviour on a real SoftHSM2 token: PIN handling and typed errors, object lookup,
 * and one signature at a time across signers of the same device (counted by instrumentation, not timed).
 */
import { strict as assert } from "node:assert";
import { createPublicKey, randomBytes, verify } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { inspect } from "node:util";
import { after, before, test } from "node:test";
import { acquirePkcs11Module, openPkcs11Signer, PkiError, SIGNATURE_ALGORITHMS, type Pkcs11Signer } from "@fleetd/platform/pki";
import { SOFTHSM_MODULE, startSoftHsm, type SoftHsm } from "../harness/softhsm.js";

const TOKEN = "fleetd-signer";
const PIN = "correct-Horse-81";
const WRONG_PIN = "wrong-Battery-37";
let hsm: SoftHsm;

before(async () => {
  hsm = await startSoftHsm([
    {
      label: TOKEN,
      pin: PIN,
      soPin: "so-Staple-99",
      keys: [
        { label: "ec", id: "0a", type: "ec-p256" },
        { label: "rsa", id: "0b", type: "rsa-2048" },
        { label: "twin", id: "0c", type: "ec-p256" },
        { label: "twin", id: "0d", type: "ec-p256" },
        { label: "always", id: "0e", type: "ec-p256", alwaysAuthenticate: true },
      ],
    },
  ]);
});

after(() => {
  delete process.env["FLEETD_TEST_WRONG_PIN"];
  delete process.env["FLEETD_TEST_CHANGING_PIN"];
  hsm?.close();
});

function code(c: string) {
  return (e: unknown) => e instanceof PkiError && e.code === c;
}

function verifies(signer: Pkcs11Signer, data: Uint8Array, signature: Uint8Array): boolean {
  const key = createPublicKey({ key: Buffer.from(signer.publicKey.spki), format: "der", type: "spki" });
  return verify(SIGNATURE_ALGORITHMS[signer.signatureAlgorithm].hash, data, key, signature);
}

test("a wrong PIN is a typed error that names its source and never shows the PIN", async () => {
  process.env["FLEETD_TEST_WRONG_PIN"] = WRONG_PIN;
  let caught: unknown;
  try {
    await openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "ec"), pin: { env: "FLEETD_TEST_WRONG_PIN" } });
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof PkiError, `expected a PkiError, got ${String(caught)}`);
  assert.equal(caught.code, "pin-incorrect");
  assert.match(caught.message, /environment variable FLEETD_TEST_WRONG_PIN/);
  assert.match(caught.message, /CKR_PIN_INCORRECT/);
  for (const shown of [caught.message, String(caught.stack), inspect(caught, { depth: 5 }), JSON.stringify(caught), String(caught)]) {
    assert.ok(!shown.includes(WRONG_PIN), "the wrong PIN is not shown");
    assert.ok(!shown.includes(PIN), "the right PIN is not shown");
  }
  // the same token opens with the right PIN (so the refusal above was about the PIN)
  const ok = await openPkcs11Signer(hsm.signerConfig(TOKEN, "ec"));
  await ok.close();
});

test("a PIN refused at a per-signature login disables the signer: no second try", async () => {
  process.env["FLEETD_TEST_CHANGING_PIN"] = PIN;
  const signer = await openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "always"), pin: { env: "FLEETD_TEST_CHANGING_PIN" } });
  try {
    const data = randomBytes(32);
    assert.ok(verifies(signer, data, await signer.sign(data)), "context-specific login with the right PIN signs");
    process.env["FLEETD_TEST_CHANGING_PIN"] = WRONG_PIN;
    await assert.rejects(signer.sign(data), (e) => code("pin-incorrect")(e) && !(e as Error).message.includes(WRONG_PIN));
    process.env["FLEETD_TEST_CHANGING_PIN"] = PIN; // even with the right PIN back, the signer stays disabled
    await assert.rejects(signer.sign(data), (e) => code("signer-disabled")(e) && /PIN from environment variable FLEETD_TEST_CHANGING_PIN was refused/.test((e as Error).message));
  } finally {
    await signer.close();
  }
});

test("the PIN can come from a file", async () => {
  const pinFile = join(hsm.dir, "pin");
  writeFileSync(pinFile, `${PIN}\n`, { mode: 0o600 });
  const signer = await openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "rsa"), pin: { file: pinFile } });
  try {
    const data = randomBytes(100);
    assert.ok(verifies(signer, data, await signer.sign(data)));
  } finally {
    await signer.close();
  }
  await assert.rejects(openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "rsa"), pin: { file: join(hsm.dir, "absent") } }), code("pin-unavailable"));
});

test("token, key and configuration errors are typed", async () => {
  await assert.rejects(openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "ec"), token: { label: "no-such-token" } }), code("token-not-found"));
  await assert.rejects(openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "ec"), token: { slot: 999_999 } }), code("token-not-found"));
  await assert.rejects(openPkcs11Signer(hsm.signerConfig(TOKEN, "no-such-key")), code("key-not-found"));
  await assert.rejects(openPkcs11Signer(hsm.signerConfig(TOKEN, "twin")), code("key-ambiguous"));
  const byId = await openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "twin"), key: { label: "twin", id: "0D" } });
  await byId.close();
  await assert.rejects(openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "ec"), key: {} }), code("invalid-config"));
  await assert.rejects(openPkcs11Signer({ ...hsm.signerConfig(TOKEN, "ec"), module: join(hsm.dir, "missing.so") }), code("pkcs11-module"));
});

test("concurrent signatures through two signers of one token are serialized (max in flight = 1)", async () => {
  let inFlight = 0;
  let maxInFlight = 0;
  let started = 0;
  const observe = {
    signStart() {
      started++;
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
    },
    signEnd() {
      inFlight--;
    },
  };
  const ec = await openPkcs11Signer(hsm.signerConfig(TOKEN, "ec"), { observe });
  const rsa = await openPkcs11Signer(hsm.signerConfig(TOKEN, "rsa"), { observe });
  try {
    const jobs = Array.from({ length: 16 }, (_, i) => {
      const signer = i % 2 === 0 ? ec : rsa;
      const data = randomBytes(64 + i);
      return signer.sign(data).then((sig) => ({ signer, data, sig }));
    });
    // every caller is waiting before the first signature completes
    assert.ok(started <= 1, `at most one signature started synchronously, saw ${started}`);
    const results = await Promise.all(jobs);
    assert.equal(started, 16);
    assert.equal(maxInFlight, 1, `signatures overlapped: ${maxInFlight} in flight at once`);
    assert.equal(inFlight, 0);
    for (const r of results) assert.ok(verifies(r.signer, r.data, r.sig));
  } finally {
    await ec.close();
    await rsa.close();
  }
});

test("a lost session fails one signature with token-unavailable; the next reopens and signs", async () => {
  const signer = await openPkcs11Signer(hsm.signerConfig(TOKEN, "always"));
  try {
    const data = randomBytes(32);
    assert.ok(verifies(signer, data, await signer.sign(data)));
    // what unplugging does to the signer's session: close every session of this process on the token
    const mod = acquirePkcs11Module(SOFTHSM_MODULE);
    try {
      const slot = mod.api.C_GetSlotList(true).find((s) => mod.api.C_GetTokenInfo(s).label.trimEnd() === TOKEN);
      assert.ok(slot);
      mod.api.C_CloseAllSessions(slot);
    } finally {
      mod.release();
    }
    await assert.rejects(signer.sign(data), code("token-unavailable"));
    assert.ok(verifies(signer, data, await signer.sign(data)), "reopened, logged in again, signed");
  } finally {
    await signer.close();
  }
});

test("a closed signer refuses to sign", async () => {
  const signer = await openPkcs11Signer(hsm.signerConfig(TOKEN, "ec"));
  await signer.close();
  await assert.rejects(signer.sign(new Uint8Array(1)), code("signer-closed"));
  await signer.close(); // idempotent
});
