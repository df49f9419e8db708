/** The Status object of a refused Kubernetes request (message and causes), for reports naming the reason. */
import * as k8s from "@kubernetes/client-node";
import { z } from "zod";

const Status = z.object({
  message: z.string().optional(),
  reason: z.string().optional(),
  details: z.object({ causes: z.array(z.object({ reason: z.string().optional(), message: z.string().optional() })).optional() }).optional(),
});

export function statusMessage(e: unknown): string {
  if (!(e instanceof k8s.ApiException)) return (e as Error).message ?? String(e);
  const raw: unknown = e.body;
  let body: unknown = raw;
  if (typeof raw === "string") {
    try {
      body = JSON.parse(raw);
    } catch {
      return `HTTP ${e.code}: ${raw.slice(0, 300)}`;
    }
  }
  const s = Status.safeParse(body);
  if (!s.success) return `HTTP ${e.code}`;
  const causes = (s.data.details?.causes ?? []).map((c) => c.message).filter((m): m is string => !!m);
  return [s.data.message ?? `HTTP ${e.code}`, ...causes].join(" — ");
}
