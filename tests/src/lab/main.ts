/**
 * The lab — fleetd's main job. It grows with the lifecycle. Part 1: a software TPM manufactured with EK
 * certificates, fleetd's MakeCredential answered by the TPM's ActivateCredential, a quote bound to a protocol
 * session verified by fleetd, a TPM-resident signing key certified by the AK and checked against the LDevID
 * rules, and one tampered input of each kind refused. Part 2 (skipped with --tpm-only): the machines — one
 * continuous story on one set of platforms with real firmware and real boots (world.ts, story.ts).
 *   node tests/dist/lab/main.js [--tpm-only] [--no-renewal-wait]
 * --no-renewal-wait: the suite's shortened story (lab.it): worker-1's LDevID renewal is not waited for.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AK_POLICY, Checks, checkKeyAttributes, ctEqual, hex, LDEVID_POLICY, makeCredential, readPublicArea, tpm2ToolsCredentialFile, verifyCertify, verifyQuote, parseTpm2ToolsPcrFile, objectName, type TPMT_PUBLIC, ekBindingFromTpmPublic, identifyEkTemplate, readCertificate, verifyEkCertificate } from "@fleetd/verify";
import { claimsHash, quoteExtraData } from "@fleetd/platform/protocol";
import { loadCaStore } from "@fleetd/platform/trust";
import { startSwtpm, type SwtpmTcp } from "../harness/swtpm.js";

const report = new Report("fleetd lab: TPM identity and evidence, end to end on a software TPM");
let tpm: SwtpmTcp | undefined;

try {
  let dir = "";
  await report.step("manufacture a software TPM (swtpm) with EK certificates from a local CA", async () => {
    tpm = await startSwtpm({ flushAfterEachCall: true });
    dir = tpm.mkdir("lab");
    return `swtpm on 127.0.0.1:${tpm.port}; RSA EK ${tpm.ek.rsa.bits} bits (NV 0x${tpm.ek.rsa.certIndex.toString(16)}), ECC EK ${tpm.ek.ecc.curve} (NV 0x${tpm.ek.ecc.certIndex.toString(16)})`;
  });
  if (!tpm) throw new Error("no TPM");
  const t = tpm;
  const f = (n: string) => join(dir, n);

  let certBinding = "";
  await report.step("read the RSA EK certificate from NV, chain it to the manufacturer CA, compute the EK binding", async () => {
    await t.tpm2("nvread", [`0x${t.ek.rsa.certIndex.toString(16)}`, "-C", "o", "-o", f("ek.crt")], { cwd: dir });
    const cert = readCertificate(new Uint8Array(readFileSync(f("ek.crt")))).cert;
    const v = verifyEkCertificate(cert, loadCaStore(t.caDir));
    if (v.verdict !== "pass") throw new Error(v.reasons.map((r) => `${r.check}: ${r.detail}`).join("; "));
    certBinding = v.binding ?? "";
    return `chain: ${v.chain.map((l) => l.subject || "(empty subject)").join(" → ")}\nTPM ${v.tpm.manufacturerId ?? v.tpm.manufacturer ?? "?"} ${v.tpm.model ?? ""} ${v.tpm.version ?? ""}; EK binding ${certBinding}`;
  });
  let ek: TPMT_PUBLIC | undefined;
  let ak: TPMT_PUBLIC | undefined;
  let akName: Uint8Array = new Uint8Array();
  await report.step("create the RSA EK and a restricted signing AK; check the AK's attributes", async () => {
    await t.tpm2("createek", ["-G", "rsa", "-c", f("ek.ctx"), "-u", f("ek.pub")], { cwd: dir });
    await t.tpm2("createak", ["-C", f("ek.ctx"), "-c", f("ak.ctx"), "-G", "rsa", "-g", "sha256", "-s", "rsassa", "-u", f("ak.pub"), "-n", f("ak.name")], { cwd: dir });
    ek = readPublicArea(new Uint8Array(readFileSync(f("ek.pub")))).pub;
    const akFile = readPublicArea(new Uint8Array(readFileSync(f("ak.pub"))));
    ak = akFile.pub;
    akName = objectName(akFile.tpmtBytes);
    const c = new Checks();
    if (!checkKeyAttributes(c, "ak", ak, AK_POLICY)) throw new Error(c.reasons.map((r) => r.detail).join("; "));
    if (!ctEqual(akName, new Uint8Array(readFileSync(f("ak.name"))))) throw new Error("AK Name computed by fleetd differs from the TPM's");
    if (ekBindingFromTpmPublic(ek) !== certBinding) throw new Error("the EK the TPM derives is not the certified EK");
    const tmpl = identifyEkTemplate(ek);
    if (!tmpl.ok) throw new Error(`EK public area differs from template ${tmpl.template.id}: ${tmpl.detail}`);
    return `EK binding of the TPM's EK equals the certificate's; EK template ${tmpl.template.id}\nAK Name ${hex(akName)} (fleetd's computation equals the TPM's)`;
  });

  await report.step("credential activation: fleetd's MakeCredential, the TPM's ActivateCredential", async () => {
    if (!ek) throw new Error("no EK");
    const secret = new Uint8Array(randomBytes(32));
    writeFileSync(f("cred.out"), tpm2ToolsCredentialFile(makeCredential(ek, akName, secret)));
    await t.tpm2("startauthsession", ["--policy-session", "-S", f("s.ctx")], { cwd: dir, flush: false });
    await t.tpm2("policysecret", ["-S", f("s.ctx"), "-c", "e"], { cwd: dir, flush: false });
    await t.tpm2("activatecredential", ["-c", f("ak.ctx"), "-C", f("ek.ctx"), "-i", f("cred.out"), "-o", f("secret.out"), "-P", `session:${f("s.ctx")}`], { cwd: dir });
    const back = new Uint8Array(readFileSync(f("secret.out")));
    if (!ctEqual(back, secret)) throw new Error("the TPM recovered a different secret");
    return `32-byte secret recovered by the TPM (${hex(secret).slice(0, 16)}…): the AK lives in the TPM that holds this EK`;
  });

  const nonce = new Uint8Array(randomBytes(32));
  const sessionId = `lab-${hex(randomBytes(8))}`;
  const claims = claimsHash({ serial: "LAB-0001", uuid: "00000000-0000-0000-0000-000000000001", macs: ["02:00:00:00:00:01"], mode: "attest", workflow: "lab" });
  const extraData = quoteExtraData(nonce, sessionId, claims);
  let quoteInput: Parameters<typeof verifyQuote>[0] | undefined;
  await report.step("quote PCRs 0,4,7 (sha256) bound to the session and claims; verify with fleetd", async () => {
    for (const p of [0, 4, 7]) await t.tpm2("pcrextend", [`${p}:sha256=${hex(randomBytes(32))}`]);
    await t.tpm2("quote", ["-c", f("ak.ctx"), "-l", "sha256:0,4,7", "-q", hex(extraData), "-g", "sha256", "-m", f("q.msg"), "-s", f("q.sig"), "-o", f("q.pcrs"), "-F", "serialized"], { cwd: dir });
    if (!ak) throw new Error("no AK");
    const pcrs = parseTpm2ToolsPcrFile(new Uint8Array(readFileSync(f("q.pcrs"))), "serialized");
    quoteInput = { akPublic: ak, quote: new Uint8Array(readFileSync(f("q.msg"))), signature: new Uint8Array(readFileSync(f("q.sig"))), pcrs: pcrs.values, expectedExtraData: extraData };
    const v = verifyQuote(quoteInput);
    if (v.verdict !== "pass") throw new Error(JSON.stringify(v.reasons));
    return `pass: signature, magic, type, extraData = SHA-256("fleetd/quote/v1"‖nonce‖session‖claims), selection, pcrDigest`;
  });

  const flip = (b: Uint8Array, i: number) => {
    const o = b.slice();
    o[i] = (o[i] ?? 0) ^ 1;
    return o;
  };
  await report.refusal("a replayed quote (another session's nonce) is refused", /quote\.extraData/, () => {
    if (!quoteInput) return [];
    const v = verifyQuote({ ...quoteInput, expectedExtraData: quoteExtraData(new Uint8Array(randomBytes(32)), sessionId, claims) });
    return v.reasons.map((r) => `${r.check}: ${r.detail}`);
  });
  await report.refusal("claims changed after the challenge (another serial) are refused", /quote\.extraData/, () => {
    if (!quoteInput) return [];
    const other = claimsHash({ serial: "LAB-0002", uuid: "00000000-0000-0000-0000-000000000001", macs: ["02:00:00:00:00:01"], mode: "attest", workflow: "lab" });
    return verifyQuote({ ...quoteInput, expectedExtraData: quoteExtraData(nonce, sessionId, other) }).reasons.map((r) => `${r.check}: ${r.detail}`);
  });
  await report.refusal("one flipped byte in the quote is refused", /quote\.(signature|pcrDigest)/, () =>
    quoteInput ? verifyQuote({ ...quoteInput, quote: flip(quoteInput.quote, quoteInput.quote.length - 1) }).reasons.map((r) => `${r.check}: ${r.detail}`) : [],
  );
  await report.refusal("a PCR value that the quote does not vouch for is refused", /quote\.pcrDigest/, () => {
    if (!quoteInput) return [];
    const pcrs = new Map([...quoteInput.pcrs].map(([b, m]) => [b, new Map([...m].map(([i, v]) => [i, i === 7 ? flip(v, 0) : v]))] as const));
    return verifyQuote({ ...quoteInput, pcrs }).reasons.map((r) => `${r.check}: ${r.detail}`);
  });

  await report.step("certify a TPM-resident signing key (LDevID shape) with the AK; check LDevID rules", async () => {
    await t.tpm2("createprimary", ["-C", "o", "-G", "ecc", "-c", f("srk.ctx")], { cwd: dir, flush: false });
    await t.tpm2("create", ["-C", f("srk.ctx"), "-G", "ecc:ecdsa-sha256", "-a", "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign", "-u", f("ldevid.pub"), "-r", f("ldevid.priv"), "-c", f("ldevid.ctx")], { cwd: dir });
    await t.tpm2("certify", ["-c", f("ldevid.ctx"), "-C", f("ak.ctx"), "-g", "sha256", "-o", f("c.msg"), "-s", f("c.sig")], { cwd: dir });
    if (!ak) throw new Error("no AK");
    const obj = readPublicArea(new Uint8Array(readFileSync(f("ldevid.pub"))));
    const c = new Checks();
    if (!checkKeyAttributes(c, "ldevid", obj.pub, LDEVID_POLICY)) throw new Error(c.reasons.map((r) => r.detail).join("; "));
    // tpm2-tools 5.4's tpm2_certify always sends qualifyingData 00ff55aa; fleetd's own TPM client binds it to the session.
    const v = verifyCertify({ akPublic: ak, objectPublic: obj.tpmtBytes, attest: new Uint8Array(readFileSync(f("c.msg"))), signature: new Uint8Array(readFileSync(f("c.sig"))), expectedExtraData: Uint8Array.of(0x00, 0xff, 0x55, 0xaa) });
    if (v.verdict !== "pass") throw new Error(JSON.stringify(v.reasons));
    return `pass: certified Name ${hex(objectName(obj.tpmtBytes)).slice(0, 20)}… is the LDevID's; attributes meet SPIRE tpm_devid's rules`;
  });
  await report.refusal("a quote offered as a certify is refused", /certify\.(type|name|extraData)/, () => {
    if (!quoteInput || !ak) return [];
    const obj = readPublicArea(new Uint8Array(readFileSync(f("ldevid.pub"))));
    return verifyCertify({ akPublic: ak, objectPublic: obj.tpmtBytes, attest: quoteInput.quote, signature: quoteInput.signature, expectedExtraData: extraData }).reasons.map((r) => `${r.check}: ${r.detail}`);
  });
} finally {
  await tpm?.stop();
}
const noRenewalWait = process.argv.includes("--no-renewal-wait");
if (!process.argv.includes("--tpm-only")) {
  process.stdout.write("\nPart 2: the machines — one continuous story on one set of platforms, real firmware, real boots\n");
  let world: LabWorld | undefined;
  try {
    await report.step("start the platforms and the lab machines (NetBox, Kubernetes + Tinkerbell + Rufio, SPIRE, the CA, the attestation server, netbox-script, the boot network, QEMU machines with swtpm)", async () => {
      // The shortened story does not wait for the renewal: a day's LDevIDs keep it from coming due on a slow run
      // before spire-agent attested with the provision pass's LDevID (the SPIFFE step checks exactly that one).
      world = await startLabWorld({ progress: (l) => process.stdout.write(`      · ${l}\n`), ...(noRenewalWait ? { ldevidLifetimeDays: 1 } : {}) });
      return `machines: ${Object.values(world.machines).map((m) => `${m.node} (${m.kind}, ${m.mac})`).join(", ")}`;
    });
    if (world) await machineStory(report, world, { renewal: !noRenewalWait });
  } finally {
    if (world?.notes.length) process.stdout.write(`\nnoticed on the way:\n${world.notes.join("\n")}\n`);
    await world?.stop();
  }
}
process.exitCode = report.finish() ? 0 : 1;

import { Report } from "./report.js";
import { startLabWorld, type LabWorld } from "./world.js";
import { machineStory } from "./story.js";
