/** Durable small-file writes for handled.log (handled.ts): whole files by writeFileAtomic (@fleetd/platform/state), appends fsynced. */
import { closeSync, fsyncSync, mkdirSync, openSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { writeFileAtomic } from "@fleetd/platform/state";

export function writeDurable(path: string, content: string): void {
  writeFileAtomic(path, content, 0o600);
}

/** Appends one line and fsyncs (an append-only log). */
export function appendDurable(path: string, line: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const fd = openSync(path, "a", 0o600);
  try {
    writeSync(fd, line.endsWith("\n") ? line : line + "\n");
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
