/**
 * The TCG event log the firmware handed to the kernel (securityfs `tpm0/binary_bios_measurements`). A container
 * gets a fresh /sys without the securityfs submount, so on the real root, as root, securityfs is mounted when
 * the log is missing (tinkerbell.md §4). Under a test root nothing is mounted.
 */
import { execFile } from "node:child_process";
import { closeSync, existsSync, openSync, readSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { CodedError } from "@fleetd/platform/fleet";
import { readSmall } from "./claims.js";

export const EVENT_LOG_PATH = "sys/kernel/security/tpm0/binary_bios_measurements";
const SECURITYFS = "/sys/kernel/security";
/** The server accepts at most 1 MiB (protocol messages). */
export const MAX_EVENT_LOG = 1 << 20;

export const EVENT_LOG_ERROR_CODES = ["event-log-missing", "event-log-unreadable", "event-log-empty", "event-log-too-large", "securityfs-mount-failed"] as const;
export type EventLogErrorCode = (typeof EVENT_LOG_ERROR_CODES)[number];

export class EventLogError extends CodedError<EventLogErrorCode> {
  override readonly name = "EventLogError";
  constructor(
    code: EventLogErrorCode,
    readonly path: string,
    detail: string,
  ) {
    super(code, `${path}: ${detail}`);
  }
}

export interface EventLog {
  bytes: Uint8Array;
  path: string;
  /** True when this step mounted securityfs to find it. */
  mounted: boolean;
}

function securityfsMounted(): boolean {
  try {
    return readSmall("/proc/self/mounts", 4 << 20)
      .split("\n")
      .some((l) => {
        const [, target, type] = l.split(" ");
        return target === SECURITYFS && type === "securityfs";
      });
  } catch {
    return false;
  }
}

/** The event log at `path`, at most MAX_EVENT_LOG bytes (renew reads it from a configured path). */
export function readEventLogFile(path: string): Uint8Array {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    throw new EventLogError("event-log-unreadable", path, (e as NodeJS.ErrnoException).code ?? (e as Error).message);
  }
  try {
    const buf = Buffer.alloc(MAX_EVENT_LOG + 1);
    let n = 0;
    for (;;) {
      const r = readSync(fd, buf, n, buf.length - n, null);
      if (r === 0) break;
      n += r;
      if (n > MAX_EVENT_LOG) throw new EventLogError("event-log-too-large", path, `larger than ${MAX_EVENT_LOG} bytes (the server's limit)`);
    }
    if (n === 0) throw new EventLogError("event-log-empty", path, "empty");
    return new Uint8Array(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
}

/** Mount securityfs on /sys/kernel/security (needs CAP_SYS_ADMIN; action containers are privileged). */
export async function mountSecurityfs(): Promise<void> {
  try {
    await promisify(execFile)("mount", ["-t", "securityfs", "securityfs", SECURITYFS], { timeout: 10_000 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new EventLogError("securityfs-mount-failed", SECURITYFS, (err.stderr || err.message).trim());
  }
}

export async function readEventLog(root: string): Promise<EventLog> {
  const path = join(root, EVENT_LOG_PATH);
  let mounted = false;
  if (!existsSync(path) && root === "/" && process.getuid?.() === 0 && !securityfsMounted()) {
    await mountSecurityfs();
    mounted = true;
  }
  if (!existsSync(path)) {
    throw new EventLogError(
      "event-log-missing",
      path,
      mounted ? "securityfs is mounted now but has no TPM event log (no TPM driver, or the firmware handed over no TCG2 log: UEFI only)" : "no TPM event log (securityfs not mounted, no TPM, or not UEFI)",
    );
  }
  return { bytes: readEventLogFile(path), path, mounted };
}
