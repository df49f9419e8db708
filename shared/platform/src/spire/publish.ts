/**
 * Publishing `spire-nodes.json` from NetBox (netbox-script runs it on every relevant device webhook and every
 * reconcile pass): list the devices, judge each as a `Node` (attribution from the change log, cached per device
 * and `last_updated`, so a quiet fleet costs one device listing), render the list (`renderNodeList`) and replace
 * the stored document when its bytes changed. Publications run one at a time; a request during one runs one more
 * after it (coalesced).
 */
import type { Node } from "../fleet/node.js";
import { type NetBoxInventoryOptions, recordedNode } from "../netbox/attestationInventory.js";
import type { NetBox } from "../netbox/client.js";
import { listDevices } from "../netbox/device.js";
import type { DocumentStore } from "./documentStore.js";
import { nodeListDigest, renderNodeList, rootFingerprintsOfFile, serializeNodeList, type NodeList } from "./nodeList.js";

export interface NodeListPublisherOptions {
  nb: NetBox;
  inventory: NetBoxInventoryOptions;
  trustDomain: string;
  /** fleetd's CA bundle (PEM): its roots are the entries' CA fingerprints; re-read on every publication (rollover). */
  caBundlePath: string;
  store: DocumentStore;
  keepFailedControlPlanes: boolean;
  log?: { info(o: object, m: string): void; warn(o: object, m: string): void };
  now?: () => Date;
}

export interface Publication {
  list: NodeList;
  digest: string;
  /** False when the stored bytes were already these. */
  written: boolean;
  excluded: { name: string; why: string }[];
}

export class NodeListPublisher {
  private readonly cache = new Map<number, { lastUpdated: string; node: Node }>();
  private running: Promise<Publication> | undefined;
  private queued: Promise<Publication> | undefined;
  last: Publication | undefined;

  constructor(private readonly o: NodeListPublisherOptions) {}

  /** Publish now; while one runs, the calls made meanwhile share one more run after it. */
  publish(): Promise<Publication> {
    if (!this.running) {
      this.running = this.once().finally(() => {
        this.running = undefined;
      });
      return this.running;
    }
    this.queued ??= this.running
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return this.publish();
      });
    return this.queued;
  }

  /** Fire and forget (a webhook): failures are logged, the next pass publishes again. */
  trigger(): void {
    this.publish().catch((e: unknown) => this.o.log?.warn({ err: e instanceof Error ? e.message : String(e) }, "publishing spire-nodes.json failed; the next pass retries"));
  }

  private async once(): Promise<Publication> {
    const fps = rootFingerprintsOfFile(this.o.caBundlePath);
    const devices = await listDevices(this.o.nb, { fields: "id,name,serial,status,site,role,device_type,custom_fields,last_updated" });
    const nodes: Pick<Node, "name" | "status" | "role" | "ldevid" | "runtime" | "unattributed">[] = [];
    const seen = new Set<number>();
    for (const d of devices) {
      seen.add(d.id);
      // Only devices that could be listed need the change log; the others are excluded by status alone.
      if (d.status !== "active") {
        this.cache.delete(d.id);
        nodes.push({ name: d.name ?? `#${d.id}`, status: d.status, role: "worker", unattributed: [] });
        continue;
      }
      const lu = d.last_updated ?? "";
      const hit = this.cache.get(d.id);
      if (hit && lu !== "" && hit.lastUpdated === lu) {
        nodes.push(hit.node);
        continue;
      }
      const node = await recordedNode(this.o.nb, d, this.o.inventory);
      if (lu !== "") this.cache.set(d.id, { lastUpdated: lu, node });
      nodes.push(node);
    }
    for (const id of this.cache.keys()) if (!seen.has(id)) this.cache.delete(id);
    const { list, excluded } = renderNodeList(nodes, { trustDomain: this.o.trustDomain, caFingerprints: fps, now: this.o.now?.() ?? new Date(), keepFailedControlPlanes: this.o.keepFailedControlPlanes });
    const written = await this.o.store.write(Buffer.from(serializeNodeList(list)));
    const digest = nodeListDigest(list);
    if (written) this.o.log?.info({ digest, nodes: list.nodes.length, excluded: excluded.length, store: this.o.store.describe }, "spire-nodes.json published");
    const p = { list, digest, written, excluded };
    this.last = p;
    return p;
  }
}
