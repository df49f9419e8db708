/** Journal entries on a device: fleetd writes one for every decision, so operators read the reason in NetBox. */
import type { Journal, JournalEntry } from "../fleet/ports.js";
import { must, type NetBox } from "./client.js";
import { deviceIdByName } from "./device.js";
import { mdCode, mdText } from "@fleetd/verify/text";

export type JournalKind = "info" | "success" | "warning" | "danger";

/** The journal-entry custom field holding the outbox key of an entry fleetd wrote (netbox/fields.ts). */
export const JOURNAL_KEY_FIELD = "fleetd_key";

/**
 * Write a journal entry on a device (no idempotency key: a caller that retries with one uses writeJournals, whose
 * look-up compares keys exactly — NetBox's filter on the custom field matches substrings).
 */
export async function writeJournal(nb: NetBox, deviceId: number, kind: JournalKind, comments: string): Promise<number> {
  const { data } = await must(
    nb.api.POST("/api/extras/journal-entries/", {
      body: { assigned_object_type: "dcim.device", assigned_object_id: deviceId, kind, comments: comments.slice(0, 60_000) } as never,
    }),
    `journal entry on device ${deviceId}`,
  );
  return (data as { id: number }).id;
}

/** One entry of a keyed write (writeJournals): its outbox key goes into `fleetd_key`. */
export interface KeyedJournalEntry {
  kind: JournalKind;
  comments: string;
  key: string;
}

/**
 * Write keyed entries (one or several) on one device in one request (NetBox creates a list POSTed to the endpoint in one
 * transaction), in the order given. `maybeWritten` (an earlier attempt's outcome is unknown): the keys are looked
 * up first, in one request, and only the entries not found are written — a retry never doubles an entry.
 */
export async function writeJournals(nb: NetBox, deviceId: number, entries: KeyedJournalEntry[], maybeWritten: boolean): Promise<void> {
  let todo = entries;
  if (maybeWritten && entries.length > 0) {
    const { data } = await must(
      nb.api.GET("/api/extras/journal-entries/", {
        params: {
          query: {
            assigned_object_type: "dcim.device",
            assigned_object_id: [deviceId],
            // several values are OR'ed; the custom field's (loose) filter matches substrings, so the keys are compared below
            [`cf_${JOURNAL_KEY_FIELD}`]: entries.map((e) => e.key),
            limit: 1000,
            fields: "id,custom_fields",
          } as never,
        },
      }),
      `journal entries ${entries.map((e) => e.key).join(", ")} on device ${deviceId}`,
    );
    const found = new Set(data.results.map((r) => (r.custom_fields as Record<string, unknown> | undefined)?.[JOURNAL_KEY_FIELD]).filter((k): k is string => typeof k === "string"));
    todo = entries.filter((e) => !found.has(e.key));
  }
  if (todo.length === 0) return;
  await must(
    nb.api.POST("/api/extras/journal-entries/", {
      body: todo.map((e) => ({
        assigned_object_type: "dcim.device",
        assigned_object_id: deviceId,
        kind: e.kind,
        comments: e.comments.slice(0, 60_000),
        custom_fields: { [JOURNAL_KEY_FIELD]: e.key },
      })) as never,
    }),
    `${todo.length} journal entries on device ${deviceId}`,
  );
}

export interface JournalRecord {
  id: number;
  kind: string;
  comments: string;
  created: string | null;
}

export async function readJournal(nb: NetBox, deviceId: number): Promise<JournalRecord[]> {
  const { data } = await must(
    nb.api.GET("/api/extras/journal-entries/", {
      params: { query: { assigned_object_type: "dcim.device", assigned_object_id: [deviceId], limit: 1000, ordering: "created" } as never },
    }),
    `journal of device ${deviceId}`,
  );
  return data.results.map((r) => {
    const k = r.kind as unknown as { value?: string } | string | undefined;
    return { id: r.id, kind: typeof k === "string" ? k : k?.value ?? "info", comments: r.comments, created: r.created ?? null };
  });
}

/**
 * One entry as people read it in NetBox: `**fleetd** <summary>`, then a line per reason naming its check (and
 * what the inventory says, `internal`). Summaries and details quote untrusted text (a machine's claims, LLDP,
 * a CSR's requester): all of it goes through `mdText`, so nothing becomes a link, image, heading or HTML.
 */
export function formatJournalEntry(entry: JournalEntry): string {
  const reasons = (entry.reasons ?? []).map((r) => {
    const where = r.pcr !== undefined ? ` (PCR ${r.pcr}${r.event !== undefined ? `, event ${r.event}` : ""})` : "";
    const internal = r.internal ? ` — ${mdText(r.internal)}` : "";
    return `- ${mdCode(r.check, 100)}${where}: ${mdText(r.detail)}${internal}`;
  });
  return [`**fleetd** ${mdText(entry.summary)}`, ...reasons].join("\n");
}

/**
 * fleetd's journal on NetBox for every component: an entry goes on the device named like the node. `idOf`
 * resolves the name (default: looked up once per name). Machines the inventory does not know (node undefined,
 * or no such device) have no device to journal on: `fleetd pending` lists them instead.
 */
export function netboxJournal(nb: NetBox, idOf: (node: string) => Promise<number | undefined> = cachedDeviceIds(nb)): Journal {
  return {
    async record(node, entry) {
      const id = node === undefined ? undefined : typeof node === "string" ? await idOf(node) : node.deviceId;
      if (id !== undefined) await writeJournal(nb, id, entry.kind, formatJournalEntry(entry));
    },
  };
}

function cachedDeviceIds(nb: NetBox): (node: string) => Promise<number | undefined> {
  const ids = new Map<string, number>();
  return async (node) => {
    const known = ids.get(node);
    if (known !== undefined) return known;
    const id = await deviceIdByName(nb, node);
    if (id !== undefined) ids.set(node, id);
    return id;
  };
}
