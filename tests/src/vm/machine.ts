/**
 * A lab machine: QEMU with TCG (KVM does not work on these machines: lab-machines.md), q35, one vCPU, OVMF with a
 * copy of one of the kit's variable stores, the machine's own swtpm as a CRB TPM, a virtio disk (an image file),
 * a virtio NIC on a switch port of the boot network (firmware PXE: `romfile=` empty, so OVMF's own network stack
 * boots it, not QEMU's iPXE ROM), SMBIOS serial and UUID, and the kit's runtime share over virtio-9p. The serial
 * console goes to a file that `waitForConsole` watches; boots are timed from QEMU's start, and QEMU's CPU time
 * is sampled from /proc while it runs.
 *
 *   const m = await startMachine({ name, kit, network, port, tpm, vars: "secureboot", smbios, mac });
 *   await m.waitForConsole(/\[fleetd-hookos\] action exit=(\d+)/, "the action's end", 240_000);
 *   await m.stop();
 */
import { closeSync, copyFileSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { registerCleanup, startDaemon, type Daemon } from "../harness/process.js";
import type { BootNetwork, SwitchPort } from "./bootNetwork.js";
import { OVMF_CODE, type LabKit, type VarsStore } from "./kit.js";
import type { MachineTpm, ServedTpm } from "./machineTpm.js";

export interface MachineOptions {
  name: string;
  kit: LabKit;
  network: BootNetwork;
  port: SwitchPort;
  tpm: MachineTpm;
  vars: VarsStore;
  smbios: { serial: string; uuid: string };
  mac: string;
  /** The disk image: an existing file (kept), or a new sparse one of `diskMiB` (default 64) in the machine's dir. */
  disk?: string;
  diskMiB?: number;
  /** Guest memory; default 1024 MiB (the lab's ceiling). */
  memoryMiB?: number;
  /** The boot device the BMC set: the NIC (firmware PXE, the default) or the disk (the installed OS). */
  bootFrom?: "network" | "disk";
}

/** A line the lab HookOS printed (`[fleetd-hookos] … (uptime Ns)`), with when the host saw it. */
export interface HookosMarker {
  text: string;
  /** The guest kernel's uptime when it printed the line. */
  uptimeSeconds: number;
  /** Milliseconds from QEMU's start until the harness read the line. */
  atMs: number;
}

export interface Machine {
  readonly name: string;
  readonly mac: string;
  readonly dir: string;
  readonly consoleFile: string;
  readonly disk: string;
  readonly port: SwitchPort;
  readonly smbios: { serial: string; uuid: string };
  readonly tpm: ServedTpm;
  readonly qemu: Daemon;
  /** The console so far. */
  console(): string;
  lines(): ConsoleLine[];
  markers(): HookosMarker[];
  /** When the first line matching `re` was read (undefined: not yet). */
  firstLine(re: RegExp): number | undefined;
  /** Resolves with the first match in the console (earlier output included), and when it was read. */
  waitForConsole(pattern: RegExp, what: string, timeoutMs: number): Promise<{ match: RegExpExecArray; atMs: number }>;
  /** QEMU's user + system CPU seconds (the last sample while it ran). */
  cpuSeconds(): number;
  /** Milliseconds from QEMU's start until now, or until it ended. */
  elapsedMs(): number;
  /** Kill QEMU (if it still runs) and the boot's swtpm; the machine's dir (console, disk) stays until `remove()`. */
  stop(): Promise<void>;
  remove(): void;
}

const CLK_TCK = 100; // Linux's USER_HZ on x86-64

/** utime + stime of a process, in seconds; undefined once it is gone. */
function cpuOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK; // fields 14 and 15 of proc(5), after pid and comm
  } catch {
    return undefined;
  }
}

const MARKER = /^\[fleetd-hookos\] (.*) \(uptime ([\d.]+)s\)$/;

/** A complete console line and when the harness read it (milliseconds from QEMU's start). */
export interface ConsoleLine {
  atMs: number;
  text: string;
}

export async function startMachine(o: MachineOptions): Promise<Machine> {
  const dir = mkdtempSync(join(tmpdir(), `fleetd-vm-${o.name}-`));
  const unregister = registerCleanup(() => rmSync(dir, { recursive: true, force: true }));
  const vars = join(dir, "vars.fd");
  copyFileSync(o.kit.vars(o.vars), vars);
  const disk = o.disk ?? join(dir, "disk.img");
  if (!o.disk) {
    writeFileSync(disk, "");
    truncateSync(disk, (o.diskMiB ?? 64) << 20);
  }
  const consoleFile = join(dir, "console.log");
  writeFileSync(consoleFile, "");
  const tpm = await o.tpm.serve();
  const [nicIndex, diskIndex] = o.bootFrom === "disk" ? [2, 1] : [1, 2];
  const args = [
    "-name",
    o.name,
    "-machine",
    "q35",
    "-accel",
    "tcg",
    "-cpu",
    "max",
    "-smp",
    "1",
    "-m",
    String(o.memoryMiB ?? 1024),
    "-nodefaults",
    "-display",
    "none",
    "-no-reboot",
    "-drive",
    `if=pflash,format=raw,unit=0,readonly=on,file=${OVMF_CODE}`,
    "-drive",
    `if=pflash,format=raw,unit=1,file=${vars}`,
    "-chardev",
    `socket,id=chrtpm,path=${tpm.ctrlSocket}`,
    "-tpmdev",
    "emulator,id=tpm0,chardev=chrtpm",
    "-device",
    "tpm-crb,tpmdev=tpm0",
    "-netdev",
    `tap,id=net0,ifname=${o.port.tap},script=no,downscript=no`,
    "-device",
    `virtio-net-pci,netdev=net0,mac=${o.mac},romfile=,bootindex=${nicIndex}`,
    "-drive",
    `if=none,id=disk0,format=raw,file=${disk}`,
    "-device",
    `virtio-blk-pci,drive=disk0,bootindex=${diskIndex}`,
    "-virtfs",
    `local,path=${o.kit.runtimeDir},mount_tag=fleetd-runtime,security_model=none,readonly=on`,
    "-smbios",
    `type=1,manufacturer=fleetd lab,product=lab machine,serial=${o.smbios.serial},uuid=${o.smbios.uuid}`,
    "-chardev",
    `file,id=con0,path=${consoleFile}`,
    "-serial",
    "chardev:con0",
  ];
  const started = Date.now();
  // QEMU opens the tap, so it runs in the boot network's namespace (`ip netns exec` execs it: same pid).
  const qemu = startDaemon(`qemu (${o.name})`, "ip", ["netns", "exec", o.network.netns, "qemu-system-x86_64", ...args]);

  let text = "";
  let readOffset = 0;
  let partial = "";
  const lines: ConsoleLine[] = [];
  let cpu = 0;
  const poll = () => {
    const c = cpuOf(qemu.pid);
    if (c !== undefined && !qemu.hasExited()) cpu = c;
    let size: number;
    try {
      size = statSync(consoleFile).size;
    } catch {
      return;
    }
    if (size <= readOffset) return;
    const fd = openSync(consoleFile, "r");
    try {
      const buf = Buffer.alloc(size - readOffset);
      const n = readSync(fd, buf, 0, buf.length, readOffset);
      readOffset += n;
      const chunk = buf.subarray(0, n).toString("latin1");
      text += chunk;
      const at = Date.now() - started;
      const parts = (partial + chunk).split("\n");
      partial = parts.pop() ?? "";
      for (const l of parts) lines.push({ atMs: at, text: l.replace(/\r$/, "") });
    } finally {
      closeSync(fd);
    }
  };
  const timer = setInterval(poll, 100);
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    poll();
    clearInterval(timer);
    await qemu.stop(2000);
    await tpm.stop();
  };
  let endedAt: number | undefined;
  void qemu.exited.then(() => {
    endedAt = Date.now();
    poll();
  });

  return {
    name: o.name,
    mac: o.mac,
    dir,
    consoleFile,
    disk,
    port: o.port,
    smbios: o.smbios,
    tpm,
    qemu,
    console: () => (poll(), text),
    lines: () => (poll(), [...lines]),
    markers: () => {
      poll();
      return lines.flatMap((l) => {
        const m = MARKER.exec(l.text);
        return m ? [{ text: m[1] as string, uptimeSeconds: Number(m[2]), atMs: l.atMs }] : [];
      });
    },
    firstLine: (re) => {
      poll();
      return lines.find((l) => re.test(l.text))?.atMs;
    },
    async waitForConsole(pattern, what, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      const re = new RegExp(pattern.source, pattern.flags.replace("g", ""));
      for (;;) {
        poll();
        const m = re.exec(text);
        if (m) return { match: m, atMs: Date.now() - started };
        const tail = () => text.slice(-3000).replace(/\x1b\[[0-9;=]*[A-Za-z]/g, "");
        if (qemu.hasExited()) {
          poll();
          const again = re.exec(text);
          if (again) return { match: again, atMs: Date.now() - started };
          throw new Error(`${o.name}: QEMU ended before ${what} (${qemu.output().trim() || "no output"}); console:\n${tail()}`);
        }
        if (Date.now() > deadline) throw new Error(`${o.name}: no ${what} on the console within ${timeoutMs} ms; console:\n${tail()}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    cpuSeconds: () => (poll(), cpu),
    elapsedMs: () => (endedAt ?? Date.now()) - started,
    stop,
    remove() {
      rmSync(dir, { recursive: true, force: true });
      unregister();
    },
  };
}
