/**
 * How a config file a SPIRE process ran from differs from the shipped one: the keys whose quoted value changed,
 * one `key = "value"` line each. Anything else that differs (another line, a changed key, an added block, an
 * unquoted value) is an error naming the line, so a test built on it cannot pass when the harness runs a
 * different file.
 */
const ASSIGNMENT = /^(\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*=\s*")([^"\n]*)("\s*)$/;

export function changedValues(shipped: string, ran: string): Map<string, { shipped: string; ran: string }> {
  const a = shipped.split("\n");
  const b = ran.split("\n");
  if (a.length !== b.length) throw new Error(`the file has ${b.length} lines, the shipped one ${a.length}`);
  const changed = new Map<string, { shipped: string; ran: string }>();
  a.forEach((line, i) => {
    const other = b[i] as string;
    if (line === other) return;
    const x = ASSIGNMENT.exec(line);
    const y = ASSIGNMENT.exec(other);
    if (!x || !y || x[1] !== y[1] || x[2] !== y[2] || x[3] !== y[3] || x[5] !== y[5]) throw new Error(`line ${i + 1} differs in more than a quoted value:\n  shipped: ${line}\n  ran:     ${other}`);
    const key = x[2] as string;
    if (changed.has(key)) throw new Error(`${key} changed twice`);
    changed.set(key, { shipped: x[4] as string, ran: y[4] as string });
  });
  return changed;
}
