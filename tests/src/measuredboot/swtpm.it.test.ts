/**
 * Measured boot end to end on a real (software) TPM: each boot scenario's extends go into swtpm with
 * tpm2_pcrextend, the PCRs are read back with tpm2_pcrread, and
 *  - the TPM's values equal what the log writer computed and what our replay of the log computes;
 *  - the policy engine, given only the values a quote by a fresh AK vouches for (verified by fleetd's verifier),
 *    passes the good boots and refuses each bad one for the right reason.
 * swtpm and tpm2-tools run on loopback ports chosen at random; every swtpm is stopped by its own pid.
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { type PcrValues, verifyQuote } from "@fleetd/verify/attest";
import { createAk, createSrk, load, pcrExtend, pcrRead, quote, TcpTransport, TpmClient, withTransients } from "@fleetd/platform/tpmclient";
import { startRawSwtpm, type RawSwtpm } from "../harness/swtpm-raw.js";
import { parseEventLog, parsePcrFile, replayLog } from "@fleetd/verify/eventlog";
import type { EventLogWriter } from "@fleetd/testkit/eventlogWriter";
import { resolveAuthorities, loadProfile } from "@fleetd/platform/trust";
import { evaluateProfile, profileAuthorityRefs } from "@fleetd/verify/policy";
import { bootScenario, type LabKeys, makeLabKeys, REFUSALS, refusalOptions, writeSiteAuthorities } from "@fleetd/testkit/bootScenarios";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");
const work = mkdtempSync(join(tmpdir(), "fleetd-mb-"));
let keys: LabKeys;
let site: string;

before(async () => {
  keys = await makeLabKeys();
  site = writeSiteAuthorities(join(work, "site"), keys);
});
after(() => rmSync(work, { recursive: true, force: true }));

/** A fresh swtpm (PCRs at their reset values), stopped when `fn` returns. */
async function withSwtpm<T>(fn: (tpm: RawSwtpm) => Promise<T>): Promise<T> {
  const tpm = await startRawSwtpm();
  try {
    return await fn(tpm);
  } finally {
    await tpm.stop();
  }
}

function run(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} exited ${r.status}: ${r.stderr}`);
  return r.stdout;
}

const BANK_NAMES: Record<number, string> = { 4: "sha1", 11: "sha256", 12: "sha384", 13: "sha512" };
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/**
 * Send the writer's extends to the TPM (fleetd's TPM client, in order), then quote every PCR of the writer's
 * banks with a fresh AK and a random nonce, verify the quote with fleetd's verifier, and return the values the
 * quote vouches for — the only values the policy engine may trust. Also returns tpm2_pcrread's YAML for the CLI.
 */
async function measure(swtpm: RawSwtpm, w: EventLogWriter): Promise<{ pcrs: PcrValues; yaml: string; serialized: string }> {
  const tpm = new TpmClient(new TcpTransport(swtpm.host, swtpm.port));
  try {
    for (const e of w.extends()) await pcrExtend(tpm, e.pcr, [...e.digests].map(([hashAlg, digest]) => ({ hashAlg, digest })));
    const selection = w.banks.map((hash) => ({ hash, pcrs: Array.from({ length: 24 }, (_, i) => i) }));
    const nonce = new Uint8Array(randomBytes(32));
    const quoted = await withTransients(tpm, async (t) => {
      const srk = t.keep(await createSrk(tpm, "ecc"));
      const ak = t.keep(await load(tpm, srk, await createAk(tpm, srk, "ecc")));
      const q = await quote(tpm, ak, selection, nonce);
      const values = (await pcrRead(tpm, selection)).values;
      const v = verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs: values, expectedExtraData: nonce });
      assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
      return values;
    });
    // swtpm serves one connection at a time: let tpm2-tools in.
    await tpm.close();
    const all = Array.from({ length: 24 }, (_, i) => i).join(",");
    const yaml = run("tpm2_pcrread", ["-T", swtpm.tcti ?? "", w.banks.map((a) => `${BANK_NAMES[a]}:${all}`).join("+")]);
    assert.deepEqual(parsePcrFile(yaml, "tpm2_pcrread"), quoted, "tpm2_pcrread agrees with the quoted values");
    // The same PCRs in tpm2-tools' binary serialized format (what `tpm2_quote -o` writes).
    const serialized = join(work, `pcrs-${swtpm.port}.bin`);
    run("tpm2_pcrread", ["-T", swtpm.tcti ?? "", "-o", serialized, "-F", "serialized", w.banks.map((a) => `${BANK_NAMES[a]}:${all}`).join("+")]);
    return { pcrs: quoted, yaml, serialized };
  } finally {
    await tpm.close();
  }
}

function verdict(profileName: string, w: EventLogWriter, pcrs: PcrValues) {
  const p = loadProfile(profileName);
  return evaluateProfile(p, { log: parseEventLog(w.bytes()), pcrs }, resolveAuthorities(profileAuthorityRefs(p), site));
}

function assertTpmAgrees(name: string, w: EventLogWriter, tpm: PcrValues): void {
  const replay = replayLog(parseEventLog(w.bytes()));
  for (const [alg, expected] of w.expectedPcrs()) {
    for (const [pcr, v] of expected) {
      assert.equal(hex(tpm.get(alg)!.get(pcr)!), hex(v), `${name}: writer vs TPM, ${BANK_NAMES[alg]} PCR ${pcr}`);
      const logged = w.events.filter((e) => e.pcr === pcr && e.extended).every((e) => e.logged);
      if (logged) assert.equal(hex(replay.banks.get(alg)!.pcrs.get(pcr)!), hex(v), `${name}: replay vs TPM, ${BANK_NAMES[alg]} PCR ${pcr}`);
    }
  }
}

test("good boots: TPM, writer and replay agree, and each class passes its profile", async () => {
  for (const profile of ["hookos", "talos", "ubuntu"] as const) {
    await withSwtpm(async (tpm) => {
      const w = bootScenario(profile, keys);
      const { pcrs } = await measure(tpm, w);
      assertTpmAgrees(profile, w, pcrs);
      const v = verdict(profile, w, pcrs);
      assert.equal(v.verdict, "pass", `${profile}: ${JSON.stringify(v.reasons)}`);
    });
  }
});

for (const r of REFUSALS) {
  test(`refused on a real TPM: ${r.name} (${r.profile} → ${r.check})`, async () => {
    await withSwtpm(async (tpm) => {
      const w = bootScenario(r.profile, keys, refusalOptions(r, keys));
      const { pcrs } = await measure(tpm, w);
      assertTpmAgrees(r.name, w, pcrs);
      const v = verdict(r.profile, w, pcrs);
      assert.equal(v.verdict, "fail", r.name);
      assert.ok(v.reasons.some((x) => x.check === r.check), `${r.name}: ${JSON.stringify(v.reasons)}`);
    });
  });
}

test("CLI: verify policy with tpm2_pcrread's YAML or serialized output as --pcrs (exit 0 on pass, 1 on refusal)", async () => {
  await withSwtpm(async (tpm) => {
    const w = bootScenario("hookos", keys);
    const { yaml, serialized } = await measure(tpm, w);
    const log = join(work, "hookos.log");
    const pcrFile = join(work, "hookos.pcrs.yaml");
    writeFileSync(log, w.bytes());
    writeFileSync(pcrFile, yaml);
    const cli = (profile: string, pcrs = pcrFile) =>
      spawnSync(process.execPath, [join(repo, "shared/cli/dist/main.js"), "verify", "policy", "--profile", profile, "--log", log, "--pcrs", pcrs, "--site-authorities", site, "--json"], { encoding: "utf8" });
    const binary = cli("hookos", serialized);
    assert.equal(binary.status, 0, binary.stderr + binary.stdout);
    const ok = cli("hookos");
    assert.equal(ok.status, 0, ok.stderr + ok.stdout);
    const out = JSON.parse(ok.stdout) as { verdict: string; pcrSource: string; profile: string };
    assert.deepEqual([out.verdict, out.pcrSource, out.profile], ["pass", "quote", "hookos"]);
    const no = cli("talos");
    assert.equal(no.status, 1);
    const refused = JSON.parse(no.stdout) as { reasons: { check: string; pcr?: number; event?: number }[] };
    assert.ok(refused.reasons.some((x) => x.check === "authority" && x.pcr === 7 && typeof x.event === "number"));
  });
});
