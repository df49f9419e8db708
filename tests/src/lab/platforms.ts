/**
 * The lab's platform part: the same machine's Tinkerbell side with real platforms and the real tink-agent
 * (tests/src/tinkerbell/platformWorld.ts): the machine boots HookOS, tink-server enrolls it into
 * fleetd's intake Workflow, fleetd-attest attests with its swtpm against the real attestation server, the confirm's
 * admission creates its Hardware and provision Workflow, the netboot Job power-cycles it through its Redfish BMC and
 * the agent runs the Workflow's containers on podman (wipe, the lab OS image, META on a loop device); then
 * retirement: the wipe Workflow, Rufio's power-off, NetBox offline.
 */
import { readJournal } from "@fleetd/platform/netbox";
import { device } from "../netbox/handlerFixture.js";
import { workflow } from "../tinkerbell/fixtures.js";
import { NODE, startPlatformWorld, type PlatformWorld } from "../tinkerbell/platformWorld.js";
import type { Report } from "./report.js";

export async function platforms(report: Report): Promise<void> {
  let w: PlatformWorld | undefined;
  try {
    await report.step("start NetBox, a Kubernetes control plane with Tinkerbell's CRDs, tink-server (auto-enrollment) + tink-controller + Rufio (v0.25.0), a Redfish BMC, netbox-script, the attestation server; the machine: a swtpm, a loop disk, podman for its agent", async () => {
      w = await startPlatformWorld();
      return `Kubernetes ${w.env.cp.version}; tink-server gRPC ${w.env.tb.grpcAddress}; BMC ${w.bmc.url} (system ${w.bmc.systemId}, NIC ${w.bmc.mac}); install disk ${w.real?.disk.device}; images ${JSON.stringify(w.real?.images)}`;
    });
    if (!w?.real) return;
    const world = w;
    const real = w.real;
    let wf = "";
    await report.step(`${NODE} boots HookOS: tink-server enrolls it (intake), fleetd-attest passes with its swtpm, the confirm's admission creates its Hardware and provision Workflow`, async () => {
      await real.startAgent();
      const { line, provisions } = await world.admitted();
      wf = provisions[0] ?? "";
      if (line.kind !== "success" || provisions.length !== 1) throw new Error(`admission: ${line.comments}; provision Workflows ${JSON.stringify(provisions)}`);
      return line.comments;
    });
    await report.step("the netboot Job power-cycles the machine; its agent runs the provision Workflow's containers: attest, wipe-disk, install-talos (the lab OS image), fleetd-write-meta", async () => {
      const state = await world.endOf(wf);
      const st = await workflow(world.env, wf);
      const actions = (st.status?.tasks?.[0]?.actions ?? []).map((a) => `${a.name} ${a.state}`);
      if (state !== "SUCCESS") throw new Error(`Workflow ${wf} ended ${state}: ${actions.join(", ")}`);
      return `Workflow ${wf}: ${actions.join(" → ")}; boots by the BMC: ${real.boots.join(", ")}`;
    });
    await report.step("netbox-script's reconcile pass journals how the Workflow ended, once", async () => {
      const first = await world.handler.followWorkflows();
      const again = await world.handler.followWorkflows();
      const d = await device(world.f, NODE);
      const line = (await readJournal(world.f.admin, d.id)).map((j) => j.comments).find((c) => c.includes(`Workflow ${wf} succeeded`));
      if (!line || !first?.journalled.includes(wf) || (again?.journalled.length ?? 0) > 0) throw new Error(`journalled ${JSON.stringify(first)}, then ${JSON.stringify(again)}; line ${line}`);
      return `${line}\n(the next pass journals nothing: the Workflow carries fleetd.io/outcome-journalled)`;
    });
    await report.step("the machine is handed over to its installed OS: fleetd's Rufio Job powers it off, sets its boot device to the disk, powers it on", async () => {
      const b = await world.bootedInstalledOs(wf);
      if (b.bootDevice !== "Hdd" || b.power !== "On") throw new Error(`after ${b.job} the BMC boots ${String(b.bootDevice)}, power ${b.power}`);
      return `Job ${b.job} completed; BMC boot device ${b.bootDevice}, power ${b.power}; boots by the BMC: ${real.boots.join(", ")}`;
    });
    await report.step("status decommissioning: retirement runs its steps — the wipe Workflow's containers (attest, whole disk, TPM), Rufio powers the machine off, NetBox offline", async () => {
      const { wipe, actions: names, journal } = await world.retire("lab: retire");
      const steps = journal.map((j) => j.comments.split("\n")[0] ?? "").filter((c) => /retire|step/i.test(c));
      return `wipe Workflow ${wipe}: ${names.join(" → ")}; BMC ${await world.bmc.powerState()}; NetBox ${(await device(world.f, NODE)).status}\n${steps.join("\n")}`;
    });
    if (world.notes.length > 0) await report.step("noticed on the way", () => world.notes.join("\n"));
  } finally {
    await w?.stop();
  }
}
