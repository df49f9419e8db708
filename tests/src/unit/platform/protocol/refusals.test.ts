/**
 * The refusal matrix of the attestation protocol (tests/src/attestation/refusalMatrix.ts, which
 * refusals.it.test.ts runs on the real platform), run against the protocol engine alone: the AttestationService
 * over in-memory adapters (memoryWorld.ts) and machines whose TPM is a node:crypto model
 * (@fleetd/testkit/softwareTpm), no NetBox, swtpm or SoftHSM2. Same cases, same expected step, status, error
 * and checks, and the same checks after each refusal (nothing signed, no install code, the journal entry); the
 * memory world has no disk, so an install code a machine got fails the refusal instead.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { akTemplate } from "@fleetd/platform/tpmclient";
import type { SoftwareEk, SoftwareKey } from "@fleetd/testkit/softwareTpm";
import { MATRIX_MACHINES, REFUSAL_CASES, refusalMatrix, type RefusalWorld } from "../../../attestation/refusalMatrix.js";
import * as steps from "./memoryWorld.js";

let w: steps.MemoryWorld;
before(async () => {
  w = await steps.startMemoryWorld({ machines: MATRIX_MACHINES });
});
after(async () => {
  await w?.stop();
});

const world = (): RefusalWorld<steps.Machine, SoftwareEk, SoftwareKey, steps.CertifiedKey> => ({
  steps: {
    ...steps,
    eks: (m) => [m.tpm.eks.rsa, m.tpm.eks.ecc],
    evidence: (m, s, { restrictedLdevid, ...o } = {}) => steps.evidence(m, s, restrictedLdevid ? { ...o, ldevidTemplate: akTemplate } : o),
  },
  run: (fn, name) => fn(steps.machineOf(w.machines[name] as steps.WorldMachine, w.transport)),
  machine: (name) => w.machines[name] as steps.WorldMachine,
  store: w.store,
  deviceId: async (name) => w.deviceId(name),
  journal: async (name) => w.journalOf(name),
  signatures: () => w.signatures(),
  installCodesIssued: () => w.installCodesIssued(),
  deviceStatus: async (name) => w.inventory.get(w.deviceId(name))?.status ?? "planned",
  setDeviceStatus: async (name, status) => w.inventory.update(w.deviceId(name), { status }),
  configServer: async () => (await w.configServer()).baseUrl,
  settle: async (name) => {
    await w.outbox.flush(w.deviceId(name));
    await new Promise((res) => setTimeout(res, 20));
  },
});

for (const c of refusalMatrix(world)) test(c.name, c.run);

test("the same cases as the real-platform matrix (refusals.it.test.ts), by name", () => {
  // Both files run refusalMatrix.ts's table: the real-platform one iterates it too, and the table is whole.
  const src = resolve(fileURLToPath(import.meta.url), "../../../../../src");
  assert.match(readFileSync(join(src, "attestation/refusals.it.test.ts"), "utf8"), /^for \(const c of refusalMatrix\(world\)\) test\(c\.name, c\.run\);$/m);
  const names = REFUSAL_CASES.map((c) => c.name);
  assert.ok(names.length >= 19, `${names.length} cases in the matrix`);
  assert.equal(new Set(names).size, names.length, "each case named once");
});
