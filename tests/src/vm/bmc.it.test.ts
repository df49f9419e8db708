/**
 * A lab machine behind its Redfish BMC (./bmcMachine.ts): Rufio (tink-controller's BMC controller, v0.25.0) drives
 * sushy-tools' emulator, and the emulator's system state drives a real QEMU/OVMF machine — power on, power off,
 * boot device — as sushy's libvirt driver drives a domain. What the tests look at is the machine's console: which
 * image really booted, and that it really stopped.
 */
import { strict as assert } from "node:assert";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { startRedfishEmulator, type RedfishEmulator } from "../harness/redfish.js";
import { BmcJob, bmcSecret, condition, create, get, Machine as BmcMachineCr, machineBody, poll, RUFIO_TASK_RACE, startEnv, type Env } from "../tinkerbell/fixtures.js";
import { startBootNetwork, type BootNetwork, type SwitchPort } from "./bootNetwork.js";
import { followBmc, type BmcMachine } from "./bmcMachine.js";
import { actionBundle, serveHookos } from "./hookos.js";
import { labKit, type LabKit } from "./kit.js";
import { startMachine } from "./machine.js";
import { manufactureMachineTpm, type MachineTpm } from "./machineTpm.js";

const BOOT_FILE = "hookos.efi";
/** A hang guard, not a judgement (a boot to the HookOS's /init takes about 30 s of wall time on a quiet machine). */
const BOOT_TIMEOUT_MS = 10 * 60_000;
const MAC = "52:54:00:fd:01:01";

let env: Env;
let bmc: RedfishEmulator;
let kit: LabKit;
let net: BootNetwork;
let port: SwitchPort;
let tpm: MachineTpm;
let dir: string;
let vm: BmcMachine;
let jobs = 0;

before(async () => {
  kit = await labKit();
  dir = mkdtempSync(join(tmpdir(), "fleetd-vm-bmc-"));
  [env, bmc, net, tpm] = await Promise.all([
    startEnv("fleetd-vm-bmc"),
    startRedfishEmulator({ powerState: "Off", mac: MAC }),
    startBootNetwork({ bootFile: BOOT_FILE }),
    manufactureMachineTpm({ caDir: join(dir, "manufacturer") }),
  ]);
  port = await net.addPort();
  await bmcSecret(env, "vm-bmc", bmc.username, bmc.password);
  await create(env, "machines", machineBody("vm-bmc", bmc.port, "vm-bmc", env.namespace));
  // The machine's disk holds an installed OS (the lab OS: a UKI signed by the lab's Talos key); its netboot is
  // served an action that waits for an attestation server nobody answers (it retries until the machine is off).
  const disk = join(dir, "disk.img");
  copyFileSync(kit.labos.disk, disk);
  const bundle = await actionBundle(join(dir, "action.mjs"));
  serveHookos(net, MAC, { image: kit.image("hookos"), bootFile: BOOT_FILE, bundle, job: { server: "http://10.99.0.1:9", mode: "intake", workflow: "bmc-test", timeoutSeconds: 3600 } });
  const smbios = { serial: "LAB-BMC-1", uuid: randomUUID() };
  vm = followBmc({
    name: "vm-bmc",
    bmc,
    defaultBoot: "disk",
    boot: (from, n) => startMachine({ name: `vm-bmc-${n}`, kit, network: net, port, tpm, vars: "secureboot", mac: MAC, smbios, disk, bootFrom: from }),
  });
}, { timeout: 60 * 60_000 });

after(async () => {
  await vm?.stop();
  for (const b of vm?.boots() ?? []) b.machine.remove();
  await Promise.all([env?.stop(), bmc?.stop(), net?.stop()]);
  tpm?.remove();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A Rufio Job on the machine's BMC, created again when Rufio v0.25.0 fails it by its own Task race. */
async function runJob(what: string, tasks: Record<string, unknown>[]): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const name = `vm-${++jobs}`;
    await create(env, "jobs", { apiVersion: "bmc.tinkerbell.org/v1alpha1", kind: "Job", metadata: { name }, spec: { machineRef: { name: "vm-bmc", namespace: env.namespace }, tasks } });
    const j = await poll(env, `Job ${name} (${what}) Completed or Failed`, async () => {
      const c = BmcJob.parse(await get(env, "jobs", name)).status?.conditions ?? [];
      return condition(c, "Completed")?.status === "True" || condition(c, "Failed")?.status === "True" ? c : undefined;
    }, 180_000);
    const failed = condition(j, "Failed")?.message;
    if (failed === undefined) return;
    if (attempt < 3 && RUFIO_TASK_RACE.test(failed)) continue;
    assert.fail(`Rufio failed the Job (${what}): ${failed}; the follower:\n${vm.notes().join("\n")}`);
  }
}

test("Rufio's Job (PXE boot device, power on) netboots the machine into the signed HookOS; its power-off Job stops the machine; the Machine reports off", { timeout: 2 * BOOT_TIMEOUT_MS }, async () => {
  await runJob("netboot", [{ oneTimeBootDeviceAction: { device: ["pxe"], efiBoot: true } }, { powerAction: "on" }]);
  const b = await vm.waitForBoot(1, 120_000);
  assert.equal(b.from, "network", `boot 1 from the network: ${JSON.stringify({ ...b, machine: undefined })}`);
  assert.equal(b.cause, "power-on");
  await b.machine.waitForConsole(/\[fleetd-hookos\] action start: attest/, "the HookOS's action", BOOT_TIMEOUT_MS);
  const con = b.machine.console();
  assert.match(con, /NBP file downloaded successfully/, "the firmware netbooted");
  assert.match(con, /EFI stub: UEFI Secure Boot is enabled/, "the signed HookOS, Secure Boot on");
  assert.doesNotMatch(con, /\[fleetd-labos\]/, "not the OS on the disk");

  await runJob("power off", [{ powerAction: "off" }]);
  await vm.waitForOff(120_000);
  assert.equal(b.end, "power-off by the BMC");
  assert.ok(b.machine.qemu.hasExited(), "QEMU is gone");
  assert.doesNotMatch(b.machine.console(), /\[fleetd-hookos\] action exit=/, "the action never ended by itself: the machine was cut off");
  await poll(env, "Machine vm-bmc off", async () => ((BmcMachineCr.parse(await get(env, "machines", "vm-bmc")).status?.powerState === "off") ? true : undefined), 60_000);
});

test("Rufio's Job (disk boot device, power on) boots the installed OS from the disk; the guest's own power-off is the BMC's Off", { timeout: 2 * BOOT_TIMEOUT_MS }, async () => {
  await runJob("boot from disk", [{ oneTimeBootDeviceAction: { device: ["disk"], efiBoot: true } }, { powerAction: "on" }]);
  const b = await vm.waitForBoot(2, 120_000);
  assert.equal(b.from, "disk", `boot 2 from the disk: ${JSON.stringify({ ...b, machine: undefined })}`);
  // The lab OS, with no install code in its META, ends its boot by powering the machine off.
  await b.machine.waitForConsole(/\[fleetd-labos\] error: [^\n]*META/, "the lab OS's refusal to go on without an install code", BOOT_TIMEOUT_MS);
  const con = b.machine.console();
  assert.doesNotMatch(con, /Start PXE over IPv4/, "the firmware did not netboot");
  assert.match(con, /EFI stub: UEFI Secure Boot is enabled/, "the lab OS UKI (Talos key), Secure Boot on");
  await vm.waitForOff(120_000);
  assert.equal(b.end, "guest power-off");
  assert.equal(await bmc.powerState(), "Off", "the BMC reports the guest's power-off");
  assert.equal(vm.boots().length, 2, "no boot after the power-off");
});
