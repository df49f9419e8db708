/**
 * A lab machine behind its BMC: the machine's power and boot device are what its Redfish BMC (sushy-tools'
 * emulator, tests/src/harness/redfish.ts; its fake driver keeps the system's state, this follower makes a QEMU
 * machine live it, as sushy's libvirt driver would with a libvirt domain) says. Whoever drives the BMC — Rufio's
 * Jobs, an operator's Redfish call — drives the machine:
 *
 *  - PowerState On and no machine running → a power-on: the machine boots from the BMC's boot device first (`Pxe` →
 *    the NIC, then the disk; `Hdd` → the disk, then the NIC; anything else → its firmware's own order,
 *    `defaultBoot`). sushy keeps one boot device and reports it `Continuous` (its libvirt driver sets the domain's
 *    boot order: it ignores BootSourceOverrideEnabled), so this follower does what sushy's libvirt driver does
 *    with a domain: the device stays first until someone sets another. As with Tinkerbell's Smee, a machine whose
 *    netboot is not allowed gets no boot file and its firmware goes on to the disk;
 *  - PowerState Off while it runs → a hard power-off (QEMU killed);
 *  - the guest powers itself off (`reboot: Power down`) → the BMC is told (ForceOff), so it reports Off;
 *  - the guest reboots (`reboot: Restarting system`; QEMU runs with -no-reboot) → the next boot, override
 *    considered again, as firmware asks the BMC at every reset.
 *
 * Each boot is a new `Machine` (QEMU process, console file); `boots` keeps them all, in order.
 */
import type { RedfishEmulator } from "../harness/redfish.js";
import type { Machine } from "./machine.js";

export type BootDevice = "network" | "disk";

export interface BmcMachineOptions {
  name: string;
  bmc: RedfishEmulator;
  /** Starts one boot of the machine from `from` (the same TPM, disk, NIC and SMBIOS every time). */
  boot(from: BootDevice, n: number): Promise<Machine>;
  /** The firmware's own boot order's first device (used without a BMC override). */
  defaultBoot: BootDevice;
  /** How often the BMC is read; default 500 ms. */
  pollMs?: number;
}

export interface BmcBoot {
  n: number;
  machine: Machine;
  from: BootDevice;
  /** What started it: the BMC powered the machine on, or the guest rebooted. */
  cause: "power-on" | "reboot";
  /** The BMC's boot device at that boot (target/enabled), if it names one this follower knows. */
  override?: string;
  /** How the boot ended, once it did. */
  end?: "power-off by the BMC" | "guest power-off" | "guest reboot" | "QEMU exited" | "follower stopped";
}

export interface BmcMachine {
  readonly name: string;
  readonly bmc: RedfishEmulator;
  /** Every boot so far, in order. */
  boots(): readonly BmcBoot[];
  /** The running boot, if any. */
  current(): BmcBoot | undefined;
  /** Resolves with boot `n` (1-based) once it started. */
  waitForBoot(n: number, timeoutMs: number): Promise<BmcBoot>;
  /** Resolves once no boot runs and the BMC reports Off. */
  waitForOff(timeoutMs: number): Promise<void>;
  /** The follower's own notes (power changes it saw, errors reading the BMC), for failure messages. */
  notes(): string[];
  /** Stops following and powers the machine off (QEMU killed); the BMC is left as it is. */
  stop(): Promise<void>;
}

const TARGETS: Record<string, BootDevice> = { Pxe: "network", Hdd: "disk" };

export function followBmc(o: BmcMachineOptions): BmcMachine {
  const all: BmcBoot[] = [];
  const notes: string[] = [];
  let running: BmcBoot | undefined;
  let active = true;
  let failures = 0;
  /** When this follower told the BMC of a power-off the guest made (until the BMC reads Off). */
  let offSince: number | undefined;
  const note = (s: string) => notes.push(`${new Date().toISOString()} ${s}`);
  const systemPath = `/redfish/v1/Systems/${o.bmc.systemId}`;

  const start = async (cause: BmcBoot["cause"]): Promise<void> => {
    const { BootSourceOverrideTarget: target, BootSourceOverrideEnabled: enabled } = (await o.bmc.system()).Boot;
    const device = target !== undefined && enabled !== "Disabled" ? TARGETS[target] : undefined;
    const from = device ?? o.defaultBoot;
    const n = all.length + 1;
    const machine = await o.boot(from, n);
    const b: BmcBoot = { n, machine, from, cause, ...(device ? { override: `${target}/${enabled ?? "?"}` } : {}) };
    all.push(b);
    running = b;
    note(`boot ${n} (${cause}) from ${from}${b.override ? ` (BMC boot device ${b.override})` : ""}`);
  };

  const tick = async (): Promise<void> => {
    const power = await o.bmc.powerState();
    const b = running;
    if (b && b.machine.qemu.hasExited()) {
      const con = b.machine.console();
      const reboot = /reboot: Restarting system/.test(con.slice(-4000));
      const off = /reboot: Power down/.test(con.slice(-4000));
      running = undefined;
      await b.machine.stop();
      b.end = reboot ? "guest reboot" : off ? "guest power-off" : "QEMU exited";
      note(`boot ${b.n} ended: ${b.end}`);
      if (reboot && power === "On") return start("reboot");
      if (power !== "Off") {
        const r = await o.bmc.request("POST", `${systemPath}/Actions/ComputerSystem.Reset`, { ResetType: "ForceOff" });
        if (r.status >= 300) note(`telling the BMC of the power-off failed: HTTP ${r.status} ${r.body.slice(0, 200)}`);
        // sushy's fake driver changes the power state 1–11 s after the request: until it reads Off, "On" is the
        // old state, not a power-on
        else offSince = Date.now();
      }
      return;
    }
    if (offSince !== undefined) {
      if (power === "On" && Date.now() - offSince < 30_000) return;
      offSince = undefined;
    }
    if (power === "On" && !running) return start("power-on");
    if (power === "Off" && b) {
      running = undefined;
      b.end = "power-off by the BMC";
      note(`boot ${b.n} ended: ${b.end}`);
      await b.machine.stop();
    }
  };

  const loop = (async () => {
    while (active) {
      try {
        await tick();
        failures = 0;
      } catch (e) {
        if (++failures <= 3 || failures % 60 === 0) note(`reading or following the BMC failed (${failures}): ${e instanceof Error ? e.message : String(e)}`);
      }
      await new Promise((r) => setTimeout(r, o.pollMs ?? 500));
    }
  })();

  const until = async <T>(what: string, timeoutMs: number, f: () => T | undefined | Promise<T | undefined>): Promise<T> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = await f();
      if (v !== undefined) return v;
      if (Date.now() > deadline) throw new Error(`${o.name}: ${what} within ${timeoutMs} ms; the follower's notes:\n${notes.join("\n")}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  };

  return {
    name: o.name,
    bmc: o.bmc,
    boots: () => all,
    current: () => running,
    waitForBoot: (n, timeoutMs) => until(`no boot ${n}`, timeoutMs, () => all[n - 1]),
    waitForOff: (timeoutMs) => until("not powered off", timeoutMs, async () => (!running && (await o.bmc.powerState()) === "Off" ? true : undefined)).then(() => undefined),
    notes: () => [...notes],
    async stop() {
      active = false;
      await loop;
      const b = running;
      running = undefined;
      if (b) {
        b.end = "follower stopped";
        await b.machine.stop();
      }
    },
  };
}
