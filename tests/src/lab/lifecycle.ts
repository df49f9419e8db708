/**
 * The lab's lifecycle part: a planned NetBox node becomes an attested, provisioned, active Talos node — with the
 * real NetBox, a software TPM, a SoftHSM2 CA, the attestation server and Talos's own META reader.
 */
import { X509Certificate } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { listDevices, readJournal } from "@fleetd/platform/netbox";
import { attest, AttestationRefused } from "@fleetd/platform/protocol/client";
import { buildGptImage } from "@fleetd/testkit/talosMeta";
import { TcpTransport, TpmClient } from "@fleetd/platform/tpmclient";
import { issued, runHonest } from "../attestation/machine.js";
import { NODE, startWorld, type World } from "../attestation/world.js";
import { startSwtpm } from "../harness/swtpm.js";
import { runProcess } from "../harness/process.js";
import { TALOS_VERSION, talosGoBinDir, type AdvReadOutput } from "../talos/goTools.js";
import type { Report } from "./report.js";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");

export async function lifecycle(report: Report): Promise<void> {
  let w: World | undefined;
  try {
    await report.step("start the lab: NetBox 4.7 (fleetd setup, nodes file applied), swtpm with a HookOS boot, SoftHSM2 CA, attestation server", async () => {
      w = await startWorld({ talosVersion: TALOS_VERSION });
      return `NetBox ${w.fleet.nb.url}; attestation API ${w.baseUrl}; ${NODE} approves EKs rsa ${w.bindings.rsa.slice(0, 16)}… ecc ${w.bindings.ecc.slice(0, 16)}…`;
    });
    if (!w) return;
    const world = w;
    const admin = world.fleet.client(world.fleet.nb.authorization.replace(/^Bearer /, ""));
    const dev = async () => (await listDevices(admin, { name: NODE }))[0];
    const run = (mode: "intake" | "provision", over = {}) => runHonest(world, mode, over);
    await report.step(`intake: ${NODE} (planned) proves both EKs by activation and its HookOS boot by quote + event log`, async () => {
      const r = await run("intake");
      const x = new X509Certificate(Buffer.from(issued(r).ldevid.certificate));
      const d = await dev();
      return `verdict ${String(d?.cf["attestation_verdict"])}; LDevID ${x.subject} valid to ${x.validTo}, signed by the PKCS#11 CA`;
    });
    let code = "";
    await report.step("provision: every gate passed, LDevID/LAK re-issued, install code wrapped to the TPM and unwrapped there", async () => {
      const r = await run("provision");
      code = r.installCode ?? "";
      if (!/^[0-9a-f]{64}$/.test(code)) throw new Error("no install code");
      return `install code received (never printed); LDevID generation 2`;
    });
    await report.step("write-meta: the code into Talos META key 0x0b of a disk image; Talos's own ADV reader agrees", async () => {
      const img = join(world.dir, "lab-disk.img");
      writeFileSync(img, buildGptImage({}).bytes);
      const codeFile = join(world.dir, "install-code");
      writeFileSync(codeFile, code, { mode: 0o600 });
      // Child processes run asynchronously: a synchronous one (spawnSync) blocked this process's event loop —
      // the in-process server's and fetch's keep-alive timers with it — and the next fetch then reused a socket
      // the server closed as soon as the loop ran again ("fetch failed" on a fresh machine, where it took 65 s).
      const r = await runProcess(process.execPath, [join(repo, "tink-action/dist/cli.js"), "write-meta", "--disk", img, "--code-file", codeFile], { timeoutMs: 120_000 });
      if (r.code !== 0) throw new Error(r.stderr.toString());
      const read = await runProcess(join(talosGoBinDir(), "advread"), [img], { timeoutMs: 60_000 });
      if (read.code !== 0) throw new Error(`advread: ${read.stderr.toString()}`);
      const t = JSON.parse(read.stdout.toString()) as AdvReadOutput;
      if (t.tags["0x0b"]?.text !== code) throw new Error("Talos reads another value");
      return "Talos sees key 0x0b = the code; both ADV copies valid";
    });
    await report.step("Talos fetches /talos/config once; the second fetch fails; NetBox shows the device active", async () => {
      const uuid = world.claims().uuid;
      const first = await fetch(`${world.baseUrl}/talos/config?uuid=${uuid}&code=${code}`);
      const yaml = await first.text();
      const second = await fetch(`${world.baseUrl}/talos/config?uuid=${uuid}&code=${code}`);
      for (let i = 0; i < 50 && (await dev())?.status !== "active"; i++) await new Promise((r) => setTimeout(r, 100));
      if (first.status !== 200 || second.status !== 404) throw new Error(`fetches answered ${first.status}, ${second.status}`);
      return `config of ${yaml.length} bytes (hostname ${NODE}, static address, seed files); second fetch 404; status ${(await dev())?.status}`;
    });
    await report.refusal("another machine's TPM (unknown EKs) waits as pending", /ek\.unknown/, async () => {
      const other = await startSwtpm({ pcrBanks: ["sha1", "sha256"] });
      const tpm = new TpmClient(new TcpTransport(other.host, other.port));
      try {
        await attest({ tpm, server: world.transport, claims: world.claims({ serial: "STRANGER-1", mode: "intake" }), eventLog: world.eventLog });
        return [];
      } catch (e) {
        if (e instanceof AttestationRefused) return e.refusal.reasons.map((r) => `${r.check}: ${r.detail}`);
        throw e;
      } finally {
        await tpm.close();
        await other.stop();
      }
    });
    await report.refusal("a machine claiming another serial is refused and journalled", /claims\.serial/, async () => {
      try {
        await run("provision", { serial: "NOT-MINE" });
        return [];
      } catch (e) {
        if (e instanceof AttestationRefused) return e.refusal.reasons.map((r) => `${r.check}: ${r.detail}`);
        throw e;
      }
    });
    await report.step("the NetBox journal tells the story", async () => {
      const d = await dev();
      if (!d) throw new Error("device gone");
      const entries = await readJournal(admin, d.id);
      return entries.map((e) => e.comments.split("\n")[0]?.replace(/^\*\*fleetd\*\* /, "") ?? "").join("\n");
    });
  } finally {
    await w?.stop();
  }
}
