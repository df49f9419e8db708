/**
 * Measured boot end to end on a real (software) TPM: each boot scenario's extends go into swtpm with
 * tpm2_pcrextend, the PCRs are read back with tpm2_pcrread, and
 *  - the TPM's values equal what the log writer computed and what our replay of the log computes;
 *  - the policy engine, given the TPM's values, passes the good boots and refuses each bad one for the right
 *    reason (the quote over these PCRs is wired in by the attestation flow; here the values come from the TPM).
 * swtpm and tpm2-tools run on loopback ports chosen at random; every swtpm is stopped by its own pid.
 */
import { strict as assert } from "node:assert";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { parseEventLog } from "@fleetd/shared/eventlog/parse";
import { parsePcrFile } from "@fleetd/shared/eventlog/pcrFile";
import { replayLog, type PcrValues } from "@fleetd/shared/eventlog/replay";
import type { EventLogWriter } from "@fleetd/shared/eventlog/writer";
import { resolveAuthorities } from "@fleetd/shared/policy/authorities";
import { evaluateProfile } from "@fleetd/shared/policy/evaluate";
import { loadProfile } from "@fleetd/shared/policy/load";
import { profileAuthorityRefs } from "@fleetd/shared/policy/schema";
import { bootScenario, type LabKeys, makeLabKeys, REFUSALS, refusalOptions, writeSiteAuthorities } from "@fleetd/shared/testing/bootScenarios";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");
const work = mkdtempSync(join(tmpdir(), "fleetd-mb-"));
let keys: LabKeys;
let site: string;

before(async () => {
  keys = await makeLabKeys();
  site = writeSiteAuthorities(join(work, "site"), keys);
});
after(() => rmSync(work, { recursive: true, force: true }));

async function freePortPair(): Promise<number> {
  for (let i = 0; i < 20; i++) {
    const p = await new Promise<number>((res, rej) => {
      const s = createServer();
      s.on("error", rej);
      s.listen(0, "127.0.0.1", () => {
        const port = (s.address() as { port: number }).port;
        s.close(() => res(port));
      });
    });
    if (p >= 65535) continue;
    const second = await new Promise<boolean>((res) => {
      const s = createServer();
      s.on("error", () => res(false));
      s.listen(p + 1, "127.0.0.1", () => s.close(() => res(true)));
    });
    if (second) return p;
  }
  throw new Error("no free loopback port pair");
}

async function waitForPort(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((res) => {
      // destroy(), not end(): swtpm serves one client at a time and keeps a half-closed one open.
      const c = connect(port, "127.0.0.1", () => {
        c.destroy();
        res(true);
      });
      c.on("error", () => res(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`swtpm did not listen on ${port}`);
}

/** A fresh swtpm (PCRs at their reset values), stopped by its pid when `fn` returns. */
async function withSwtpm<T>(fn: (tcti: string) => T): Promise<T> {
  const port = await freePortPair();
  const state = mkdtempSync(join(work, "tpm-"));
  const proc: ChildProcess = spawn(
    "swtpm",
    ["socket", "--tpm2", "--server", `type=tcp,port=${port},bindaddr=127.0.0.1`, "--ctrl", `type=tcp,port=${port + 1},bindaddr=127.0.0.1`, "--flags", "not-need-init,startup-clear", "--tpmstate", `dir=${state}`],
    { stdio: "ignore" },
  );
  try {
    await waitForPort(port);
    return fn(`swtpm:host=127.0.0.1,port=${port}`);
  } finally {
    proc.kill("SIGTERM");
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

/** Send the writer's extends to the TPM (in order, a few per tpm2_pcrextend call) and read PCRs 0-23 back. */
function measure(tcti: string, w: EventLogWriter): { pcrs: PcrValues; yaml: string } {
  const specs = w.extends().map((e) => `${e.pcr}:${[...e.digests].map(([a, d]) => `${BANK_NAMES[a]}=${hex(d)}`).join(",")}`);
  for (let i = 0; i < specs.length; i += 16) run("tpm2_pcrextend", ["-T", tcti, ...specs.slice(i, i + 16)]);
  const all = Array.from({ length: 24 }, (_, i) => i).join(",");
  const yaml = run("tpm2_pcrread", ["-T", tcti, w.banks.map((a) => `${BANK_NAMES[a]}:${all}`).join("+")]);
  return { pcrs: parsePcrFile(yaml, "tpm2_pcrread"), yaml };
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
    await withSwtpm((tcti) => {
      const w = bootScenario(profile, keys);
      const { pcrs } = measure(tcti, w);
      assertTpmAgrees(profile, w, pcrs);
      const v = verdict(profile, w, pcrs);
      assert.equal(v.verdict, "pass", `${profile}: ${JSON.stringify(v.reasons)}`);
    });
  }
});

for (const r of REFUSALS) {
  test(`refused on a real TPM: ${r.name} (${r.profile} → ${r.check})`, async () => {
    await withSwtpm((tcti) => {
      const w = bootScenario(r.profile, keys, refusalOptions(r, keys));
      const { pcrs } = measure(tcti, w);
      assertTpmAgrees(r.name, w, pcrs);
      const v = verdict(r.profile, w, pcrs);
      assert.equal(v.verdict, "fail", r.name);
      assert.ok(v.reasons.some((x) => x.check === r.check), `${r.name}: ${JSON.stringify(v.reasons)}`);
    });
  });
}

test("CLI: verify policy with tpm2_pcrread's output as --pcrs (exit 0 on pass, 1 on refusal)", async () => {
  await withSwtpm((tcti) => {
    const w = bootScenario("hookos", keys);
    const { yaml } = measure(tcti, w);
    const log = join(work, "hookos.log");
    const pcrFile = join(work, "hookos.pcrs.yaml");
    writeFileSync(log, w.bytes());
    writeFileSync(pcrFile, yaml);
    const cli = (profile: string) =>
      spawnSync(process.execPath, [join(repo, "shared/dist/cli/main.js"), "verify", "policy", "--profile", profile, "--log", log, "--pcrs", pcrFile, "--site-authorities", site, "--json"], { encoding: "utf8" });
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
