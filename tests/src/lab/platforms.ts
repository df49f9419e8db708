/**
 * The lab's platform part: the same machine's Tinkerbell side with real platforms (tests/src/tinkerbell/
 * platformWorld.ts): NetBox asks, netbox-script creates the objects, the real tink-controller renders fleetd's
 * Templates and runs the netboot Job through Rufio against a Redfish BMC (sushy-tools), the real tink-server
 * serves the actions to the agent; then retirement: wipe Workflow, power-off Job, NetBox offline.
 */
import { readJournal } from "@fleetd/platform/netbox";
import { device } from "../netbox/handlerFixture.js";
import { workflow } from "../tinkerbell/fixtures.js";
import { NODE, startPlatformWorld, type PlatformWorld } from "../tinkerbell/platformWorld.js";
import type { Report } from "./report.js";

export async function platforms(report: Report): Promise<void> {
  let w: PlatformWorld | undefined;
  try {
    await report.step("start NetBox, a Kubernetes control plane with Tinkerbell's CRDs, tink-server + tink-controller + Rufio (v0.25.0), a Redfish BMC, netbox-script", async () => {
      w = await startPlatformWorld();
      return `Kubernetes ${w.env.cp.version}; tink-server gRPC ${w.env.tb.grpcAddress}; BMC ${w.bmc.url} (system ${w.bmc.systemId}, NIC ${w.bmc.mac})`;
    });
    if (!w) return;
    const world = w;
    let wf = "";
    await report.step(`desired_action provision on ${NODE}: Hardware, BMC Machine, Templates and the Workflow; the controller's netboot Job runs on the BMC; the agent is served fleetd's actions`, async () => {
      const s = await world.served("provision");
      wf = s.wf;
      const st = await workflow(world.env, wf);
      const names = await world.runToSuccess(wf, s.first);
      return `Workflow ${wf}: template ${st.status?.templateRendering}, netboot Job complete ${String(st.status?.bootOptions?.jobs?.[`netboot-${wf}`]?.complete)}, BMC ${await world.bmc.powerState()} booting ${(await world.bmc.bootSource()).target}; actions served: ${names.join(" → ")}; ${(await workflow(world.env, wf)).status?.state}`;
    });
    await report.step("netbox-script's reconcile pass journals how the Workflow ended, once", async () => {
      const first = await world.handler.followWorkflows();
      const again = await world.handler.followWorkflows();
      const d = await device(world.f, NODE);
      const line = (await readJournal(world.f.admin, d.id)).map((j) => j.comments).find((c) => c.includes(`Workflow ${wf} succeeded`));
      if (!line || !first?.journalled.includes(wf) || (again?.journalled.length ?? 0) > 0) throw new Error(`journalled ${JSON.stringify(first)}, then ${JSON.stringify(again)}; line ${line}`);
      return `${line}\n(the next pass journals nothing: the Workflow carries fleetd.io/outcome-journalled)`;
    });
    await report.step("status decommissioning: retirement runs its steps — wipe Workflow served, Rufio powers the BMC off, NetBox offline", async () => {
      const { wipe, actions: names, journal } = await world.retire("lab: retire");
      const steps = journal.map((j) => j.comments.split("\n")[0] ?? "").filter((c) => /retire|step/i.test(c));
      return `wipe Workflow ${wipe}: ${names.join(" → ")}; BMC ${await world.bmc.powerState()}; NetBox ${(await device(world.f, NODE)).status}\n${steps.join("\n")}`;
    });
    if (world.notes.length > 0) await report.step("noticed on the way", () => world.notes.join("\n"));
  } finally {
    await w?.stop();
  }
}
