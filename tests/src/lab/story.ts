/**
 * The lab's default scenario: one continuous story on one set of platforms (./world.ts), told as report steps.
 *
 *  - worker-4 (a HookOS signed by a key no db lists) and worker-5 (an unsigned HookOS) are refused by their
 *    firmware; worker-3 (Secure Boot off in its variable store) and worker-2 (a TPM its node does not approve) are
 *    switched on: tink-server enrolls both (auto-enrollment, fleetd's intake), worker-3 is refused by the `hookos`
 *    profile and journalled, worker-2 waits as pending; every bad machine's disk stays byte-identical;
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
import { createHash, randomBytes, X509Certificate } from "node:crypto";
import { closeSync, mkdirSync, openSync, readFileSync, readSync, statSync, writeFileSync } from "node:fs";
import { EV, interpretLog, parseEventLog } from "@fleetd/verify/eventlog";
import { KubeBootstrapTokens, KUBELET_CLIENT_SIGNER } from "@fleetd/platform/kube";
import { certificatesFromPem } from "@fleetd/platform/pki";
import { nodeEntryId, tpmDevidAgentId } from "@fleetd/platform/spire";
import { APPROVED_REASON, DENIED_REASON } from "@fleetd/talos-config-server/csrGate";
import { join } from "node:path";
import { pollValue } from "../harness/ports.js";
import { runProcess } from "../harness/process.js";
import { fleetd } from "../netbox/fixture.js";
import { cnOf, nodeEntries, sha1 } from "../spire/syncRig.js";
import { authenticodeSha256 } from "../vm/authenticode.js";
import { bootstrapResultOf, inputsFromTalosConfig } from "../vm/kubeletBootstrap.js";
import type { Report } from "./report.js";
import { fileSha256, type LabMachine, type LabWorld } from "./world.js";

const MIN = 60_000;
const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
/** `length` bytes of a file from `offset` (a disk image the machine may be using: read, never written). */
function readRange(f: string, offset: number, length: number): Buffer {
  const fd = openSync(f, "r");
  try {
    const b = Buffer.alloc(length);
    readSync(fd, b, 0, length, offset);
    return b;
  } finally {
    closeSync(fd);
  }
}

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

/** How much of the story to tell: the test suite shortens it (never fakes it). */
export interface StoryOptions {
  /**
   * Wait for worker-1's LDevID renewal (two thirds of its lifetime after the provision pass issued it) and check
   * SPIRE sees the renewed LDevID. Default true; the suite's end-to-end test skips the wait (the renewal itself,
   * with a LAK-signed quote judged by `talos` and spire-agent attesting again, is spire/renewAgent.it's), and says so.
   */
  renewal?: boolean;
}

export async function machineStory(report: Report, w: LabWorld, o: StoryOptions = {}): Promise<void> {
  const m1 = w.machines["worker-1"];
  const m2 = w.machines["worker-2"];
  const m3 = w.machines["worker-3"];
  const m4 = w.machines["worker-4"];
  const m5 = w.machines["worker-5"];
  if (!m1 || !m2 || !m3 || !m4 || !m5) throw new Error("the story needs worker-1 … worker-5");
  const ctx = () => `notes:\n${w.notes.slice(-20).join("\n")}`;
  /** The provision's netboot (boot n of worker-1); the installed OS's boot is the first from the disk after it. */
  let provisionBoot = Number.POSITIVE_INFINITY;
  const installedBoot = () => m1.bmc?.follower.boots().find((b) => b.n > provisionBoot && b.from === "disk");
  const until = <T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>) => pollValue(what, probe, { timeoutMs, intervalMs: 1000, context: ctx });
  const der = (pem: string) => sha256(new Uint8Array(new X509Certificate(pem).raw));
  const td = w.spire.trustDomain;
  const spire = w.spireClient;
  const q = (x: string) => x.replaceAll(".", "\\.");
  /** What the provision pass issued worker-1 (set by the SPIFFE step). */
  let issued: { leaf: Uint8Array; caDer: Uint8Array } | undefined;

  await report.step("worker-5 (an unsigned HookOS), worker-4 (a HookOS signed by an unlisted key), worker-3 (Secure Boot off) and worker-2 (an unapproved TPM) are switched on; tink-server enrolls the two whose HookOS runs into fleetd's intake", async () => {
    for (const node of ["worker-5", "worker-4", "worker-3", "worker-2"]) await w.powerOn(node);
    return `${m5.mac} netboots an unsigned HookOS, ${m4.mac} one signed by a key no db lists; ${m3.mac}, ${m2.mac} the signed HookOS (no Hardware names them)`;
  });

  for (const [m, what] of [[m4, "signed by a key no db lists"], [m5, "not signed at all"]] as const) {
    await report.step(`${m.node}: the firmware refuses its HookOS (${what}); nothing of it runs, the server never hears of it; its disk is byte-identical`, async () => {
      const b = m.boots.at(-1);
      if (!b) throw new Error(`${m.node} did not boot`);
      await b.waitForConsole(/BdsDxe: failed to load Boot\d+ "UEFI PXEv4[^"]*" from .*: Access Denied/, "the firmware's refusal", 20 * MIN);
      await b.stop();
      const con = b.console();
      if (!/NBP file downloaded successfully/.test(con)) throw new Error("the image was never downloaded");
      if (/EFI stub|\[fleetd-hookos\]|Linux version/.test(con)) throw new Error("something of the refused image ran");
      if (evidenceOf(w, m.serial).length > 0 || w.api.requests.some((r) => r.requestBody.toString().includes(m.serial))) throw new Error(`${m.node} reached the server`);
      if (fileSha256(m.disk) !== m.diskSha256) throw new Error(`${m.node}'s disk changed`);
      return "OVMF: NBP file downloaded, then Access Denied";
    });
  }

  await report.step("worker-3 is refused by the `hookos` profile for Secure Boot off, journalled; nothing signed; its disk is byte-identical", async () => {
    const before = w.signatures();
    const j = await until("worker-3's refusal in its journal", 20 * MIN, async () => {
      const t = await journalText(w, "worker-3");
      return /policy\.secure-boot/.test(t) ? t : undefined;
    });
    const refused = evidenceOf(w, m3.serial).find((e) => e.status !== 200);
    if (!refused || !JSON.stringify(refused.response).includes("policy.secure-boot")) throw new Error(`the server's answer does not name the Secure Boot check: ${JSON.stringify(refused?.response)}`);
    // Reading the refusal back to the event that failed (shared/cli/docs/read-a-refusal.md): the event log the
    // machine sent, kept beside the lab's files, judged again by `fleetd verify policy` with the lab's authorities.
    const logFile = join(w.dir, "evidence", "worker-3-refused.eventlog");
    mkdirSync(join(w.dir, "evidence"), { recursive: true });
    writeFileSync(logFile, Buffer.from(refused.request.eventLog, "base64"));
    const again = fleetd(["verify", "policy", "--profile", "hookos", "--log", logFile, "--site-authorities", w.kit.siteAuthoritiesDir], {}, 60_000);
    const line = again.stdout.split("\n").find((l) => l.includes("secure-boot"));
    if (again.code !== 1 || !line) throw new Error(`fleetd verify policy on worker-3's event log: exit ${again.code}\n${again.stdout}${again.stderr}`);
    const con = consoleOf(m3);
    if (/EFI stub: UEFI Secure Boot is enabled/.test(con)) throw new Error("worker-3's kernel saw Secure Boot on");
    for (const b of m3.boots) await b.stop();
    if (fileSha256(m3.disk) !== m3.diskSha256) throw new Error("worker-3's disk changed");
    if (w.signatures() !== before) throw new Error("the CA signed something for worker-3");
    return `${j.split("\n").filter((l) => /secure-boot|refused/i.test(l)).slice(0, 3).join("\n")}\nfleetd verify policy --profile hookos --log ${logFile}: ${line.trim()}`;
  });

  await report.step("worker-2 waits as pending: the server lists its TPM's EKs, nothing signed, its disk untouched", async () => {
    const pending = await until("worker-2's EKs pending", 20 * MIN, async () => {
      const p = await w.store.listPendingEks();
      return [m2.tpm.ek.rsa.binding, m2.tpm.ek.ecc.binding].every((b) => p.some((x) => x.binding === b)) ? p : undefined;
    });
    if (fileSha256(m2.disk) !== m2.diskSha256) throw new Error("worker-2's disk changed");
    const mine = pending.filter((p) => p.binding === m2.tpm.ek.rsa.binding || p.binding === m2.tpm.ek.ecc.binding);
    if (mine.some((p) => p.serial !== m2.serial)) throw new Error(`the pending list's claimed serials: ${mine.map((p) => p.serial).join(", ")}`);
    // What an operator runs: `fleetd pending` over the attestation server's state.
    const cli = fleetd(["pending", "--config", w.files.stateConfig], {}, 60_000);
    for (const p of mine) if (cli.code !== 0 || !new RegExp(`^${p.binding}\\s+${m2.serial}\\s`, "m").test(cli.stdout)) throw new Error(`fleetd pending: exit ${cli.code}\n${cli.stdout}${cli.stderr}`);
    // The claimed serial is the machine's unproven word: nothing is journalled on worker-2 for it (anything on the
    // boot network could write into any node's journal); the pending list is where an operator finds it.
    return `pending (\`fleetd pending\`): ${mine.map((p) => `EK ${p.binding.slice(0, 16)}… claiming serial ${p.serial}`).join(", ")}; worker-2 stays switched on, waiting, until the end`;
  });

  await report.step("worker-1 is switched on through its BMC; intake: its firmware's event log (securityfs) passes `hookos`: Secure Boot on with the lab's PK, KEK and db, PCR 7 naming the lab HookOS key, PCR 4 the served UKI; the MAC is recorded", async () => {
    const before = w.signatures();
    await w.powerOn("worker-1");
    const ev = await until("worker-1's intake pass", 30 * MIN, async () => evidenceOf(w, m1.serial).find((e) => e.status === 200));
    const con = consoleOf(m1);
    if (!/EFI stub: UEFI Secure Boot is enabled/.test(con)) throw new Error("the kernel did not see Secure Boot on");
    const logSha = /securityfs event log \S+ sha256=([0-9a-f]{64})/.exec(con)?.[1];
    const logBytes = new Uint8Array(Buffer.from(ev.request.eventLog, "base64"));
    if (logSha !== sha256(logBytes)) throw new Error(`the evidence's event log (${sha256(logBytes)}) is not the one securityfs held in the machine (${logSha ?? "not printed"})`);
    const log = parseEventLog(logBytes);
    const sb = interpretLog(log, new Set([0, 1, 2, 3, 4, 5, 6, 7])).secureBoot;
    const same = (a: (string | undefined)[] | undefined, b: string[]) => JSON.stringify([...(a ?? [])].sort()) === JSON.stringify([...b].sort());
    if (!sb?.enabled) throw new Error("PCR 7: SecureBoot is not 1");
    if (!same(sb.pk?.certs.map((c) => c.sha256), [der(w.kit.certs.pk)]) || !same(sb.kek?.certs.map((c) => c.sha256), [der(w.kit.certs.kek)])) throw new Error("PCR 7: PK or KEK is not the lab's");
    if (!same(sb.db?.certs.map((c) => c.sha256), [der(w.kit.certs.hookos), der(w.kit.certs.talos)])) throw new Error("PCR 7: db is not the lab's HookOS and Talos keys");
    const auth = sb.postSeparatorAuthorities.map((a) => a.cert?.sha256);
    if (!same(auth, [der(w.kit.certs.hookos)])) throw new Error(`PCR 7: authorities ${JSON.stringify(auth)}, not the lab HookOS db certificate`);
    const apps = log.events.filter((e) => e.pcr === 4 && e.type === EV.EFI_BOOT_SERVICES_APPLICATION).map((e) => e.digests.map((d) => Buffer.from(d.digest).toString("hex")));
    const served = authenticodeSha256(new Uint8Array(readFileSync(w.kit.image("hookos"))));
    if (apps.length !== 1 || !apps[0]?.includes(served)) throw new Error(`PCR 4's boot applications ${JSON.stringify(apps)} are not the served HookOS UKI (Authenticode ${served})`);
    if (w.signatures() - before !== 2) throw new Error(`the CA made ${w.signatures() - before} signatures at intake (LDevID and LAK: 2)`);
    if (fileSha256(m1.disk) !== m1.diskSha256) throw new Error("intake touched worker-1's disk");
    return `event log ${sha256(logBytes).slice(0, 16)}… = securityfs's in the VM; PCR 7 authority = the lab HookOS db certificate; PCR 4 = the served UKI's Authenticode ${served.slice(0, 16)}…\n${(await journalText(w, "worker-1")).split("\n").find((l) => /pass/i.test(l)) ?? ""}`;
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
    // On the disk: the lab OS image's GPT where the install wrote it (a provision's wipe only removes signatures).
    const gptOf = (f: string) => readRange(f, 512, 512);
    if (!gptOf(m1.disk).equals(gptOf(w.kit.labos.disk))) throw new Error("worker-1's disk does not hold the lab OS image's GPT header");
    // The HookOS's memory while the containers ran (its /init samples /proc/meminfo every 20 s): the 1 GiB guest
    // holds the images on a tmpfs.
    const provision = m1.bmc?.follower.boots().find((b) => b.n === provisionBoot);
    const mem = [...(provision?.machine.console() ?? "").matchAll(/memory: MemTotal: (\d+) MiB MemAvailable: (\d+) MiB Shmem: (\d+) MiB/g)].map((x) => ({ total: Number(x[1]), available: Number(x[2]), shmem: Number(x[3]) }));
    const memLine = mem.length > 0 ? `HookOS memory (${mem.length} samples): MemAvailable down to ${Math.min(...mem.map((x) => x.available))} of ${mem[0]?.total ?? "?"} MiB, Shmem (the image tmpfs) up to ${Math.max(...mem.map((x) => x.shmem))} MiB` : "HookOS memory: no samples on the console";
    return `${line.comments.split("\n")[0] ?? ""}\ndisk: the lab OS image's GPT header at LBA 1\n${memLine}`;
  });

  await report.step("fleetd's boot Job hands worker-1 to its installed OS: the lab OS (signed by the lab's Talos key) boots from the disk; META 0x0b holds the install code", async () => {
    const boot = await until("worker-1's boot from its disk", 15 * MIN, async () => installedBoot());
    await boot.machine.waitForConsole(/\[fleetd-labos\] config fetched/, "the lab OS's config fetch", 15 * MIN);
    const con = boot.machine.console();
    if (!/EFI stub: UEFI Secure Boot is enabled/.test(con)) throw new Error("the firmware did not boot the lab OS with Secure Boot on");
    if (!/\[fleetd-labos\] META 0x0b: an install code of 64 characters/.test(con)) throw new Error("the lab OS did not read an install code from META 0x0b");
    return `boot ${boot.n} from the disk (BMC boot device ${boot.override ?? "-"})`;
  });

  await report.step("the config is fetched once and validated by Talos's machinery; worker-1 is `active`; the kubelet's bootstrap CSR with the config's per-node token is approved by fleetd's gate", async () => {
    await until("worker-1 active", 5 * MIN, async () => ((await w.status("worker-1")) === "active" ? true : undefined));
    const fetches = w.api.requests.filter((r) => r.path.startsWith("/talos/config?"));
    if (fetches.map((r) => r.status).join(",") !== "200") throw new Error(`config fetches: ${fetches.map((r) => r.status).join(",")}`);
    const boot = installedBoot();
    if (!boot) throw new Error("no boot of the installed OS");
    const validated = await boot.machine.waitForConsole(/\[fleetd-labos\] config validated exit=(\d+) /, "Talos's machinery on the fetched config", 5 * MIN);
    if (validated.match[1] !== "0") throw new Error(`Talos's machinery refused the fetched config (exit ${validated.match[1] ?? "?"})`);
    const j = await until("the CSR approval journalled", 10 * MIN, async () => (await w.journal("worker-1")).find((e) => /kubelet bootstrap CSR \S+ approved/.test(e.comments)));
    await boot.machine.waitForConsole(/kubelet bootstrap: authenticated with the issued certificate as /, "the lab OS's SelfSubjectReview with its kubelet certificate", 5 * MIN);
    const con = boot.machine.console();
    const served = inputsFromTalosConfig((fetches[0] as { responseBody: Buffer }).responseBody.toString("utf8"));
    const [tokenId, tokenSecret] = served.token.split(".") as [string, string];
    if (con.includes(tokenSecret)) throw new Error("the bootstrap token's secret is on the console");
    const csrName = new RegExp(`\\[fleetd-labos\\] kubelet bootstrap: CSR (csr-[a-z0-9]+) created, requester system:bootstrap:${tokenId}`).exec(con)?.[1];
    if (!csrName) throw new Error(`the lab OS created no CSR with the config's token ${tokenId}`);
    const csr = await w.kube.certificates.readCertificateSigningRequest({ name: csrName });
    const approvals = csr.status?.conditions?.filter((c) => c.type === "Approved") ?? [];
    if (csr.spec.username !== `system:bootstrap:${tokenId}` || csr.spec.signerName !== KUBELET_CLIENT_SIGNER) throw new Error(`CSR ${csrName}: requester ${csr.spec.username}, signer ${csr.spec.signerName}`);
    if (approvals.length !== 1 || approvals[0]?.reason !== APPROVED_REASON) throw new Error(`CSR ${csrName}: approvals ${JSON.stringify(approvals)}`);
    const cert = csr.status?.certificate ? new X509Certificate(Buffer.from(csr.status.certificate, "base64")) : undefined;
    if (cert?.subject !== "O=system:nodes\nCN=system:node:worker-1") throw new Error(`the issued certificate's subject: ${cert?.subject ?? "none"}`);
    if (!con.includes("kubelet bootstrap: authenticated with the issued certificate as system:node:worker-1")) throw new Error("the API server did not authenticate the lab OS as system:node:worker-1");
    if (!new RegExp(`kubelet bootstrap CSR ${csrName} approved: client certificate for system:node:worker-1 \\(bootstrap token ${tokenId}, now spent\\)`).test(j.comments)) throw new Error(`journal: ${j.comments}`);
    return `${j.comments.split("\n")[0] ?? ""}`;
  });

  await report.refusal("another node's bootstrap token asking for system:node:worker-1 (worker-2's token, as its provision would render one, in worker-1's config) is denied by fleetd's gate; no certificate", /csr\.subject\.cn/, async () => {
    const fetched = w.api.requests.find((r) => r.path.startsWith("/talos/config?") && r.status === 200);
    if (!fetched) return [];
    const text = fetched.responseBody.toString("utf8");
    const served = inputsFromTalosConfig(text);
    const other = { id: randomBytes(3).toString("hex"), secret: randomBytes(8).toString("hex") };
    const expiry = new Date(Date.now() + 3600_000);
    await new KubeBootstrapTokens(w.kube).create("worker-2", other, expiry);
    await w.store.setBootstrapToken({ deviceId: await w.deviceId("worker-2"), name: "worker-2" }, other.id, expiry.getTime());
    const config = join(w.dir, "worker-1-with-worker-2-token.yaml");
    writeFileSync(config, text.replace(served.token, `${other.id}.${other.secret}`).replace(served.endpoint, w.env.cp.server), { mode: 0o600 });
    const r = await runProcess(process.execPath, [w.kubeletBundle, "--config", config, "--timeout-seconds", "120"], { timeoutMs: 180_000 });
    const res = bootstrapResultOf(r.stdout.toString());
    if (r.code !== 2 || res?.outcome !== "denied" || res.reason !== DENIED_REASON || res.requester !== `system:bootstrap:${other.id}`) throw new Error(`not denied: exit ${String(r.code)} ${r.stdout.toString()}${r.stderr.toString()}`);
    if ((await w.kube.certificates.readCertificateSigningRequest({ name: res.csr ?? "" })).status?.certificate !== undefined) throw new Error("the denied CSR got a certificate");
    return [res.message ?? ""];
  });

  await report.step("SPIFFE ID: spire-agent in worker-1 attests with tpm_devid as the LDevID fleetd put in its TPM; the node entry is fleetd's sync's; a workload SVID under it", async () => {
    const boot = installedBoot();
    if (!boot) throw new Error("no boot of the installed OS");
    const svid = await boot.machine.waitForConsole(/\[fleetd-labos\] svid (spiffe:\/\/\S+) devid leaf sha1=([0-9a-f]{40})/, "the workload's SVID", 20 * MIN);
    const pass = evidenceOf(w, m1.serial).filter((e) => e.status === 200 && e.response["issued"] === "new").at(-1);
    const leaf = new Uint8Array(Buffer.from(String(pass?.response["ldevidCertificate"] ?? ""), "base64"));
    const [caDer] = certificatesFromPem(String(pass?.response["caBundle"] ?? ""), "the provision pass's CA bundle");
    if (!caDer) throw new Error("no CA bundle in the provision pass");
    issued = { leaf, caDer };
    const agentId = tpmDevidAgentId(td, leaf);
    if (sha1(leaf) !== svid.match[2]) throw new Error("the devid leaf in the VM is not the provision pass's LDevID");
    if (!new RegExp(`spire-agent healthy \\(start 1\\): "msg":"Node attestation was successful" "spiffe_id":"${q(agentId)}"`).test(boot.machine.console())) throw new Error(`spire-agent did not attest as ${agentId}`);
    if (svid.match[1] !== `spiffe://${td}/workload/worker-1/labos`) throw new Error(`the SVID names ${svid.match[1] ?? ""}`);
    const agents = await spire.listAgents({ byAttestationType: "tpm_devid" });
    if (!agents.some((a) => a.id === agentId)) throw new Error(`SPIRE's tpm_devid agents: ${JSON.stringify(agents.map((a) => a.id))}`);
    const [entry] = await nodeEntries({ server: w.spire, spire }, "worker-1");
    if (entry?.id !== nodeEntryId("worker-1", sha1(caDer))) throw new Error(`the node entry ${entry?.id ?? "(none)"} is not fleetd's sync's`);
    return `agent ${agentId}\nnode entry ${entry.id} → spiffe://${td}/node/worker-1\nworkload SVID ${svid.match[1]}`;
  });

  if (o.renewal === false) {
    process.stdout.write("  - renewal: not waited for here (the test suite's shortened story; `pnpm lab` tells it, spire/renewAgent.it tests it)\n");
  } else {
    await report.step("renewal: the node agent's LAK-signed quote passes `talos`, the LDevID is renewed for the same key, spire-agent attests again with it; SPIRE lists only the renewed LDevID's agent and the node entry names its CN", async () => {
      const boot = installedBoot();
      if (!boot || !issued) throw new Error("no boot of the installed OS, or no LDevID issued");
      const again = await boot.machine.waitForConsole(/\[fleetd-labos\] svid after renewal (\S+) devid leaf sha1=([0-9a-f]{40})/, "the SVID after the renewal", 20 * MIN);
      const j = (await journalText(w, "worker-1")).split("\n").find((l) => /runtime attestation passed \(profile talos\); LDevID g\d+ issued for the same key/.test(l));
      if (!j) throw new Error("no renewal in the journal");
      const renewedNow = w.api.requests.filter((r) => r.path === "/v1/renew/evidence" && r.status === 200).map((r) => JSON.parse(r.responseBody.toString()) as { issued: string; ldevidCertificate?: string }).filter((b) => b.issued === "new");
      const renewedDer = new Uint8Array(Buffer.from(renewedNow.at(-1)?.ldevidCertificate ?? "", "base64"));
      const renewed = new X509Certificate(Buffer.from(renewedDer));
      if (!renewed.publicKey.equals(new X509Certificate(Buffer.from(issued.leaf)).publicKey)) throw new Error("not renewed for the same TPM key");
      if (sha1(renewedDer) !== again.match[2]) throw new Error("the devid leaf in the VM is not the renewed LDevID");
      const renewedId = tpmDevidAgentId(td, renewedDer);
      const agents = await until("SPIRE's agents: only the renewed LDevID's", 2 * MIN, async () => {
        const list = await spire.listAgents({ byAttestationType: "tpm_devid" });
        return list.length === 1 && list[0]?.id === renewedId ? list : undefined;
      });
      if (agents.some((a) => a.banned)) throw new Error("an agent is banned");
      const cn = cnOf(renewed, "subject");
      const moved = await until("the node entry naming the renewed CN", 2 * MIN, async () => {
        const [e] = await nodeEntries({ server: w.spire, spire }, "worker-1");
        return e?.selectors.some((x) => x.value === `subject:cn:${cn}`) ? e : undefined;
      });
      return `${j}\nagent ${renewedId}; node entry ${moved.id} selects subject:cn:${cn}\nSVID after renewal ${again.match[1]}`;
    });
  }

  await report.step("worker-1 is retired: SPIRE entry removed, the wipe Workflow's containers (attest, whole disk, TPM), Rufio powers it off, NetBox `offline`", async () => {
    await w.retire("worker-1", "lab: retire worker-1");
    await until("worker-1 offline", 40 * MIN, async () => ((await w.status("worker-1")) === "offline" ? true : undefined));
    await m1.bmc?.follower.waitForOff(5 * MIN);
    // The whole disk erased: QEMU ignores discards (its default), so the wipe saw its first MiB still hold data after
    // blkdiscard and zeroed the disk end to end.
    const size = statSync(m1.disk).size;
    for (let at = 0; at < size; at += 1 << 24) {
      if (readRange(m1.disk, at, Math.min(1 << 24, size - at)).some((b) => b !== 0)) throw new Error(`worker-1's disk holds data at ${at}..${at + (1 << 24)} after the retirement's wipe`);
    }
    await until("worker-1's node entry removed from SPIRE", 2 * MIN, async () => ((await nodeEntries({ server: w.spire, spire }, "worker-1")).length === 0 ? true : undefined));
    const steps = (await w.journal("worker-1")).map((e) => e.comments.split("\n")[0] ?? "").filter((c) => /retire|step/i.test(c));
    // What an operator runs: `fleetd retire status` over the retirement's progress record.
    const status = fleetd(["retire", "status", "worker-1", "--config", w.files.siteConfig], {}, 60_000);
    if (status.code !== 0 || !/worker-1/.test(status.stdout)) throw new Error(`fleetd retire status: exit ${status.code}\n${status.stdout}${status.stderr}`);
    return `${steps.join("\n")}\nfleetd retire status worker-1:\n${status.stdout.trim()}\ndisk: ${size >> 20} MiB, all zeros`;
  });

  await report.step("worker-2 still waits, its disk untouched; then switched off", async () => {
    if (fileSha256(m2.disk) !== m2.diskSha256) throw new Error("worker-2's disk changed");
    for (const b of m2.boots) await b.stop();
    return "disk byte-identical";
  });

  await report.step("the journals tell each node's story; `fleetd inventory check` is clean", async () => {
    const out: string[] = [];
    for (const node of Object.keys(w.machines)) {
      out.push(`${node}:`, ...(await w.journal(node)).map((e) => `  ${e.comments.split("\n")[0]?.replace(/^\*\*fleetd\*\* /, "") ?? ""}`));
    }
    const check = fleetd(["inventory", "check", w.nodesFile, "--config", w.files.siteConfig], {}, 120_000);
    if (check.code !== 0) throw new Error(`fleetd inventory check: exit ${check.code}\n${check.stdout}${check.stderr}`);
    return out.join("\n");
  });
}
