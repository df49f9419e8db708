/**
 * Loading a PKCS#11 library through pkcs11js. A library may be initialized once per process, so modules are
 * shared by path and reference-counted; each module also owns the one signing queue for its device.
 * pkcs11js is a native addon and is required lazily: importing `@fleetd/platform/pki` never loads it.
 */
import { createRequire } from "node:module";
import type { PKCS11 } from "pkcs11js";
import { PkiError } from "./errors.js";
import { SerialQueue } from "./serialQueue.js";

export type Pkcs11js = typeof import("pkcs11js");

let binding: Pkcs11js | undefined;
export function pkcs11js(): Pkcs11js {
  if (!binding) {
    try {
      binding = createRequire(import.meta.url)("pkcs11js") as Pkcs11js;
    } catch (e) {
      throw new PkiError("pkcs11-module", `the pkcs11js native addon is not available (was its build allowed by pnpm?): ${(e as Error).message}`);
    }
  }
  return binding;
}

export interface Pkcs11Module {
  readonly path: string;
  readonly api: PKCS11;
  /** Every signature made through this library waits its turn here. */
  readonly queue: SerialQueue;
  release(): void;
}

interface Entry {
  api: PKCS11;
  queue: SerialQueue;
  refs: number;
}
const loaded = new Map<string, Entry>();

export function acquirePkcs11Module(path: string): Pkcs11Module {
  let entry = loaded.get(path);
  if (!entry) {
    const p = pkcs11js();
    const api = new p.PKCS11();
    try {
      api.load(path);
    } catch (e) {
      throw new PkiError("pkcs11-module", `cannot load PKCS#11 module ${path}: ${(e as Error).message}`);
    }
    try {
      // the library may be called from libuv worker threads (async C_Sign)
      api.C_Initialize({ flags: p.CKF_OS_LOCKING_OK });
    } catch (e) {
      if (pkcs11Code(e) !== p.CKR_CRYPTOKI_ALREADY_INITIALIZED) {
        api.close();
        throw new PkiError("pkcs11-module", `cannot initialize PKCS#11 module ${path}: ${(e as Error).message}`);
      }
    }
    entry = { api, queue: new SerialQueue(), refs: 0 };
    loaded.set(path, entry);
  }
  entry.refs++;
  const e = entry;
  let released = false;
  return {
    path,
    api: e.api,
    queue: e.queue,
    release() {
      if (released) return;
      released = true;
      e.refs--;
      if (e.refs > 0) return;
      loaded.delete(path);
      try {
        e.api.C_Finalize();
      } finally {
        e.api.close();
      }
    },
  };
}

/** The CKR_ code of a pkcs11js error, or undefined for anything else. */
export function pkcs11Code(e: unknown): number | undefined {
  if (e instanceof Error && e.name === "Pkcs11Error" && typeof (e as { code?: unknown }).code === "number") {
    return (e as unknown as { code: number }).code;
  }
  return undefined;
}

/** "CKR_PIN_INCORRECT" for a pkcs11js error (its message is the CKR_ name), else the error's message. */
export function pkcs11Reason(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
