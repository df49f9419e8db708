/**
 * The Tinkerbell/Rufio effects for one management cluster namespace, as netbox-script and talos-config-server
 * use them: keep the Templates (and intake rule set), start a node's Workflow (BMC Machine first when the node
 * has one, then Hardware and the Workflow), admit an intake-confirmed node, power a node off.
 * Its methods are where a node enters the adapter: each checks it once (`checkNode`, or `namedNode` where no MAC
 * is needed) and hands the checked node on.
 */
import type { Kube } from "../kube/client.js";
import { ensureBmcMachine, jobState, powerOff, type BmcOptions } from "./bmc.js";
import { ensureHardware } from "./ensureHardware.js";
import { ensureTemplates } from "./ensureTemplates.js";
import type { JobState } from "./job.js";
import { checkNode, namedNode, type NamedNode } from "./node.js";
import type { PlatformNode } from "../fleet/node.js";
import { Objects } from "./objects.js";
import type { TinkerbellSiteConfig } from "../fleet/tinkerbellSiteConfig.js";
import { startWorkflow, type StartedWorkflow } from "./startWorkflow.js";
import type { SyncCounts } from "./sync.js";
import type { TemplateInputs } from "./templates.js";
import type { WorkflowRequest } from "./workflow.js";
import { workflowState, type WorkflowState } from "./workflowState.js";

export interface TinkerbellEffectsOptions {
  kube: Kube;
  namespace: string;
  site: TinkerbellSiteConfig;
  serverCaPem?: string;
}

export class TinkerbellEffects {
  readonly objects: Objects;
  private templatesChecked = false;

  constructor(private readonly o: TinkerbellEffectsOptions) {
    this.objects = new Objects(o.kube, o.namespace);
  }

  get namespace(): string {
    return this.o.namespace;
  }

  /** The site's budget of boot-Job restarts per Workflow (tinkerbell.bootRetries). */
  get bootRetries(): number {
    return this.o.site.bootRetries;
  }

  private get inputs(): TemplateInputs {
    return { site: this.o.site, ...(this.o.serverCaPem ? { serverCaPem: this.o.serverCaPem } : {}) };
  }

  private get bmcOptions(): BmcOptions {
    const { redfish, amt } = this.o.site.bmc;
    return {
      insecureTLS: this.o.site.bmcInsecureTLS,
      redfishBasicAuth: redfish.useBasicAuth,
      amtScheme: amt.scheme,
      ...(redfish.port !== undefined ? { redfishPort: redfish.port } : {}),
      ...(redfish.systemName !== undefined ? { redfishSystemName: redfish.systemName } : {}),
    };
  }

  /** Templates and the intake rule set as the site configuration renders them. */
  async syncTemplates(): Promise<{ templates: SyncCounts; ruleSets: SyncCounts }> {
    const c = await ensureTemplates(this.objects, this.inputs);
    this.templatesChecked = true;
    return c;
  }

  /** Everything a Workflow needs, then the Workflow (see startWorkflow.ts for the one-per-machine rules). */
  async start(node: PlatformNode, req: WorkflowRequest): Promise<StartedWorkflow & { machine?: string }> {
    const n = checkNode(node);
    if (!this.templatesChecked) await this.syncTemplates();
    const machine = n.bmc ? (await ensureBmcMachine(this.objects, n, this.bmcOptions)).machine : undefined;
    const started = await startWorkflow(this.objects, n, req);
    return { ...started, ...(machine ? { machine } : {}) };
  }

  /** Hardware alone (admission without a Workflow, retirement's bookkeeping). */
  async ensureHardware(node: PlatformNode): Promise<"created" | "updated" | "unchanged"> {
    return ensureHardware(this.objects, checkNode(node));
  }

  async ensureBmcMachine(node: Pick<PlatformNode, "name" | "bmc">): ReturnType<typeof ensureBmcMachine> {
    return ensureBmcMachine(this.objects, namedNode(node), this.bmcOptions);
  }

  workflowState(name: string): Promise<WorkflowState | undefined> {
    return workflowState(this.objects, name);
  }

  /** Power off through Rufio (Machine ensured first); returns the Job's name. */
  async powerOff(node: Pick<PlatformNode, "name" | "bmc">, requestId: string): Promise<string> {
    const n: NamedNode = namedNode(node);
    await ensureBmcMachine(this.objects, n, this.bmcOptions);
    return powerOff(this.objects, n, requestId);
  }

  jobState(name: string): Promise<JobState | undefined> {
    return jobState(this.objects, name);
  }
}
