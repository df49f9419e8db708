/**
 * Admission (talos-config-server) takes a node's `bmc` and `install_disk` from NetBox; a device editor can write
 * both through the API. Against a real NetBox 4.7 (inventory apply as the apply account, edits as `mallory`, a
 * device editor outside the operators group) and a real kube-apiserver with Tinkerbell v0.25.0's CRDs: values
 * the change log attributes to the apply account are used; a BMC address or credentials reference, or an install
 * disk, last written by anyone else refuses admission, journalled in NetBox with the failed check, before any
 * Hardware, Machine or Workflow is written. No tink-controller runs here (admission writes objects only).
 */
import { strict as assert } from "node:assert";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { loadKube, type Kube } from "@fleetd/platform/kube";
import { NetBoxInventory, patchDevice, readJournal, netboxPlatformFieldCheck } from "@fleetd/platform/netbox";
import { TinkerbellAdmission, TinkerbellEffects } from "@fleetd/platform/tinkerbell";
import { TinkerbellSiteConfig } from "@fleetd/platform/fleet";
import { startControlPlane, type ControlPlane } from "../harness/kube.js";
import { installTinkerbellCrds } from "../harness/tinkerbellCrds.js";
import { fleetd, startFleet, type Fleet } from "../netbox/fixture.js";
import { device } from "../netbox/handlerFixture.js";

const NS = "tinkerbell";
const D = (c: string) => `sha256:${c.repeat(64)}`;
let f: Fleet;
let cp: ControlPlane;
let kube: Kube;
let inventory: NetBoxInventory;
let admission: TinkerbellAdmission;

const nodeEntry = (name: string, i: number) => `
  ${name}:
    serial: ADM-000${i}
    model: nuc13
    class: talos
    role: worker
    switch: { device: tor-a1, port: ethernet1/1/${10 + i} }
    address: { cidr: 10.20.0.${60 + i}/24, gateway: 10.20.0.1 }
    installDisk: /dev/nvme0n1
    bmc: { type: redfish, address: 10.30.1.${i}, credentials: "secret:${NS}/fleetd-bmc-${name}" }
    tpm: "2.0"
    ek:
      - { alg: rsa, sha256: ${`a${i}`.repeat(32)} }
`;

const NODES = `version: 1
site: { name: Lab Rack A, slug: lab-rack-a }
models:
  nuc13: { manufacturer: ASUS, model: NUC 13 Pro }
  s5248: { manufacturer: Dell, model: S5248F-ON }
switches:
  tor-a1: { model: s5248 }
nodes:${nodeEntry("adm-a", 1)}${nodeEntry("adm-b", 2)}${nodeEntry("adm-c", 3)}`;

const objectExists = async (plural: string, name: string, group = "tinkerbell.org") =>
  kube.custom.getNamespacedCustomObject({ group, version: "v1alpha1", namespace: NS, plural, name }).then(() => true, () => false);

async function admit(name: string, mac: string): Promise<string> {
  const rec = await inventory.reread((await device(f, name)).id);
  assert.ok(rec, name);
  await admission.admit(rec, { macs: [mac], uuid: `uuid-${name}` });
  const j = await readJournal(f.admin, (await device(f, name)).id);
  return j.at(-1)?.comments ?? "";
}

before(async () => {
  [f, cp] = await Promise.all([startFleet(), startControlPlane()]);
  await installTinkerbellCrds(cp);
  kube = loadKube(cp.kubeconfig);
  await kube.core.createNamespace({ body: { metadata: { name: NS } } });
  assert.equal(fleetd(["netbox", "setup", "--config", f.configFile(f.nb.authorization.replace(/^Bearer /, ""))]).code, 0);
  const nodesFile = join(f.dir, "admission-nodes.yaml");
  writeFileSync(nodesFile, NODES);
  const apply = fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]);
  assert.equal(apply.code, 0, apply.stderr);
  const site = TinkerbellSiteConfig.parse({
    server: { url: "https://fleetd.example.internal:8443", caFile: "/unused-here" },
    images: { action: `registry.example.internal/fleetd/fleetd-tink-action@${D("a")}`, wipe: `docker.io/library/debian:bookworm-slim@${D("b")}`, image2disk: `quay.io/tinkerbell/actions/image2disk@${D("c")}` },
    talosImageUrl: "https://factory.talos.dev/image/0123abcd/v1.13.9/metal-amd64.raw.zst",
  });
  // As talos-config-server wires it (server.ts): NetBox is the inventory and the journal.
  const nb = f.client(f.handler.token);
  inventory = new NetBoxInventory(nb, { applyAccount: f.apply.username, attestationAccount: f.handler.username, roleSlugs: { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" } });
  admission = new TinkerbellAdmission(new TinkerbellEffects({ kube, namespace: NS, site, serverCaPem: cp.caPem }), inventory, netboxPlatformFieldCheck(nb, f.apply.username));
}, { timeout: 60 * 60_000 });

after(async () => {
  await Promise.all([f?.nb.stop(), cp?.stop()]);
});

test("bmc and install_disk written by the apply account: admitted, the Machine points at the nodes file's BMC", async () => {
  const last = await admit("adm-a", "0c:c4:7a:00:0c:01");
  assert.match(last, /admission: Hardware adm-a \(boot MAC 0c:c4:7a:00:0c:01\) and provision Workflow fleetd-adm-a-provision-[0-9a-f]{10} created/);
  const m = (await kube.custom.getNamespacedCustomObject({ group: "bmc.tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "machines", name: "adm-a" })) as { spec: { connection: { host: string; authSecretRef: unknown } } };
  assert.equal(m.spec.connection.host, "10.30.1.1");
  assert.deepEqual(m.spec.connection.authSecretRef, { name: "fleetd-bmc-adm-a", namespace: NS });
});

test("a BMC address edited by a device editor (the credentials reference kept): admission refused and journalled, nothing written", async () => {
  const d = await device(f, "adm-b");
  await patchDevice(f.client(f.mallory.token), d.id, { custom_fields: { bmc: { type: "redfish", address: "203.0.113.66", credentials: `secret:${NS}/fleetd-bmc-adm-b` } } }, null, "mallory: my BMC");
  const last = await admit("adm-b", "0c:c4:7a:00:0c:02");
  assert.match(last, /admission failed \(bmc-unattributed\)/);
  assert.match(last, /last changed by mallory/);
  assert.equal(await objectExists("hardware", "adm-b"), false, "no Hardware");
  assert.equal(await objectExists("machines", "adm-b", "bmc.tinkerbell.org"), false, "no Machine pointing at mallory's host");
  const wfs = (await kube.custom.listNamespacedCustomObject({ group: "tinkerbell.org", version: "v1alpha1", namespace: NS, plural: "workflows", labelSelector: "fleetd.io/node=adm-b" })) as { items: unknown[] };
  assert.equal(wfs.items.length, 0);
  // inventory apply writes the nodes file's value again: attributed, admitted.
  const nodesFile = join(f.dir, "admission-nodes.yaml");
  const apply = fleetd(["inventory", "apply", nodesFile, "--config", f.configFile(f.apply.token)]);
  assert.equal(apply.code, 0, apply.stderr);
  assert.match(await admit("adm-b", "0c:c4:7a:00:0c:02"), /admission: Hardware adm-b .* created/);
});

test("an install disk edited by a device editor: admission refused and journalled, no Hardware (the provision's wipe-disk never sees it)", async () => {
  const d = await device(f, "adm-c");
  await patchDevice(f.client(f.mallory.token), d.id, { custom_fields: { install_disk: "/dev/sdb" } }, null, "mallory: wipe that one");
  const last = await admit("adm-c", "0c:c4:7a:00:0c:03");
  assert.match(last, /admission failed \(install-disk-unattributed\)/);
  assert.equal(await objectExists("hardware", "adm-c"), false);
  assert.equal(await objectExists("machines", "adm-c", "bmc.tinkerbell.org"), false);
});
