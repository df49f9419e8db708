/**
 * Issue 10 at the verifier, on a real swtpm with SHA-256, SHA-384 and SHA-512 banks (no server, no NetBox; the
 * HTTP-level test is tests/src/attestation/banks.it.test.ts). The TPM measured a Secure-Boot-off boot into all
 * three banks; then, "from the OS", the good HookOS boot's SHA-384 digests of PCR i went into PCR 8+i. A fresh AK
 * quotes SHA-256, SHA-384 and SHA-512 PCRs 0–15; the values re-cut so that SHA-384 PCRs 0–7 read as the good boot
 * keep the quote's pcrDigest. The schema, the verifier and the policy each refuse them on their own.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { verifyQuote } from "@fleetd/verify/attest";
import { decodeExact } from "@fleetd/verify/codec";
import { digest } from "@fleetd/verify/crypto";
import { parseEventLog, replayLog } from "@fleetd/verify/eventlog";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, profileAuthorityRefs } from "@fleetd/verify/policy";
import { readPcrsWire, type PcrWire } from "@fleetd/platform/protocol/client";
import { Evidence } from "@fleetd/platform/protocol";
import { bootScenario, type LabKeys, makeLabKeys, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { TPMS_ATTEST } from "@fleetd/verify/tpm";
import { createAk, createSrk, load, pcrExtend, quote, TcpTransport, TpmClient, withTransients } from "@fleetd/platform/tpmclient";
import { recutSha384Upper, valueBytes, valuesOf } from "../attestation/recut.js";
import { startSwtpm, type SwtpmTcp } from "../harness/swtpm.js";

const { SHA256, SHA384, SHA512 } = TPM_ALG;
const work = mkdtempSync(join(tmpdir(), "fleetd-recut-"));
let keys: LabKeys;
let site: string;
let tpm: SwtpmTcp;
before(async () => {
  keys = await makeLabKeys();
  site = writeSiteAuthorities(join(work, "site"), keys);
  tpm = await startSwtpm({ pcrBanks: ["sha256", "sha384", "sha512"], ekCerts: false });
});
after(async () => {
  await tpm?.stop();
  rmSync(work, { recursive: true, force: true });
});

test("issue 10: a real three-bank quote with SHA-384 PCRs 8–15 re-cut into 0–7 keeps pcrDigest, and schema, verifier and policy refuse it", async () => {
  const bad = bootScenario("hookos", keys, { banks: [SHA256, SHA384, SHA512], secureBoot: 0 });
  const good = bootScenario("hookos", keys, { banks: [SHA384] });
  const forged = parseEventLog(good.bytes());
  const tc = new TpmClient(new TcpTransport(tpm.host, tpm.port));
  try {
    for (const e of bad.extends()) await pcrExtend(tc, e.pcr, [...e.digests].map(([hashAlg, d]) => ({ hashAlg, digest: d })));
    for (const e of good.extends()) await pcrExtend(tc, e.pcr + 8, [{ hashAlg: SHA384, digest: e.digests.get(SHA384) as Uint8Array }]);
    const selection = [SHA256, SHA384, SHA512].map((hash) => ({ hash, pcrs: Array.from({ length: 16 }, (_, i) => i) }));
    const nonce = new Uint8Array(randomBytes(32));
    const { q, akPublic, real } = await withTransients(tc, async (t) => {
      const srk = t.keep(await createSrk(tc, "rsa"));
      const blobs = await createAk(tc, srk, "rsa");
      const ak = t.keep(await load(tc, srk, blobs));
      const q = await quote(tc, ak, selection, nonce);
      return { q, akPublic: ak.public, real: await readPcrsWire(tc, selection) };
    });
    const claimed: PcrWire[] = recutSha384Upper(real);

    // The attack holds up to a check of selection and digest alone.
    const want = replayLog(forged).banks.get(SHA384)?.pcrs;
    for (let i = 0; i < 8; i++) assert.equal(claimed.find((p) => p.bank === "sha384" && p.pcr === i)?.value, Buffer.from(want?.get(i) ?? []).toString("hex"));
    const attested = decodeExact(TPMS_ATTEST, q.attestBytes).attested;
    assert.ok(attested.kind === "quote");
    assert.deepEqual(digest(SHA256, ...claimed.map(valueBytes)), attested.pcrDigest);

    // The verifier refuses the re-cut and accepts the real values of the same quote.
    const input = { akPublic, quote: q.attestBytes, signature: q.signatureBytes, expectedExtraData: nonce };
    const v = verifyQuote({ ...input, pcrs: valuesOf(claimed) });
    assert.deepEqual([...new Set(v.reasons.map((r) => r.check))], ["quote.pcrValueSize"]);
    assert.equal(v.reasons.length, 3, "one reason per re-cut bank");
    assert.equal(verifyQuote({ ...input, pcrs: valuesOf(real) }).verdict, "pass");

    // The schema refuses the body; the policy refuses either value set with the forged log.
    const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
    const key = { public: "AA==", private: "AA==", certifyInfo: "AA==", signature: "AA==" };
    const body = (pcrs: PcrWire[]) => ({ sessionId: "s", secrets: ["AA=="], quote: { message: b64(q.attestBytes), signature: b64(q.signatureBytes), pcrs }, eventLog: b64(good.bytes()), ldevid: key, lak: key });
    assert.equal(Evidence.safeParse(body(claimed)).success, false);
    assert.equal(Evidence.safeParse(body(real)).success, true);
    const hookos = loadProfile("hookos");
    const auth = resolveAuthorities(profileAuthorityRefs(hookos), site);
    for (const values of [claimed, real]) {
      const p = evaluateProfile(hookos, { log: forged, pcrs: valuesOf(values) }, auth);
      assert.equal(p.verdict, "fail");
      assert.ok(p.reasons.some((r) => r.check === "bank-not-in-log"), JSON.stringify(p.reasons));
    }
  } finally {
    await tc.close();
  }
});
