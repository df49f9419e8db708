/** A real TPM's refusals come back as TpmError with the spec's name and where it points. */
import { strict as assert } from "node:assert";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import { makeCredential } from "@fleetd/verify/credential";
import { decodeExact } from "@fleetd/verify/codec";
import { TPM_RH } from "@fleetd/verify/tcg";
import { TPM2B_ENCRYPTED_SECRET, TPM2B_ID_OBJECT } from "@fleetd/verify/tpm";
import {
  activateCredential,
  akTemplate,
  createAk,
  createEk,
  createSrk,
  load,
  passwordAuth,
  policyAuth,
  readEkCertificate,
  TcpTransport,
  TpmClient,
  TpmError,
  type LoadedObject,
} from "@fleetd/platform/tpmclient";
import { startRawSwtpm, type RawSwtpm } from "../harness/swtpm-raw.js";

let swtpm: RawSwtpm;
let tpm: TpmClient;
let ek: LoadedObject;
let srk: LoadedObject;
let ak: LoadedObject;
let otherAkName: Uint8Array;
before(async () => {
  swtpm = await startRawSwtpm();
  tpm = new TpmClient(new TcpTransport(swtpm.host, swtpm.port));
  ek = await createEk(tpm, "rsa");
  srk = await createSrk(tpm, "rsa");
  otherAkName = (await createAk(tpm, srk, "rsa")).name;
  // EK, SRK and AK fill swtpm's 3 object slots.
  ak = await load(tpm, srk, await createAk(tpm, srk, "rsa"));
});
after(async () => {
  await tpm?.close();
  await swtpm?.stop();
});

function rejectsWith(name: string, subject?: { kind: string; index: number }) {
  return (e: unknown) => {
    assert.ok(e instanceof TpmError, `expected a TpmError, got ${String(e)}`);
    assert.equal(e.name, name, e.message);
    if (subject) assert.deepEqual(e.rc.subject, subject, e.message);
    assert.ok(e.message.includes(name));
    return true;
  };
}

test("a credential whose integrity HMAC was altered: TPM_RC_INTEGRITY on parameter 1", async () => {
  const cred = makeCredential(ek.public, ak.name, new Uint8Array(randomBytes(32)));
  const id = cred.idObject.slice();
  id[5] = (id[5] ?? 0) ^ 0xff; // inside integrityHMAC
  await assert.rejects(activateCredential(tpm, ak, ek, id, cred.encryptedSecret), rejectsWith("TPM_RC_INTEGRITY", { kind: "parameter", index: 1 }));
});

test("a credential made for another AK's Name: TPM_RC_INTEGRITY (the TPM binds the credential to the AK)", async () => {
  const cred = makeCredential(ek.public, otherAkName, new Uint8Array(randomBytes(32)));
  await assert.rejects(activateCredential(tpm, ak, ek, cred.idObject, cred.encryptedSecret), rejectsWith("TPM_RC_INTEGRITY"));
});

test("a secret encrypted to another EK: refused (reference TPM: TPM_RC_VALUE on parameter 2; libtpms: TPM_RC_FAILURE), TPM still usable", async () => {
  const jwk = generateKeyPairSync("rsa", { modulusLength: 2048 }).publicKey.export({ format: "jwk" });
  const otherEk = { ...ek.public, unique: { kind: "rsa" as const, n: new Uint8Array(Buffer.from(jwk.n ?? "", "base64url")) } };
  const cred = makeCredential(otherEk, ak.name, new Uint8Array(randomBytes(32)));
  await assert.rejects(activateCredential(tpm, ak, ek, cred.idObject, cred.encryptedSecret), (e: unknown) => {
    assert.ok(e instanceof TpmError, String(e));
    // libtpms answers an OAEP failure of the seed with TPM_RC_FAILURE without entering failure mode.
    if (e.name === "TPM_RC_VALUE") assert.deepEqual(e.rc.subject, { kind: "parameter", index: 2 });
    else assert.equal(e.name, "TPM_RC_FAILURE", e.message);
    return true;
  });
  const good = makeCredential(ek.public, ak.name, new Uint8Array(32).fill(9));
  assert.deepEqual(await activateCredential(tpm, ak, ek, good.idObject, good.encryptedSecret), new Uint8Array(32).fill(9));
});

test("the policy session used for a failed activation is flushed, not leaked", async () => {
  const before = await tpm.getHandles(0x03);
  const cred = makeCredential(ek.public, ak.name, new Uint8Array(32).fill(1));
  const id = cred.idObject.slice();
  id[5] = (id[5] ?? 0) ^ 1;
  await assert.rejects(activateCredential(tpm, ak, ek, id, cred.encryptedSecret));
  assert.deepEqual(await tpm.getHandles(0x03), before);
});

test("a handle that names nothing: TPM_RC_HANDLE (FlushContext parameter 1); out of range: TPM_RC_VALUE; no slot: TPM_RC_OBJECT_MEMORY", async () => {
  await assert.rejects(tpm.flushContext(0x02000001), rejectsWith("TPM_RC_HANDLE", { kind: "parameter", index: 1 }));
  await assert.rejects(tpm.readPublic(0x80fffff0), rejectsWith("TPM_RC_VALUE", { kind: "handle", index: 1 }));
  // Reading a persistent object needs a free object slot: with EK, SRK and AK loaded swtpm has none.
  await assert.rejects(tpm.readPublic(0x81010001), rejectsWith("TPM_RC_OBJECT_MEMORY"));
});

test("wrong owner password: TPM_RC_BAD_AUTH on session 1", async () => {
  await assert.rejects(tpm.createPrimary(TPM_RH.OWNER, akTemplate("rsa"), new Uint8Array([1, 2, 3])), rejectsWith("TPM_RC_BAD_AUTH", { kind: "session", index: 1 }));
});

test("the EK (adminWithPolicy, no userWithAuth) used with a password instead of its policy: TPM_RC_AUTH_UNAVAILABLE", async () => {
  const cred = makeCredential(ek.public, ak.name, new Uint8Array(32).fill(2));
  await assert.rejects(
    tpm.activateCredential(ak.handle, ek.handle, decodeExact(TPM2B_ID_OBJECT, cred.idObject), decodeExact(TPM2B_ENCRYPTED_SECRET, cred.encryptedSecret), [passwordAuth(), passwordAuth()]),
    rejectsWith("TPM_RC_AUTH_UNAVAILABLE"),
  );
});

test("the EK with a policy session that never ran PolicySecret: TPM_RC_POLICY_FAIL on session 2", async () => {
  const cred = makeCredential(ek.public, ak.name, new Uint8Array(32).fill(4));
  const session = await tpm.startAuthSession();
  try {
    await assert.rejects(
      tpm.activateCredential(ak.handle, ek.handle, decodeExact(TPM2B_ID_OBJECT, cred.idObject), decodeExact(TPM2B_ENCRYPTED_SECRET, cred.encryptedSecret), [passwordAuth(), policyAuth(session.handle)]),
      rejectsWith("TPM_RC_POLICY_FAIL", { kind: "session", index: 2 }),
    );
  } finally {
    await tpm.flushContext(session.handle);
  }
});

test("an NV index that is not defined reads as absent (TPM_RC_HANDLE underneath)", async () => {
  assert.equal(await readEkCertificate(tpm, 0x01c00002), undefined);
  await assert.rejects(tpm.nvReadPublic(0x01c00002), rejectsWith("TPM_RC_HANDLE", { kind: "handle", index: 1 }));
});

test("a restricted key refuses TPM2_Sign without a hashcheck ticket: TPM_RC_TICKET", async () => {
  await assert.rejects(tpm.sign(ak.handle, new Uint8Array(32)), rejectsWith("TPM_RC_TICKET"));
});

test("a transient that was flushed: the warning TPM_RC_REFERENCE_H0 (runs last: it flushes the AK)", async () => {
  await tpm.flushContext(ak.handle);
  await assert.rejects(tpm.readPublic(ak.handle), (e: unknown) => e instanceof TpmError && e.name === "TPM_RC_REFERENCE_H0" && e.isWarning);
  // With a slot free, a persistent handle that names nothing: TPM_RC_HANDLE on handle 1.
  await assert.rejects(tpm.readPublic(0x81fffff0), rejectsWith("TPM_RC_HANDLE", { kind: "handle", index: 1 }));
});
