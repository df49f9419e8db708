/**
 * Failpoints: named places where a test stops the process dead (SIGKILL to itself), to prove that a restart on
 * the same state loses and doubles nothing. Off unless `FLEETD_FAILPOINTS` names them (comma-separated, read
 * once at start); a server started with it set logs a warning (failpointsArmed). Each fires once per process.
 * No failpoint changes what fleetd decides: it only ends the process at that point.
 */
const armed = new Set((process.env["FLEETD_FAILPOINTS"] ?? "").split(",").map((s) => s.trim()).filter(Boolean));

/** The failpoints this process will stop at (for the start-up warning). */
export function failpointsArmed(): string[] {
  return [...armed];
}

export function failpoint(name: string): void {
  if (!armed.delete(name)) return;
  process.stderr.write(`fleetd: failpoint ${name}: stopping the process (SIGKILL)\n`);
  process.kill(process.pid, "SIGKILL");
}
