/**
 * The protocol across connections, as on a machine with /dev/tpmrm0: the AK and LDevID live as blobs; the
 * connection that produced the evidence is closed (the flush-on-close transport flushes what it loaded, as the
 * kernel does), a new connection recreates EK and SRK (deterministic), reloads the AK from its blobs, and the
 * confirm step — a second activation and the LDevID signature — still works. A handle from the old connection is
 * refused. Runs over swtpm's TCP and Unix-socket command channels.
 */
import { strict as assert } from "node:assert";
import { createHash, randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import { verifyQuote, verifyTpmSignature, Checks } from "@fleetd/verify/attest";
import { makeCredential } from "@fleetd/verify/credential";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { decodeExact } from "@fleetd/verify/codec";
import { TPMT_SIGNATURE } from "@fleetd/verify/tpm";
import {
  activateCredential,
  createAk,
  createEk,
  createLdevid,
  createSrk,
  FlushOnCloseTransport,
  load,
  pcrRead,
  quote,
  sign,
  TcpTransport,
  TpmClient,
  TpmError,
  UnixTransport,
  withTransients,
  type KeyAlg,
  type KeyBlobs,
  type TpmTransport,
} from "@fleetd/platform/tpmclient";
import { startRawSwtpm, type RawSwtpm } from "../harness/swtpm-raw.js";

let tcp: RawSwtpm;
let unix: RawSwtpm;
before(async () => {
  [tcp, unix] = await Promise.all([startRawSwtpm(), startRawSwtpm({ unix: true })]);
});
after(async () => {
  await Promise.all([tcp?.stop(), unix?.stop()]);
});

const sha256 = (...parts: Uint8Array[]) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};

const transports: [string, () => TpmTransport][] = [
  ["tcp", () => new TcpTransport(tcp.host, tcp.port)],
  ["unix", () => new UnixTransport(unix.socketPath ?? "")],
];

for (const [via, raw] of transports) {
  for (const alg of ["rsa", "ecc"] as KeyAlg[]) {
    test(`${via}/${alg}: evidence on one connection, confirm on the next, AK and LDevID reloaded from blobs`, async () => {
      // ---- connection 1: challenge + evidence ----
      const c1 = new FlushOnCloseTransport(raw());
      const tpm1 = new TpmClient(c1);
      let akBlobs: KeyBlobs;
      let ldevidBlobs: KeyBlobs;
      let ekName: Uint8Array;
      let staleAkHandle = 0;
      try {
        const ek = await createEk(tpm1, alg);
        ekName = ek.name;
        const srk = await createSrk(tpm1, alg);
        akBlobs = await createAk(tpm1, srk, alg);
        ldevidBlobs = await createLdevid(tpm1, srk, alg);
        const ak = await load(tpm1, srk, akBlobs);
        staleAkHandle = ak.handle;
        const secret = new Uint8Array(randomBytes(32));
        const cred = makeCredential(ek.public, akBlobs.name, secret);
        assert.deepEqual(await activateCredential(tpm1, ak, ek, cred.idObject, cred.encryptedSecret), secret);
        await tpm1.flushContext(ek.handle);
        const sel = [{ hash: TPM_ALG.SHA256, pcrs: [0, 7] }];
        const extra = sha256(Buffer.from("evidence"));
        const q = await quote(tpm1, ak, sel, extra);
        const v = verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs: (await pcrRead(tpm1, sel)).values, expectedExtraData: extra });
        assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
        // SRK and AK are still loaded: closing must flush them.
        assert.equal(c1.handles.length, 2);
      } finally {
        await tpm1.close();
      }
      // Nothing of connection 1 is left in the TPM.
      const probe = new TpmClient(raw());
      try {
        assert.deepEqual(await probe.getHandles(0x80), [], "connection 1's transients were flushed on close");
      } finally {
        await probe.close();
      }

      // ---- connection 2: confirm ----
      const tpm2 = new TpmClient(new FlushOnCloseTransport(raw()));
      try {
        // The old handle is not this connection's (the kernel RM refuses it too).
        await assert.rejects(tpm2.readPublic(staleAkHandle), (e: unknown) => e instanceof TpmError && e.name === "TPM_RC_HANDLE" && e.rc.subject?.kind === "handle");
        await withTransients(tpm2, async (t) => {
          const ek = t.keep(await createEk(tpm2, alg));
          assert.deepEqual(ek.name, ekName, "the EK is the same key on every connection");
          const srk = t.keep(await createSrk(tpm2, alg));
          const ak = t.keep(await load(tpm2, srk, akBlobs));
          assert.deepEqual(ak.name, akBlobs.name);
          // The install code: a second MakeCredential to the EK for the same AK.
          const code = new Uint8Array(randomBytes(32));
          const cred = makeCredential(ek.public, ak.name, code);
          assert.deepEqual(await activateCredential(tpm2, ak, ek, cred.idObject, cred.encryptedSecret), code);
          await t.flush(ek.handle);
          await t.flush(ak.handle);
          const ldevid = t.keep(await load(tpm2, srk, ldevidBlobs));
          const message = Buffer.from("fleetd/confirm/v1 session");
          const s = await sign(tpm2, ldevid, sha256(message));
          const c = new Checks();
          assert.ok(verifyTpmSignature(c, "confirm", ldevid.public, message, decodeExact(TPMT_SIGNATURE, s.signatureBytes)), JSON.stringify(c.reasons));
        });
      } finally {
        await tpm2.close();
      }
    });
  }
}
