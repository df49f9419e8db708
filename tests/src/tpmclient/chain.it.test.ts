/**
 * The whole attestation chain on a real swtpm, checked by fleetd's own verifier: EK (RSA and ECC) → SRK
 * (SPIRE's high-range template) → AK; MakeCredential in software → TPM2_ActivateCredential recovers the secret;
 * a quote after PCR_Extend verifies with verifyQuote; TPM2_Certify of the LDevID and the LAK by the AK verifies
 * with verifyCertify and the keys pass their attribute policies; the LDevID's TPM2_Sign verifies with
 * node:crypto. Runs through the flush-on-close transport, and checks no transient is left behind.
 */
import { strict as assert } from "node:assert";
import { createHash, randomBytes, verify as cryptoVerify, constants } from "node:crypto";
import { after, before, test } from "node:test";
import { AK_POLICY, checkKeyAttributes, LDEVID_POLICY, Checks, verifyCertify, verifyQuote } from "@fleetd/verify/attest";
import { makeCredential } from "@fleetd/verify/credential";
import { TPM_ALG, TPMA_OBJECT } from "@fleetd/verify/tcg";
import { keyObjectFromTpmPublic } from "@fleetd/verify/tpm";
import {
  activateCredential,
  certify,
  createAk,
  createEk,
  createLak,
  createLdevid,
  createSrk,
  FlushOnCloseTransport,
  load,
  pcrExtend,
  pcrRead,
  quote,
  sign,
  srkTemplate,
  TcpTransport,
  TpmClient,
  withTransients,
  type KeyAlg,
} from "@fleetd/platform/tpmclient";
import { startRawSwtpm, type RawSwtpm } from "../harness/swtpm-raw.js";

let swtpm: RawSwtpm;
before(async () => {
  swtpm = await startRawSwtpm();
});
after(async () => {
  await swtpm?.stop();
});

const sha256 = (...parts: Uint8Array[]) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};

function connect(): TpmClient {
  return new TpmClient(new FlushOnCloseTransport(new TcpTransport(swtpm.host, swtpm.port)));
}

/** Verifies a TPMT_SIGNATURE from TPM2_Sign with node:crypto directly (not fleetd's verifier). */
function nodeVerify(pub: Parameters<typeof keyObjectFromTpmPublic>[0], message: Uint8Array, sig: Awaited<ReturnType<typeof sign>>["signature"]): boolean {
  const key = keyObjectFromTpmPublic(pub);
  const s = sig.signature;
  if (s.kind === "rsassa") return cryptoVerify("sha256", message, { key, padding: constants.RSA_PKCS1_PADDING }, s.sig);
  if (s.kind === "ecdsa") {
    const rs = new Uint8Array(64);
    rs.set(s.signatureR, 32 - s.signatureR.length);
    rs.set(s.signatureS, 64 - s.signatureS.length);
    return cryptoVerify("sha256", message, { key, dsaEncoding: "ieee-p1363" }, rs);
  }
  return false;
}

for (const alg of ["rsa", "ecc"] as KeyAlg[]) {
  test(`${alg}: EK → SRK → AK, activation, quote, certify (LDevID, LAK), sign — all verify with fleetd's verifier`, async () => {
    const tpm = connect();
    try {
      await withTransients(tpm, async (t) => {
        const ek = t.keep(await createEk(tpm, alg));
        assert.equal(ek.template, "default");
        assert.equal(ek.public.type, alg === "rsa" ? TPM_ALG.RSA : TPM_ALG.ECC);
        assert.equal(ek.public.objectAttributes, 0x000300b2);

        const srk = t.keep(await createSrk(tpm, alg));
        assert.equal(srk.public.objectAttributes, 0x00030472);
        // The SRK is deterministic: creating it again gives the same key (what lets blobs reload after a reconnect).
        const srk2 = await createSrk(tpm, alg);
        assert.deepEqual(srk2.name, srk.name);
        await tpm.flushContext(srk2.handle);
        assert.deepEqual(srkTemplate(alg).parameters, srk.public.parameters);

        const akBlobs = await createAk(tpm, srk, alg);
        const ak = t.keep(await load(tpm, srk, akBlobs));
        assert.deepEqual(ak.name, akBlobs.name);
        const akChecks = new Checks();
        assert.ok(checkKeyAttributes(akChecks, "ak", ak.public, AK_POLICY), JSON.stringify(akChecks.reasons));

        // Challenge → activation: the server's MakeCredential, the TPM's ActivateCredential.
        const secret = new Uint8Array(randomBytes(32));
        const cred = makeCredential(ek.public, ak.name, secret);
        const recovered = await activateCredential(tpm, ak, ek, cred.idObject, cred.encryptedSecret);
        assert.deepEqual(recovered, secret);
        // A TPM holds as few as 3 loaded objects (swtpm does): the EK is done, make room.
        await t.flush(ek.handle);

        // Quote after an extend: verifyQuote recomputes the PCR digest from the values PCR_Read returns.
        const before16 = (await pcrRead(tpm, [{ hash: TPM_ALG.SHA256, pcrs: [16] }])).values.get(TPM_ALG.SHA256)?.get(16);
        const measurement = sha256(Buffer.from(`fleetd test ${alg}`));
        await pcrExtend(tpm, 16, [
          { hashAlg: TPM_ALG.SHA256, digest: measurement },
          { hashAlg: TPM_ALG.SHA1, digest: new Uint8Array(createHash("sha1").update("x").digest()) },
        ]);
        const selection = [
          { hash: TPM_ALG.SHA256, pcrs: [0, 1, 2, 3, 4, 5, 6, 7, 16] },
          { hash: TPM_ALG.SHA1, pcrs: [0, 16] },
        ];
        const extraData = sha256(Buffer.from("fleetd/quote/v1"), randomBytes(32));
        const q = await quote(tpm, ak, selection, extraData);
        const snapshot = await pcrRead(tpm, selection);
        assert.ok(before16);
        assert.deepEqual(snapshot.values.get(TPM_ALG.SHA256)?.get(16), sha256(before16, measurement));
        const qv = verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs: snapshot.values, expectedExtraData: extraData });
        assert.equal(qv.verdict, "pass", JSON.stringify(qv.reasons));
        // ... and fails on other PCR values or another nonce (the check can fail).
        const wrongNonce = verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs: snapshot.values, expectedExtraData: sha256(extraData) });
        assert.equal(wrongNonce.verdict, "fail");
        await pcrExtend(tpm, 16, [{ hashAlg: TPM_ALG.SHA256, digest: measurement }]);
        const moved = await pcrRead(tpm, selection);
        assert.equal(verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs: moved.values, expectedExtraData: extraData }).verdict, "fail");

        // LDevID and LAK, certified by the AK.
        for (const [kind, create, policy] of [
          ["ldevid", createLdevid, LDEVID_POLICY],
          ["lak", createLak, AK_POLICY],
        ] as const) {
          const blobs = await create(tpm, srk, alg);
          const key = t.keep(await load(tpm, srk, blobs));
          const certExtra = sha256(Buffer.from(`fleetd/certify/${kind}/v1`), randomBytes(32));
          const c = await certify(tpm, key, ak, certExtra);
          const cv = verifyCertify({ akPublic: ak.public, objectPublic: key.publicBytes, attest: c.attestBytes, signature: c.signatureBytes, expectedExtraData: certExtra });
          assert.equal(cv.verdict, "pass", `${kind}: ${JSON.stringify(cv.reasons)}`);
          const kc = new Checks();
          assert.ok(checkKeyAttributes(kc, kind, key.public, policy), `${kind}: ${JSON.stringify(kc.reasons)}`);
          // A certification of the other key does not pass for this one.
          const other = verifyCertify({ akPublic: ak.public, objectPublic: ak.publicBytes, attest: c.attestBytes, signature: c.signatureBytes, expectedExtraData: certExtra });
          assert.ok(other.reasons.some((r) => r.check === "certify.name"));
          if (kind === "ldevid") {
            assert.equal(key.public.objectAttributes & TPMA_OBJECT.adminWithPolicy, 0);
            const message = Buffer.from("fleetd/confirm/v1 test message");
            const s = await sign(tpm, key, sha256(message));
            assert.ok(nodeVerify(key.public, message, s.signature), "LDevID signature verifies with node:crypto");
            assert.ok(!nodeVerify(key.public, Buffer.from("another message"), s.signature));
          }
          await t.flush(key.handle);
        }
      });
      // Everything this run loaded was flushed at its end.
      assert.deepEqual(await tpm.getHandles(0x80), []);
    } finally {
      await tpm.close();
    }
  });
}
