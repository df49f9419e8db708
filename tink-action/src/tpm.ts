/**
 * The TPM the action talks to: the kernel's resource manager `/dev/tpmrm0` on a machine; swtpm's TCP or Unix
 * command channel in tests, behind FlushOnCloseTransport so transients are flushed on close as tpmrm0 does.
 * A raw `/dev/tpm0` gets the same treatment.
 */
import { DeviceTransport, FlushOnCloseTransport, TcpTransport, TpmClient, UnixTransport, type TpmTransport } from "@fleetd/shared/tpmclient/index";
import type { TpmSpec } from "./config.js";

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
