/**
 * Canonical JSON for hashing claims: object keys sorted by UTF-16 code units, no white space, strings as
 * JSON.stringify writes them; only strings, booleans, null, safe integers, arrays and plain objects
 * (RFC 8785's rules restricted to values without floats, which is all fleetd hashes).
 */
export type Canonical = string | number | boolean | null | Canonical[] | { [k: string]: Canonical };

export function canonicalJson(v: Canonical): string {
  if (v === null || typeof v === "boolean" || typeof v === "string") return JSON.stringify(v);
  if (typeof v === "number") {
    if (!Number.isSafeInteger(v)) throw new TypeError("canonical JSON carries integers only");
    return String(v);
  }
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  const keys = Object.keys(v).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k] as Canonical)}`).join(",")}}`;
}
