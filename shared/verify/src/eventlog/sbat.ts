/**
 * shim's SbatLevel variable (SBAT revocation level, shim SBAT.md): CSV lines, the first
 * "sbat,1,YYYYMMDDNN", then "<component>,<minimum generation>" per revoked component.
 */
export interface SbatLevel {
  date: string;
  components: Record<string, number>;
}

/** Parse a measured SbatLevel; undefined when it is not in the expected form. */
export function parseSbatLevel(text: string): SbatLevel | undefined {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0);
  const head = lines.shift()?.split(",");
  if (!head || head.length < 3 || head[0] !== "sbat" || !/^\d+$/.test(head[1] ?? "") || !/^\d{10}$/.test(head[2] ?? "")) return undefined;
  const components: Record<string, number> = {};
  for (const l of lines) {
    const [name, gen] = l.split(",");
    if (!name || !gen || !/^\d+$/.test(gen)) return undefined;
    components[name] = Number(gen);
  }
  return { date: head[2]!, components };
}
