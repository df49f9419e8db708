/**
 * Desired-versus-live comparison for objects the API server defaults: the live object "has" the desired one when
 * every desired field is present with the same value (arrays element-wise, same length); fields the server or a
 * controller added are ignored. A sync that finds nothing to change writes nothing.
 */
export function contains(live: unknown, desired: unknown): boolean {
  if (desired === null || typeof desired !== "object") return live === desired;
  if (Array.isArray(desired)) {
    return Array.isArray(live) && live.length === desired.length && desired.every((d, i) => contains(live[i], d));
  }
  if (live === null || typeof live !== "object" || Array.isArray(live)) return false;
  const l = live as Record<string, unknown>;
  return Object.entries(desired as Record<string, unknown>).every(([k, v]) => contains(l[k], v));
}

/** A merge patch that sets `desired`'s top-level keys and removes the `managed` ones it lacks. */
export function replaceKeys(desired: Record<string, unknown>, managed: readonly string[]): Record<string, unknown> {
  const patch: Record<string, unknown> = { ...desired };
  for (const k of managed) if (!(k in desired)) patch[k] = null;
  return patch;
}
