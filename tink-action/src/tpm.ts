/**
 * The TPM the action talks to: the kernel's resource manager `/dev/tpmrm0` on a machine; swtpm's TCP or Unix
 * command channel in tests, behind FlushOnCloseTransport so transients are flushed on close as tpmrm0 does.
 * A raw `/dev/tpm0` gets the same treatment.
 */
import { DeviceTransport, FlushOnCloseTransport, TcpTransport, TpmClient, UnixTransport, type TpmTransport } from "@fleetd/platform/tpmclient";
import { detectTpmFamily, type TpmFamily } from "@fleetd/platform/tpm12client";
import { existsSync } from "node:fs";
import { DEFAULT_TPM, type TpmSpec } from "./config.js";

/**
 * The TPM's command channel without a resource manager in front: what TPM family detection and the TPM 1.2 client
 * use (FlushOnCloseTransport speaks TPM 2.0; a TPM 1.2 has no /dev/tpmrm0, only /dev/tpm0).
 */
/**
 * The TPM to use: the configured one, except that the default `/dev/tpmrm0` falls back to `/dev/tpm0` where the
 * kernel has no resource manager device — a TPM 1.2 (the kernel offers tpmrm only for TPM 2.0).
 */
export function resolveTpm(spec: TpmSpec, exists: (p: string) => boolean = existsSync): TpmSpec {
  if (spec.kind === "device" && spec.path === DEFAULT_TPM && !exists(spec.path) && exists("/dev/tpm0")) return { kind: "device", path: "/dev/tpm0" };
  return spec;
}

export function openRawTransport(spec: TpmSpec): TpmTransport {
  switch (spec.kind) {
    case "tcp":
      return new TcpTransport(spec.host, spec.port);
    case "unix":
      return new UnixTransport(spec.path);
    case "device":
      return new DeviceTransport(spec.path);
  }
}

/** Which TPM is there (tpm12client/detect.ts), on a connection of its own that is closed again. */
export async function tpmFamily(spec: TpmSpec): Promise<TpmFamily> {
  const t = openRawTransport(spec);
  try {
    return await detectTpmFamily(t);
  } finally {
    await t.close().catch(() => undefined);
  }
}

export function openTpm(spec: TpmSpec): TpmClient {
  let t: TpmTransport;
  switch (spec.kind) {
    case "tcp":
      t = new FlushOnCloseTransport(new TcpTransport(spec.host, spec.port));
      break;
    case "unix":
      t = new FlushOnCloseTransport(new UnixTransport(spec.path));
      break;
    case "device":
      t = /\/tpmrm\d+$/.test(spec.path) ? new DeviceTransport(spec.path) : new FlushOnCloseTransport(new DeviceTransport(spec.path));
      break;
  }
  return new TpmClient(t);
}

export function describeTpm(spec: TpmSpec): string {
  return spec.kind === "tcp" ? `swtpm:${spec.host}:${spec.port}` : spec.kind === "unix" ? `unix:${spec.path}` : spec.path;
}
