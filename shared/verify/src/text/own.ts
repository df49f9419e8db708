/**
 * Looking a name up in a record, where the name is not fleetd's own (a device name from NetBox, a key from the
 * nodes file, a command word): own properties only. `r[name]` on a plain object answers `constructor`,
 * `__proto__`, `toString`, `hasOwnProperty`, ... with what every object inherits — a function or
 * Object.prototype — which passes as "found". Pure.
 */
export function own<V>(r: Readonly<Record<string, V>>, name: string): V | undefined {
  return Object.hasOwn(r, name) ? r[name] : undefined;
}

/** Names JavaScript objects inherit: for tests that a lookup by name does not find them. */
export const INHERITED_NAMES: readonly string[] = ["constructor", "__proto__", "toString", "hasOwnProperty", "valueOf", "isPrototypeOf", "propertyIsEnumerable", "toLocaleString", "__defineGetter__"];
