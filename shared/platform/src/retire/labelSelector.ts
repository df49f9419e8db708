/** Does a V1LabelSelector select these labels? (matchLabels and matchExpressions, as the API server decides.) */
import type * as k8s from "@kubernetes/client-node";

export function selects(selector: k8s.V1LabelSelector | undefined, labels: Record<string, string> | undefined): boolean {
  // A PDB with a null selector selects nothing; an empty selector selects everything (policy/v1).
  if (!selector) return false;
  const l = labels ?? {};
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (l[k] !== v) return false;
  for (const req of selector.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(l, req.key);
    const value = l[req.key];
    const values = req.values ?? [];
    switch (req.operator) {
      case "In": if (!has || !values.includes(value as string)) return false; break;
      case "NotIn": if (has && values.includes(value as string)) return false; break;
      case "Exists": if (!has) return false; break;
      case "DoesNotExist": if (has) return false; break;
      default: return false;
    }
  }
  return true;
}
