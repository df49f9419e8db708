/**
 * The transient handles one protocol step loaded, flushed together at its end (also when the step fails).
 * `/dev/tpmrm0` would flush them on close anyway; flushing explicitly keeps a long-lived connection (swtpm, a
 * shared TPM) from running out of object slots.
 */
import type { TpmClient } from "./client.js";

export class Transients {
  private readonly handles: number[] = [];
  constructor(readonly tpm: TpmClient) {}

  /** Remembers an object's handle and returns the object. */
  keep<T extends { handle: number }>(obj: T): T {
    this.handles.push(obj.handle);
    return obj;
  }

  /** Flushes one handle now. */
  async flush(handle: number): Promise<void> {
    const i = this.handles.indexOf(handle);
    if (i >= 0) this.handles.splice(i, 1);
    await this.tpm.flushContext(handle);
  }

  /** Flushes every remembered handle, newest first; returns the errors (a flush failing must not hide the step's own error). */
  async flushAll(): Promise<unknown[]> {
    const errors: unknown[] = [];
    while (this.handles.length > 0) {
      const h = this.handles.pop();
      if (h === undefined) break;
      await this.tpm.flushContext(h).catch((e: unknown) => errors.push(e));
    }
    return errors;
  }
}

/** Runs `fn` with a Transients scope and flushes it afterwards, whether `fn` succeeded or not. */
export async function withTransients<T>(tpm: TpmClient, fn: (t: Transients) => Promise<T>): Promise<T> {
  const t = new Transients(tpm);
  try {
    return await fn(t);
  } finally {
    await t.flushAll();
  }
}

/** TPM2_FlushContext of one transient object or session. */
export function flush(tpm: TpmClient, handle: number): Promise<void> {
  return tpm.flushContext(handle);
}
