/**
 * The outbox's deliveries (outbox/worker.ts) over NetBox and the workload cluster: each effect is idempotent —
 * custom fields and statuses are set to a value (setting them twice is setting them once), the proven MAC is
 * written only when the interface does not hold it, a journal entry carries its key and a retry looks for it
 * first, and a bootstrap token's Secret is deleted only when the store does not record it as the node's token.
 */
import { type Effect, factsFromWire, runtimeFactsFromWire } from "../outbox/effects.js";
import type { NodeQuarantine } from "../kube/quarantine.js";
import type { JournalEffect, OutboxDelivery } from "../outbox/worker.js";
import type { BootstrapTokens } from "../fleet/ports.js";
import type { AttestationStore, OutboxEntry } from "../state/store.js";
import { type NetBoxInventory } from "./attestationInventory.js";
import { NetBoxError, type NetBox } from "./client.js";
import { deviceIdByName } from "./device.js";
import { formatJournalEntry, writeJournals } from "./journal.js";

export interface NetBoxOutboxDeliveryOptions {
  nb: NetBox;
  inventory: Pick<NetBoxInventory, "recordAttestation" | "markStaged" | "markActive" | "markFailed" | "recordRuntime">;
  /** The workload cluster's Nodes (absent: quarantine cordons have nowhere to go and are dropped as moot). */
  quarantine?: NodeQuarantine;
  /** The workload cluster's token Secrets (absent: token clean-ups have nothing to do). */
  bootstrapTokens?: Pick<BootstrapTokens, "delete">;
  store: Pick<AttestationStore, "getBootstrapToken" | "getRuntime">;
}

/** NetBox answered 404 for the device: it is gone, and so is the point of writing to it. */
const gone = (e: unknown) => e instanceof NetBoxError && e.code === "netbox-http" && e.status === 404;

export class NetBoxOutboxDelivery implements OutboxDelivery {
  constructor(private readonly o: NetBoxOutboxDeliveryOptions) {}

  async deliver(entry: OutboxEntry, effect: Effect): Promise<"delivered" | "moot"> {
    try {
      return await this.apply(entry, effect);
    } catch (e) {
      if (gone(e)) return "moot";
      throw e;
    }
  }

  /** A device's consecutive journal entries in one request (worker.ts), each with its key; a retry looks them up first. */
  async deliverJournals(deviceId: number, items: { entry: OutboxEntry; effect: JournalEffect }[]): Promise<"delivered" | "moot"> {
    try {
      const entries = items.map((i) => ({ kind: i.effect.entry.kind, comments: formatJournalEntry(i.effect.entry), key: i.entry.key }));
      await writeJournals(this.o.nb, deviceId, entries, items.some((i) => i.entry.attempts > 0));
      return "delivered";
    } catch (e) {
      if (gone(e)) return "moot";
      throw e;
    }
  }

  private async apply(entry: OutboxEntry, effect: Effect): Promise<"delivered" | "moot"> {
    switch (effect.kind) {
      case "netbox.attestation":
        await this.o.inventory.recordAttestation(effect.node, factsFromWire(effect.facts));
        return "delivered";
      case "netbox.status":
        if (effect.status === "failed") await this.o.inventory.markFailed(effect.node, effect.why);
        else if (effect.status === "staged") await this.o.inventory.markStaged(effect.node);
        else await this.o.inventory.markActive(effect.node);
        return "delivered";
      case "netbox.journal": {
        const id = "deviceId" in effect.node ? effect.node.deviceId : await deviceIdByName(this.o.nb, effect.node.name);
        if (id === undefined) return "moot";
        await writeJournals(this.o.nb, id, [{ kind: effect.entry.kind, comments: formatJournalEntry(effect.entry), key: entry.key }], entry.attempts > 0);
        return "delivered";
      }
      case "netbox.runtime":
        await this.o.inventory.recordRuntime(effect.node, runtimeFactsFromWire(effect));
        return "delivered";
      case "kube.quarantine": {
        if (!this.o.quarantine) return "moot";
        if (effect.action === "cordon") return (await this.o.quarantine.cordon(effect.node.name, effect.why)) === "absent" ? "moot" : "delivered";
        // a cordon is lifted only while the store holds no latch (a failure committed after the pass that queued this)
        if ((await this.o.store.getRuntime(effect.node.deviceId))?.quarantine) return "moot";
        return (await this.o.quarantine.uncordon(effect.node.name)) === "lifted" ? "delivered" : "moot";
      }
      case "kube.deleteBootstrapToken": {
        if (effect.unlessRecordedFor !== undefined && (await this.o.store.getBootstrapToken(effect.unlessRecordedFor))?.tokenId === effect.tokenId) return "moot";
        if (!this.o.bootstrapTokens) return "moot";
        await this.o.bootstrapTokens.delete(effect.tokenId);
        return "delivered";
      }
    }
  }
}
