/**
 * The lab's default scenario: one continuous story on one set of platforms (./world.ts), told as report steps.
 *
 *  - worker-3 (Secure Boot off in its variable store) and worker-2 (a TPM its node does not approve) are switched
 *    on: tink-server enrolls both (auto-enrollment, fleetd's intake), worker-3 is refused by the `hookos` profile
 *    and journalled, worker-2 waits as pending; their disks stay byte-identical;
 *  - worker-1 is switched on through its BMC: intake (its firmware's event log from securityfs, /dev/tpmrm0),
 *    admission (Hardware, provision Workflow), the netboot Job Rufio runs against its BMC, the provision Workflow's
 *    containers (attest, wipe, install the lab OS, write META), fleetd's boot Job into the installed OS, the lab OS:
 *    config fetched once → `active`, the kubelet's bootstrap CSR approved by fleetd's gate, runtime attestation
 *    (`talos`), spire-agent attests with tpm_devid as the LDevID fleetd put in its TPM, a workload SVID; the
 *    node agent's renewal, and SPIRE sees the renewed LDevID;
 *  - worker-1 is retired: decommissioning → SPIRE entry removed and agents banned, the wipe Workflow's containers,
 *    Rufio powers it off, NetBox `offline`;
 *  - the journals read as the story; `fleetd inventory check` is clean.
 */
import { createHash, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { interpretLog, parseEventLog } from "@fleetd/verify/eventlog";
import { tpmDevidAgentId } from "@fleetd/platform/spire";
import { pollValue } from "../harness/ports.js";
import { fleetd } from "../netbox/fixture.js";
import type { Report } from "./report.js";
import type { LabMachine, LabWorld } from "./world.js";

const MIN = 60_000;
const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const fileSha256 = (f: string) => sha256(readFileSync(f));

/** The console of a machine's latest boot (through its BMC or started directly). */
function consoleOf(m: LabMachine): string {
  const b = m.bmc?.follower.current()?.machine ?? m.bmc?.follower.boots().at(-1)?.machine ?? m.boots.at(-1);
  return b?.console() ?? "";
}

/** The evidence requests the gateway recorded for a machine claiming `serial`, and their responses. */
function evidenceOf(w: LabWorld, serial: string): { request: { eventLog: string; claims?: unknown }; status: number; response: Record<string, unknown> }[] {
  const sessions = new Set(
    w.api.requests
      .filter((r) => r.path === "/v1/attest/challenge" && r.status === 200 && (JSON.parse(r.requestBody.toString()) as { claims: { serial: string } }).claims.serial === serial)
      .map((r) => (JSON.parse(r.responseBody.toString()) as { sessionId: string }).sessionId),
  );
  return w.api.requests
    .filter((r) => r.path === "/v1/attest/evidence" && sessions.has((JSON.parse(r.requestBody.toString()) as { sessionId: string }).sessionId))
    .map((r) => ({ request: JSON.parse(r.requestBody.toString()) as { eventLog: string }, status: r.status, response: (() => { try { return JSON.parse(r.responseBody.toString()) as Record<string, unknown>; } catch { return {}; } })() }));
}

const journalText = async (w: LabWorld, node: string) => (await w.journal(node)).map((j) => j.comments).join("\n");

export async function machineStory(report: Report, w: LabWorld): Promise<void> {
  const m1 = w.machines["worker-1"];
  const m2 = w.machines["worker-2"];
  const m3 = w.machines["worker-3"];
  const m4 = w.machines["worker-4"];
  if (!m1 || !m2 || !m3 || !m4) throw new Error("the story needs worker-1 … worker-4");
  const ctx = () => `notes:\n${w.notes.slice(-20).join("\n")}`;
  /** The provision's netboot (boot n of worker-1); the installed OS's boot is the first from the disk after it. */
  let provisionBoot = Number.POSITIVE_INFINITY;
  const installedBoot = () => m1.bmc?.follower.boots().find((b) => b.n > provisionBoot && b.from === "disk");
  const until = <T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>) => pollValue(what, probe, { timeoutMs, intervalMs: 1000, context: ctx });

  await report.step("worker-4, worker-3 (Secure Boot off) and worker-2 (an unapproved TPM) are switched on; tink-server enrolls the two whose HookOS runs into fleetd's intake", async () => {
    await w.powerOn("worker-4");
    await w.powerOn("worker-3");
    await w.powerOn("worker-2");
    return `${m4.mac} netboots a HookOS signed by an unlisted key; ${m3.mac}, ${m2.mac} the signed HookOS (no Hardware names them)`;
  });

  await report.step("worker-4: the firmware refuses its HookOS (signed by a key no db lists); nothing of it runs, the server never hears of it; its disk is byte-identical", async () => {
    const b = m4.boots.at(-1);
    if (!b) throw new Error("worker-4 did not boot");
    await b.waitForConsole(/BdsDxe: failed to load Boot\d+ "UEFI PXEv4[^"]*" from .*: Access Denied/, "the firmware's refusal", 20 * MIN);
    await b.stop();
    const con = b.console();
    if (/EFI stub|\[fleetd-hookos\]|Linux version/.test(con)) throw new Error("something of the refused image ran");
    if (evidenceOf(w, m4.serial).length > 0 || w.api.requests.some((r) => r.requestBody.toString().includes(m4.serial))) throw new Error("worker-4 reached the server");
    if (fileSha256(m4.disk) !== m4.diskSha256) throw new Error("worker-4's disk changed");
    return "OVMF: Access Denied (the image was downloaded, then refused)";
  });

  await report.step("worker-3 is refused by the `hookos` profile for Secure Boot off, journalled; nothing signed; its disk is byte-identical", async () => {
    const before = w.signatures();
    const j = await until("worker-3's refusal in its journal", 20 * MIN, async () => {
      const t = await journalText(w, "worker-3");
      return /policy\.secure-boot/.test(t) ? t : undefined;
    });
    const con = consoleOf(m3);
    if (/EFI stub: UEFI Secure Boot is enabled/.test(con)) throw new Error("worker-3's kernel saw Secure Boot on");
    for (const b of m3.boots) await b.stop();
    if (fileSha256(m3.disk) !== m3.diskSha256) throw new Error("worker-3's disk changed");
    if (w.signatures() !== before) throw new Error("the CA signed something for worker-3");
    return j.split("\n").filter((l) => /secure-boot|refused/i.test(l)).slice(0, 3).join("\n");
  });

  await report.step("worker-2 waits as pending: the server lists its TPM's EKs, nothing signed, its disk untouched", async () => {
    const pending = await until("worker-2's EKs pending", 20 * MIN, async () => {
      const p = await w.store.listPendingEks();
      return [m2.tpm.ek.rsa.binding, m2.tpm.ek.ecc.binding].every((b) => p.some((x) => x.binding === b)) ? p : undefined;
    });
    if (fileSha256(m2.disk) !== m2.diskSha256) throw new Error("worker-2's disk changed");
    return `pending EKs: ${pending.map((p) => `${p.binding.slice(0, 16)}…`).join(", ")} (worker-2 stays switched on, waiting, until the end)`;
  });

  await report.step("worker-1 is switched on through its BMC; intake: its firmware's event log (securityfs) and PCR 7 naming the lab HookOS key pass `hookos`; the MAC is recorded", async () => {
    await w.powerOn("worker-1");
    const ev = await until("worker-1's intake pass", 30 * MIN, async () => evidenceOf(w, m1.serial).find((e) => e.status === 200));
    const con = consoleOf(m1);
    const logSha = /securityfs event log \S+ sha256=([0-9a-f]{64})/.exec(con)?.[1];
    const log = new Uint8Array(Buffer.from(ev.request.eventLog, "base64"));
    if (logSha !== sha256(log)) throw new Error(`the evidence's event log (${sha256(log)}) is not the one securityfs held in the machine (${logSha ?? "not printed"})`);
    const sb = interpretLog(parseEventLog(log), new Set([0, 1, 2, 3, 4, 5, 6, 7])).secureBoot;
    const hookosDb = sha256(new Uint8Array(new X509Certificate(w.kit.certs.hookos).raw));
    const auth = sb?.postSeparatorAuthorities.map((a) => a.cert?.sha256) ?? [];
    if (!sb?.enabled || auth.length !== 1 || auth[0] !== hookosDb) throw new Error(`PCR 7: Secure Boot ${String(sb?.enabled)}, authorities ${JSON.stringify(auth)}`);
    return `event log ${sha256(log).slice(0, 16)}… = securityfs's in the VM; PCR 7 authority = the lab HookOS db certificate; ${(await journalText(w, "worker-1")).split("\n").find((l) => /pass/i.test(l)) ?? ""}`;
  });

  await report.step("admission: Hardware and the provision Workflow; Rufio's netboot Job power-cycles worker-1 through its BMC into HookOS", async () => {
    const j = await until("admission journalled", 15 * MIN, async () => {
      const t = await journalText(w, "worker-1");
      return /admission/i.test(t) ? t : undefined;
    });
    const boot = await until("worker-1's netboot by Rufio", 15 * MIN, async () => m1.bmc?.follower.boots().find((b) => b.n >= 2 && b.from === "network"));
    provisionBoot = boot.n;
    return `${j.split("\n").find((l) => /admission/i.test(l)) ?? ""}\nboot ${boot.n} from ${boot.from} (BMC boot device ${boot.override ?? "-"})`;
  });

  await report.step("the provision Workflow's containers run in the VM: attest (provision), wipe-disk, install-talos (the lab OS image), fleetd-write-meta", async () => {
    const line = await until("the provision Workflow's outcome journalled", 40 * MIN, async () => (await w.journal("worker-1")).find((e) => /provision Workflow \S+ (succeeded|failed|timed out)/.test(e.comments)));
    if (!/succeeded/.test(line.comments)) throw new Error(line.comments);
    if (w.osImage.gets() < 1) throw new Error("the OS image was never fetched");
    return line.comments.split("\n")[0] ?? "";
  });

  await report.step("fleetd's boot Job hands worker-1 to its installed OS: the lab OS (signed by the lab's Talos key) boots from the disk", async () => {
    const boot = await until("worker-1's boot from its disk", 15 * MIN, async () => installedBoot());
    await boot.machine.waitForConsole(/\[fleetd-labos\] config fetched/, "the lab OS's config fetch", 15 * MIN);
    return `boot ${boot.n} from the disk (BMC boot device ${boot.override ?? "-"})`;
  });

  await report.step("the config is fetched once; worker-1 is `active`; the kubelet's bootstrap CSR is approved by fleetd's gate", async () => {
    await until("worker-1 active", 5 * MIN, async () => ((await w.status("worker-1")) === "active" ? true : undefined));
    const fetches = w.api.requests.filter((r) => r.path.startsWith("/talos/config?"));
    if (fetches.map((r) => r.status).join(",") !== "200") throw new Error(`config fetches: ${fetches.map((r) => r.status).join(",")}`);
    const j = await until("the CSR approval journalled", 10 * MIN, async () => (await w.journal("worker-1")).find((e) => /kubelet bootstrap CSR \S+ approved/.test(e.comments)));
    return `${j.comments.split("\n")[0] ?? ""}`;
  });

  await report.step("SPIFFE ID: spire-agent in worker-1 attests with tpm_devid as the LDevID fleetd put in its TPM; the node entry is fleetd's; a workload SVID", async () => {
    const boot = installedBoot();
    if (!boot) throw new Error("no boot of the installed OS");
    const svid = await boot.machine.waitForConsole(/\[fleetd-labos\] svid (spiffe:\/\/\S+) devid leaf sha1=([0-9a-f]{40})/, "the workload's SVID", 20 * MIN);
    const issued = evidenceOf(w, m1.serial).filter((e) => e.status === 200 && e.response["issued"] === "new").at(-1);
    const leaf = new Uint8Array(Buffer.from(String(issued?.response["ldevidCertificate"] ?? ""), "base64"));
    const agentId = tpmDevidAgentId(w.spire.trustDomain, leaf);
    if (createHash("sha1").update(leaf).digest("hex") !== svid.match[2]) throw new Error("the devid leaf in the VM is not the provision pass's LDevID");
    if (!boot.machine.console().includes(agentId)) throw new Error(`spire-agent did not attest as ${agentId}`);
    return `agent ${agentId}\nworkload SVID ${svid.match[1]}`;
  });

  await report.step("renewal: the node agent's LAK-signed quote passes `talos`, the LDevID is renewed for the same key, spire-agent attests again with it", async () => {
    const boot = installedBoot();
    if (!boot) throw new Error("no boot of the installed OS");
    const again = await boot.machine.waitForConsole(/\[fleetd-labos\] svid after renewal (\S+) devid leaf sha1=([0-9a-f]{40})/, "the SVID after the renewal", 20 * MIN);
    const j = (await journalText(w, "worker-1")).split("\n").find((l) => /issued for the same key/.test(l)) ?? "";
    return `${j}\nSVID after renewal ${again.match[1]} (devid leaf ${again.match[2]})`;
  });

  await report.step("worker-1 is retired: SPIRE entry removed, the wipe Workflow's containers (attest, whole disk, TPM), Rufio powers it off, NetBox `offline`", async () => {
    await w.retire("worker-1", "lab: retire worker-1");
    await until("worker-1 offline", 40 * MIN, async () => ((await w.status("worker-1")) === "offline" ? true : undefined));
    await m1.bmc?.follower.waitForOff(5 * MIN);
    const steps = (await w.journal("worker-1")).map((e) => e.comments.split("\n")[0] ?? "").filter((c) => /retire|step/i.test(c));
    return steps.join("\n");
  });

  await report.step("worker-2 still waits, its disk untouched; then switched off", async () => {
    if (fileSha256(m2.disk) !== m2.diskSha256) throw new Error("worker-2's disk changed");
    for (const b of m2.boots) await b.stop();
    return "disk byte-identical";
  });

  await report.step("the journals tell each node's story; `fleetd inventory check` is clean", async () => {
    const out: string[] = [];
    for (const node of ["worker-1", "worker-2", "worker-3", "worker-4"]) {
      out.push(`${node}:`, ...(await w.journal(node)).map((e) => `  ${e.comments.split("\n")[0]?.replace(/^\*\*fleetd\*\* /, "") ?? ""}`));
    }
    const check = fleetd(["inventory", "check", w.nodesFile, "--config", w.f.configFile(w.f.apply.token)], {}, 120_000);
    if (check.code !== 0) throw new Error(`fleetd inventory check: exit ${check.code}\n${check.stdout}${check.stderr}`);
    return out.join("\n");
  });
}
