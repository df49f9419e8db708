/**
 * A machine's sysfs/procfs as files under a directory, laid out as the kernel lays them out (DMI values,
 * /sys/class/net links into /sys/devices, /proc/net/route, the securityfs event log). It is the attest step's
 * input in tests (FLEETD_ROOT), not a stand-in for a platform API: the step reads files either way.
 */
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

export interface FakeNic {
  name: string;
  mac: string;
  up?: boolean;
  /** Under /sys/devices/virtual/net (bridge, veth, bond...). */
  virtual?: boolean;
}

export interface FakeRoot {
  serial?: string;
  uuid?: string;
  nics?: FakeNic[];
  /** Interface holding the IPv4 default route in /proc/net/route. */
  defaultRoute?: string;
  eventLog?: Uint8Array;
}

function write(path: string, data: string | Uint8Array): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, data);
}

export function writeFakeRoot(root: string, spec: FakeRoot): string {
  if (spec.serial !== undefined) write(join(root, "sys/class/dmi/id/product_serial"), spec.serial + "\n");
  if (spec.uuid !== undefined) write(join(root, "sys/class/dmi/id/product_uuid"), spec.uuid + "\n");
  const nics: FakeNic[] = [{ name: "lo", mac: "00:00:00:00:00:00", up: true, virtual: true }, ...(spec.nics ?? [])];
  mkdirSync(join(root, "sys/class/net"), { recursive: true });
  nics.forEach((n, i) => {
    const rel = n.virtual ? `devices/virtual/net/${n.name}` : `devices/pci0000:00/0000:00:${(i + 3).toString(16).padStart(2, "0")}.0/net/${n.name}`;
    write(join(root, "sys", rel, "address"), n.mac + "\n");
    write(join(root, "sys", rel, "operstate"), (n.up ?? true ? "up" : "down") + "\n");
    rmSync(join(root, "sys/class/net", n.name), { force: true });
    symlinkSync(`../../${rel}`, join(root, "sys/class/net", n.name));
  });
  const route = ["Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"];
  if (spec.defaultRoute) route.push(`${spec.defaultRoute}\t00000000\t0100140A\t0003\t0\t0\t0\t00000000\t0\t0\t0`);
  for (const n of spec.nics ?? []) route.push(`${n.name}\t0000140A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0`);
  write(join(root, "proc/net/route"), route.join("\n") + "\n");
  if (spec.eventLog) write(join(root, "sys/kernel/security/tpm0/binary_bios_measurements"), spec.eventLog);
  return root;
}
