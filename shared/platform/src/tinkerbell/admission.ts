/**
 * Admission (design: intake confirmed → Hardware + the provision Workflow) through the Tinkerbell effects.
 * The boot MAC is the intake Workflow's agent ID (intakeAgent.ts), or the only proven MAC; the Hardware lists
 * every proven MAC, the boot one first. Admission never fails the confirm: the LDevID is issued by then, so a
 * refusal or an API error is journalled (danger, with the reason) and the operator can request provision in
 * NetBox instead. Every outcome is journalled.
 *
 * The node record comes from NetBox, whose `bmc` and `install_disk` fields any device editor can write through
 * the API. They are used only when `fields` (the change log: netbox/platformFields.ts) attributes the values to
 * the inventory apply account; otherwise admission is refused (`bmc-unattributed`, `install-disk-unattributed`)
 * and journalled, before any object is written. The credentials reference must also be the node's own Secret
 * (credentials.ts), whoever wrote it.
 */
import type { Node, PlatformNode } from "../fleet/node.js";
import type { Admission, Journal, PlatformFieldCheck, PlatformFieldRefusal, PlatformFields } from "../fleet/ports.js";
import type { TinkerbellEffects } from "./effects.js";
import { TinkerbellError } from "./errors.js";
import { intakeAgentMac } from "./intakeAgent.js";
import { canonicalMac } from "./mac.js";
import { NetBoxError } from "../netbox/client.js";
import { mdCode } from "@fleetd/verify/text";

export type { PlatformFieldCheck, PlatformFieldRefusal, PlatformFields };

export interface AdmissionLog {
  info(o: object, msg: string): void;
  warn(o: object, msg: string): void;
}

export class TinkerbellAdmission implements Admission {
  constructor(
    private readonly fx: TinkerbellEffects,
    private readonly journal: Journal,
    private readonly fields: PlatformFieldCheck,
    private readonly log?: AdmissionLog,
    private readonly now: () => Date = () => new Date(),
  ) {}

  async admit(node: Node, facts: { macs: string[]; uuid: string }, journal: Journal = this.journal): Promise<void> {
    try {
      const macs = [...new Set(facts.macs.map(canonicalMac))];
      const boot = (await intakeAgentMac(this.fx.objects, macs)) ?? (macs.length === 1 ? macs[0] : undefined);
      if (!boot) {
        throw new TinkerbellError("no-proven-mac", `cannot tell which of the ${macs.length} proven MACs (${macs.join(", ")}) boots: no intake Workflow names one`);
      }
      const refused = await this.fields.check(node.name, { ...(node.bmc ? { bmc: node.bmc } : {}), ...(node.installDisk !== undefined ? { installDisk: node.installDisk } : {}) });
      const first = refused[0];
      if (first) throw new TinkerbellError(first.code, refused.map((r) => `${r.reason} [${r.code}]`).join("; "));
      const tn: PlatformNode = {
        name: node.name,
        macs: [boot, ...macs.filter((m) => m !== boot)],
        ...(node.address ? { address: node.address } : {}),
        ...(node.gateway ? { gateway: node.gateway } : {}),
        ...(node.installDisk ? { installDisk: node.installDisk } : {}),
        ...(node.bmc ? { bmc: node.bmc } : {}),
      };
      const s = await this.fx.start(tn, { mode: "provision", requestId: `admission:${node.name}:${facts.uuid}:${this.now().toISOString()}` });
      const deleted = s.deleted.length ? `; deleted first: ${s.deleted.map((d) => `${d.name} (${d.state || "new"}, ${d.why})`).join(", ")}` : "";
      this.log?.info({ node: node.name, workflow: s.name, bootMac: boot }, "admitted: Hardware and provision Workflow");
      await journal.record(node.name, { kind: "success", summary: `admission: Hardware ${node.name} (boot MAC ${boot}) and provision Workflow ${s.name} ${s.created ? "created" : "exist"}${deleted}` });
    } catch (e) {
      const api = e instanceof NetBoxError ? "NetBox" : "Kubernetes API";
      const reason = e instanceof TinkerbellError ? `${e.message} [${e.code}]` : `${api}: ${(e as Error).message.split("\n")[0]}`;
      const check = e instanceof TinkerbellError ? e.code : e instanceof NetBoxError ? "netbox-api" : "kubernetes-api";
      this.log?.warn({ node: node.name, check, reason }, "admission failed");
      // The reason names NetBox users, values and API messages: untrusted text, as a code span.
      await journal.record(node.name, { kind: "danger", summary: `admission failed (${check}): ${mdCode(reason, 800)}; set desired_action to provision in NetBox to retry` });
    }
  }
}
