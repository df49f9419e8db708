/**
 * The refusal matrix of the attestation protocol (refusalMatrix.ts), end to end on the real world: NetBox,
 * swtpm, SoftHSM2, the server, and tink-action's write-meta writing every install code a machine gets to its
 * disk (a GPT image whose SHA-256 a refusal must leave as it was). The machines are built from the honest
 * client's steps (machine.ts) and differ from it in one way each. The same matrix runs against the protocol
 * engine alone in tests/src/unit/platform/protocol/refusals.test.ts; this run is what proves the engine's
 * wiring to NetBox, swtpm and PKCS#11.
 */
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { listDevices, patchDevice, readJournal } from "@fleetd/platform/netbox";
import { gatherEks, type CertifiedKey, type PresentedEk } from "@fleetd/platform/protocol/client";
import { createAk, type KeyBlobs } from "@fleetd/platform/tpmclient";
import { buildGptImage } from "@fleetd/testkit/talosMeta";
import { advread, repoRoot, TALOS_VERSION } from "../talos/goTools.js";
import * as steps from "./machine.js";
import { MATRIX_MACHINES, refusalMatrix, type RefusalWorld } from "./refusalMatrix.js";
import { startWorld, type World, type WorldMachine } from "./world.js";

let w: World;
before(async () => {
  w = await startWorld({ talosVersion: TALOS_VERSION, machines: MATRIX_MACHINES });
}, { timeout: 20 * 60_000 });
after(async () => {
  await w?.stop();
});

async function device(name: string) {
  const [d] = await listDevices(w.admin, { name });
  assert.ok(d, `device ${name} exists`);
  return d;
}

let disks = 0;
const world = (): RefusalWorld<steps.Machine, PresentedEk, KeyBlobs, CertifiedKey> => ({
  steps: {
    ...steps,
    eks: (m) => gatherEks(m.tpm),
    evidence: (m, s, { restrictedLdevid, ...o } = {}) => steps.evidence(m, s, restrictedLdevid ? { ...o, createLdevidWith: createAk } : o),
  },
  run: (fn, name) => steps.withMachine(w.machines[name] as WorldMachine, w.transport, fn),
  machine: (name) => w.machines[name] as WorldMachine,
  store: w.store,
  deviceId: (name) => w.deviceId(name),
  journal: async (name) => (await readJournal(w.admin, (await device(name)).id)).map((j) => j.comments),
  signatures: () => w.signatures(),
  installCodesIssued: () => w.installCodesIssued(),
  deviceStatus: async (name) => (await device(name)).status ?? "planned",
  setDeviceStatus: async (name, status, why) => void (await patchDevice(w.admin, (await device(name)).id, { status }, null, `refusals test: ${why}`)),
  configServer: async () => w.baseUrl,
  settle: () => new Promise((res) => setTimeout(res, 100)),
  disks: {
    create() {
      const path = join(w.dir, `disk-${++disks}.img`);
      writeFileSync(path, buildGptImage({}).bytes);
      return path;
    },
    writeMeta(disk, code) {
      const r = spawnSync(process.execPath, [join(repoRoot, "tink-action/dist/cli.js"), "write-meta", "--disk", disk, "--code", code], { encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr);
    },
    metaCode: (disk) => advread(disk).tags["0x0b"]?.text,
  },
});

for (const c of refusalMatrix(world)) test(c.name, c.run);
