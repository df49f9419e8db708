/**
 * The LLDP claim from `lldpctl -f json0 <iface>` (lldpd). json0 is lldpd's regular JSON: every level is an
 * array of objects and every scalar is `[{ "value": … }]`, whatever the number of interfaces or neighbours
 * (plain `-f json` changes shape with the count and keys chassis by system name, so it is not accepted).
 *
 *   { "lldp": [ { "interface": [ { "name": "eth0", "via": "LLDP",
 *       "chassis": [ { "id": [ { "type": "mac", "value": "…" } ], "name": [ { "value": "tor-a1" } ] } ],
 *       "port":    [ { "id": [ { "type": "ifname", "value": "ethernet1/1/2" } ], "descr": [ … ] } ] } ] } ] }
 *
 * The claim names the switch and port as NetBox does: `chassisId` is the switch's system name (LLDP sysName,
 * what NetBox calls the device) when it sends one, else its chassis ID; `portId` is the port ID TLV's value
 * (switches send the interface name, subtype ifname or local). Anything else yields no claim (null) with the
 * reason: the server's switch-port gate then refuses a node NetBox has a cable for — the safe direction.
 */
import { z } from "zod";

export interface LldpClaim {
  chassisId: string;
  portId: string;
}

export interface LldpReading {
  lldp: LldpClaim | null;
  /** Why there is no claim, or which neighbour was taken. */
  reason: string;
}

const values = z.array(z.object({ value: z.string() }).loose());
const typed = z.array(z.object({ type: z.string(), value: z.string() }).loose());

const Json0 = z
  .object({
    lldp: z.array(
      z
        .object({
          interface: z
            .array(
              z
                .object({
                  name: z.string(),
                  via: z.string().optional(),
                  chassis: z.array(z.object({ id: typed.optional(), name: values.optional() }).loose()).optional(),
                  port: z.array(z.object({ id: typed.optional() }).loose()).optional(),
                })
                .loose(),
            )
            .optional(),
        })
        .loose(),
    ),
  })
  .loose();

/** Limits of the protocol's claims (messages.ts). */
const MAX = 256;

export function lldpFromJson0(doc: unknown, iface: string): LldpReading {
  const parsed = Json0.safeParse(doc);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    return { lldp: null, reason: `lldpctl output is not lldpd's json0 (${first ? `${first.path.join(".")}: ${first.message}` : "invalid"})` };
  }
  const seen = new Map<string, LldpClaim>();
  const skipped: string[] = [];
  for (const entry of parsed.data.lldp) {
    for (const i of entry.interface ?? []) {
      if (i.name !== iface) continue;
      if (i.via !== "LLDP") {
        skipped.push(`a ${i.via ?? "unknown"} neighbour`);
        continue;
      }
      const chassis = i.chassis?.[0];
      const sysName = chassis?.name?.[0]?.value.trim();
      const chassisId = sysName || chassis?.id?.[0]?.value.trim() || "";
      const portId = i.port?.[0]?.id?.[0]?.value.trim() ?? "";
      if (!chassisId || !portId) {
        skipped.push(`a neighbour without ${chassisId ? "a port ID" : "a chassis ID"}`);
        continue;
      }
      if (chassisId.length > MAX || portId.length > MAX) {
        skipped.push(`a neighbour whose chassis or port ID is longer than ${MAX} characters`);
        continue;
      }
      seen.set(JSON.stringify([chassisId, portId]), { chassisId, portId });
    }
  }
  const found = [...seen.values()];
  if (found.length === 1) {
    const n = found[0] as LldpClaim;
    return { lldp: n, reason: `LLDP on ${iface}: ${n.chassisId} port ${n.portId}` };
  }
  if (found.length > 1) {
    return { lldp: null, reason: `${found.length} different LLDP neighbours on ${iface} (${found.map((n) => `${n.chassisId} ${n.portId}`).join(", ")}): ambiguous, no claim` };
  }
  return { lldp: null, reason: `no LLDP neighbour on ${iface}${skipped.length ? ` (ignored ${skipped.join(", ")})` : ""}` };
}

/** Parse lldpctl's text output; bad JSON is no claim, with the reason. */
export function lldpFromLldpctlOutput(text: string, iface: string): LldpReading {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return { lldp: null, reason: "lldpctl output is not JSON" };
  }
  return lldpFromJson0(doc, iface);
}
