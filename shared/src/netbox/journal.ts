/** Journal entries on a device: fleetd writes one for every decision, so operators read the reason in NetBox. */
import { must, type NetBox } from "./client.js";

export type JournalKind = "info" | "success" | "warning" | "danger";

export async function writeJournal(nb: NetBox, deviceId: number, kind: JournalKind, comments: string): Promise<number> {
  const { data } = await must(
    nb.api.POST("/api/extras/journal-entries/", {
      body: { assigned_object_type: "dcim.device", assigned_object_id: deviceId, kind, comments: comments.slice(0, 60_000) } as never,
    }),
    `journal entry on device ${deviceId}`,
  );
  return (data as { id: number }).id;
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
