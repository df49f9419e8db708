/**
 * Issue 10, critical — PCR values re-cut across banks, end to end on the real world (NetBox, swtpm with SHA-384
 * and SHA-512 banks allocated, SoftHSM2, the attestation server over HTTP).
 *
 * The attack: the quote's pcrDigest covers only the concatenation of the PCR values, so a machine that may give
 * values of any length chooses where one ends and the next begins. Its firmware measured a boot the policy refuses
 * (here: Secure Boot off, so any OS ran) into all three banks. From that OS it extends a good HookOS boot's SHA-384
 * digests into PCRs 8–15 (PCR i's events into PCR 8+i: nothing else uses them), quotes SHA-256, SHA-384 and SHA-512
 * PCRs 0–15, and sends the values re-cut so that "SHA-384 PCRs 0–7" are the real SHA-384 PCRs 8–15 — with a
 * forged, SHA-384-only log of the good boot. The other banks absorb the bytes left over and, being absent from the
 * log, were never compared with anything. Before the fix that run was accepted: an LDevID and an install code.
 *
 * Each refusal leaves the CA key's signature count, the node's issued certificates and its install codes as they
 * were. The controls: the same machine run honestly is refused for Secure Boot alone (its quote holds, all three
 * banks quoted), and a machine with the same three banks and a good boot is admitted. A second attack needs no
 * re-cut: firmware that extends SHA-256 only leaves the SHA-384 bank to the OS, which fills it with a good boot and
 * quotes it — alone, or beside SHA-256 with a log that lacks SHA-256.
 */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { verifyQuote } from "@fleetd/verify/attest";
import { digest } from "@fleetd/verify/crypto";
import { parseEventLog, replayLog } from "@fleetd/verify/eventlog";
import { listDevices, readJournal } from "@fleetd/platform/netbox";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, profileAuthorityRefs } from "@fleetd/verify/policy";
import { claimsHash, quoteExtraData, type Claims } from "@fleetd/platform/protocol";
import { attest, AttestationRefused, type PcrWire, type ServerTransport } from "@fleetd/platform/protocol/client";
import { bootScenario } from "@fleetd/testkit/bootScenarios";
import { TPM_ALG } from "@fleetd/verify/tcg";
import { decodeExact } from "@fleetd/verify/codec";
import { TPMS_ATTEST } from "@fleetd/verify/tpm";
import { pcrExtend } from "@fleetd/platform/tpmclient";
import { challenge, evidence, refusal, sendEvidence, withMachine, type Machine } from "./machine.js";
import { recutSha384Upper, valueBytes, valuesOf } from "./recut.js";
import { startWorld, type World, type WorldMachine } from "./world.js";
import { TALOS_VERSION } from "../talos/goTools.js";

const { SHA256, SHA384, SHA512 } = TPM_ALG;
const THREE = ["sha256", "sha384", "sha512"] as const;
const ALL16 = Array.from({ length: 16 }, (_, i) => i);
const THREE_BANKS = [SHA256, SHA384, SHA512].map((hash) => ({ hash, pcrs: ALL16 }));
/** The attacker: a TPM with SHA-256, SHA-384 and SHA-512 banks whose firmware measured a Secure-Boot-off boot into all three. */
const RECUT = "worker-recut";
/** The control: the same banks, a good HookOS boot measured into all three. */
const GOOD = "worker-banks";
/** A TPM with SHA-256 and SHA-384 banks whose firmware measured its (Secure-Boot-off) boot into SHA-256 only. */
const ONEBANK = "worker-onebank";

let w: World;
before(async () => {
  w = await startWorld({
    talosVersion: TALOS_VERSION,
    machines: {
      [RECUT]: { pcrBanks: THREE, boot: { banks: [SHA256, SHA384, SHA512], secureBoot: 0 } },
      [GOOD]: { pcrBanks: THREE, boot: { banks: [SHA256, SHA384, SHA512] } },
      [ONEBANK]: { pcrBanks: ["sha256", "sha384"], boot: { banks: [SHA256], secureBoot: 0 } },
    },
  });
}, { timeout: 20 * 60_000 });
after(async () => {
  await w?.stop();
});

const machine = (name: string): WorldMachine => w.machines[name] as WorldMachine;
const run = <T>(name: string, fn: (m: Machine) => Promise<T>, server: ServerTransport = w.transport): Promise<T> => withMachine(machine(name), server, fn);
const provision = (name: string, over: Partial<Claims> = {}) => machine(name).claims({ mode: "provision", ...over });

async function journal(name: string): Promise<string[]> {
  const [d] = await listDevices(w.admin, { name });
  assert.ok(d, `device ${name} exists`);
  return (await readJournal(w.admin, d.id)).map((j) => j.comments);
}

interface Baseline {
  node: string;
  issued: number;
  signatures: number;
  codes: number;
  journal: number;
}
async function baseline(node: string): Promise<Baseline> {
  return { node, issued: (await w.store.listIssued(await w.deviceId(node))).length, signatures: w.signatures(), codes: w.installCodesIssued(), journal: (await journal(node)).length };
}
/** Nothing was released since `b`: no certificate, no CA signature, no install code. */
async function nothingReleased(b: Baseline): Promise<void> {
  assert.equal((await w.store.listIssued(await w.deviceId(b.node))).length, b.issued, "no certificate issued");
  assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
  assert.equal(w.installCodesIssued(), b.codes, "no install code issued");
  assert.equal(await w.store.hasInstallCodeFor(await w.deviceId(b.node), Date.now()), false, "no install code for the node");
}

/** A transport that keeps the evidence bodies it sends. */
function recording(): { transport: ServerTransport; evidence: { quote: { pcrs: PcrWire[] } }[] } {
  const sent: { quote: { pcrs: PcrWire[] } }[] = [];
  return {
    evidence: sent,
    transport: {
      post: (path, body) => {
        if (path.endsWith("/evidence")) sent.push(body as { quote: { pcrs: PcrWire[] } });
        return w.transport.post(path, body);
      },
    },
  };
}

test("control: a TPM with SHA-256, SHA-384 and SHA-512 banks and a good HookOS boot is admitted; the client quotes all three banks", async () => {
  const rec = recording();
  const tpm = machine(GOOD).client();
  try {
    const done = await attest({ tpm, server: rec.transport, claims: provision(GOOD), eventLog: machine(GOOD).eventLog });
    assert.match(done.installCode ?? "", /^[0-9a-f]{64}$/);
  } finally {
    await tpm.close();
  }
  const pcrs = rec.evidence[0]?.quote.pcrs ?? [];
  assert.deepEqual([...new Set(pcrs.map((p) => p.bank))], [...THREE]);
  for (const p of pcrs) assert.equal(p.value.length, { sha256: 64, sha384: 96, sha512: 128 }[p.bank as "sha256"], `${p.bank}:${p.pcr}`);
});

test("control: the attacker's machine run honestly is refused for Secure Boot alone (its three-bank quote holds)", async () => {
  const b = await baseline(RECUT);
  const tpm = machine(RECUT).client();
  let r: AttestationRefused;
  try {
    r = await refusal(attest({ tpm, server: w.transport, claims: provision(RECUT), eventLog: machine(RECUT).eventLog }));
  } finally {
    await tpm.close();
  }
  assert.equal(r.status, 403);
  assert.deepEqual(r.refusal.reasons.map((x) => x.check), ["policy.secure-boot"]);
  await nothingReleased(b);
});

test("issue 10: SHA-384 PCRs 8–15 re-cut into PCRs 0–7 with a forged log are refused (400 at the schema, quote.pcrValueSize at the verifier, 403 with honest sizes)", async () => {
  const good = bootScenario("hookos", w.lab, { banks: [SHA384] });
  const forged = good.bytes();
  // From the OS: the good boot's SHA-384 digests of PCR i into PCR 8+i.
  const tc = machine(RECUT).client();
  try {
    for (const e of good.extends()) {
      assert.ok(e.pcr < 8, "HookOS measures only PCRs 0–7");
      await pcrExtend(tc, e.pcr + 8, [{ hashAlg: SHA384, digest: e.digests.get(SHA384) as Uint8Array }]);
    }
  } finally {
    await tc.close();
  }

  const b = await baseline(RECUT);
  await run(RECUT, async (m) => {
    const s = await challenge(m, provision(RECUT));
    const ev = await evidence(m, s, { quoteSelection: THREE_BANKS, eventLog: forged });
    const real = ev.body.quote.pcrs;
    const claimed = recutSha384Upper(real);

    // The attack is real: the claimed SHA-384 PCRs 0–7 are the good boot's, and the quote's pcrDigest covers the
    // claimed values exactly as it covers the real ones (so a check of selection and digest alone accepts them).
    const wanted = replayLog(parseEventLog(forged)).banks.get(SHA384)?.pcrs;
    for (let i = 0; i < 8; i++) assert.equal(claimed.find((p) => p.bank === "sha384" && p.pcr === i)?.value, Buffer.from(wanted?.get(i) ?? []).toString("hex"), `claimed sha384:${i} is the good value`);
    const attestBytes = new Uint8Array(Buffer.from(ev.body.quote.message, "base64"));
    const quoted = decodeExact(TPMS_ATTEST, attestBytes);
    assert.equal(quoted.attested.kind, "quote");
    const pcrDigest = quoted.attested.kind === "quote" ? quoted.attested.pcrDigest : new Uint8Array();
    assert.deepEqual(digest(SHA256, ...claimed.map(valueBytes)), pcrDigest, "pcrDigest covers the re-cut values too");

    // 1. The schema: every value is exactly its bank's size. A 400, before the session is spent.
    const shape = await refusal(sendEvidence(m, { ...ev.body, quote: { ...ev.body.quote, pcrs: claimed } }));
    assert.equal(shape.status, 400, shape.message);
    assert.equal(shape.refusal.error, "bad-request");
    assert.ok(shape.refusal.reasons.some((x) => x.check === "request.shape" && /a sha256 PCR value is 32 bytes/.test(x.detail)), JSON.stringify(shape.refusal.reasons));

    // 2. The verifier, on the same real signed quote, whatever validated the body before it.
    const expectedExtraData = quoteExtraData(s.nonce, s.response.sessionId, claimsHash(s.claims));
    const signature = new Uint8Array(Buffer.from(ev.body.quote.signature, "base64"));
    const v = verifyQuote({ akPublic: s.ak.public, quote: attestBytes, signature, pcrs: valuesOf(claimed), expectedExtraData });
    assert.deepEqual([...new Set(v.reasons.map((x) => x.check))], ["quote.pcrValueSize"]);
    assert.match(v.reasons.map((x) => x.detail).join("\n"), /a sha256 PCR value is exactly 32 bytes; sha256:0 is 56/);
    assert.equal(verifyQuote({ akPublic: s.ak.public, quote: attestBytes, signature, pcrs: valuesOf(real), expectedExtraData }).verdict, "pass", "the real values verify");

    // 3. The policy, even on values that got past both: SHA-256 and SHA-512 are quoted but not in the forged log.
    const hookos = loadProfile("hookos");
    const p = evaluateProfile(hookos, { log: parseEventLog(forged), pcrs: valuesOf(claimed) }, resolveAuthorities(profileAuthorityRefs(hookos), w.siteAuthoritiesDir));
    assert.equal(p.verdict, "fail");
    assert.deepEqual(p.reasons.filter((x) => x.check === "bank-not-in-log").map((x) => /quote has (sha\d+)/.exec(x.detail)?.[1]), ["sha256", "sha512"]);

    // 4. The same session with the real values and the forged log: the quote holds, the policy refuses.
    const honestSizes = await refusal(sendEvidence(m, ev.body));
    assert.equal(honestSizes.status, 403, honestSizes.message);
    const checks = new Set(honestSizes.refusal.reasons.map((x) => x.check));
    assert.ok(![...checks].some((c) => c.startsWith("quote.")), `the quote holds: ${[...checks].join(", ")}`);
    assert.ok(checks.has("policy.bank-not-in-log"), [...checks].join(", "));
    // SHA-384 PCR 7 holds the Secure-Boot-off boot, not the forged log's (the two boots differ only there).
    assert.deepEqual(honestSizes.refusal.reasons.filter((x) => x.check === "policy.pcr-replay").map((x) => x.pcr), [7]);
  });
  await nothingReleased(b);
  const added = (await journal(RECUT)).slice(b.journal).join("\n");
  assert.match(added, /evidence refused/);
  assert.ok(added.includes("`policy.bank-not-in-log`"), added);
});

test("issue 10: a bank the firmware left unextended, filled from the OS with a good boot, is refused quoted alone (bank-required) or beside SHA-256 (bank-not-in-log)", async () => {
  const good = bootScenario("hookos", w.lab, { banks: [SHA384] });
  const tc = machine(ONEBANK).client();
  try {
    for (const e of good.extends()) await pcrExtend(tc, e.pcr, [{ hashAlg: SHA384, digest: e.digests.get(SHA384) as Uint8Array }]);
  } finally {
    await tc.close();
  }
  const b = await baseline(ONEBANK);
  const attempt = (quoteSelection: { hash: number; pcrs: number[] }[]) =>
    run(ONEBANK, async (m) => {
      const s = await challenge(m, provision(ONEBANK));
      const ev = await evidence(m, s, { quoteSelection, eventLog: good.bytes() });
      return refusal(sendEvidence(m, ev.body));
    });
  // SHA-384 alone: every quoted bank replays and the banks agree; before, this was admitted.
  const alone = await attempt([{ hash: SHA384, pcrs: ALL16 }]);
  assert.equal(alone.status, 403, alone.message);
  assert.deepEqual(alone.refusal.reasons.map((x) => x.check), ["policy.bank-required"]);
  // Beside the SHA-256 bank holding the real boot, which the forged log does not carry; before, skipped as "no-bank".
  const beside = await attempt([{ hash: SHA256, pcrs: ALL16 }, { hash: SHA384, pcrs: ALL16 }]);
  assert.equal(beside.status, 403, beside.message);
  assert.deepEqual(beside.refusal.reasons.map((x) => x.check), ["policy.bank-not-in-log"]);
  await nothingReleased(b);
  const added = (await journal(ONEBANK)).slice(b.journal).join("\n");
  assert.ok(added.includes("`policy.bank-required`") && added.includes("`policy.bank-not-in-log`"), added);
});

test("a (bank, PCR) given twice is refused (quote.pcrDuplicate), even with the same value: one value per PCR", async () => {
  const b = await baseline(GOOD);
  await run(GOOD, async (m) => {
    const s = await challenge(m, provision(GOOD));
    const ev = await evidence(m, s, { quoteSelection: THREE_BANKS });
    const pcrs = [...ev.body.quote.pcrs, ev.body.quote.pcrs[4] as PcrWire];
    const r = await refusal(sendEvidence(m, { ...ev.body, quote: { ...ev.body.quote, pcrs } }));
    assert.equal(r.status, 403, r.message);
    assert.deepEqual(r.refusal.reasons.map((x) => [x.check, x.detail]), [["quote.pcrDuplicate", "sha256:4 is given more than once"]]);
  });
  assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
  assert.equal((await w.store.listIssued(await w.deviceId(GOOD))).length, b.issued, "no certificate issued");
});

test("issue 10 (low): an odd-length PCR value is a 400 bad-request naming the field, not a 500", async () => {
  const b = await baseline(GOOD);
  await run(GOOD, async (m) => {
    const s = await challenge(m, provision(GOOD));
    const ev = await evidence(m, s, { quoteSelection: THREE_BANKS });
    const pcrs = ev.body.quote.pcrs.map((p, i) => (i === 3 ? { ...p, value: p.value.slice(1) } : p));
    const r = await refusal(sendEvidence(m, { ...ev.body, quote: { ...ev.body.quote, pcrs } }));
    assert.equal(r.status, 400, r.message);
    assert.equal(r.refusal.error, "bad-request");
    assert.ok(r.refusal.reasons.some((x) => x.check === "request.shape" && x.detail.startsWith("quote.pcrs.3.value: a sha256 PCR value is 32 bytes")), JSON.stringify(r.refusal.reasons));
  });
  assert.equal(w.signatures(), b.signatures, "the CA key signed nothing");
  assert.equal((await w.store.listIssued(await w.deviceId(GOOD))).length, b.issued, "no certificate issued");
});
