import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { bootInterface, bootMacOf, ClaimsError, collectHostClaims, listInterfaces } from "./claims.js";
import { EventLogError, MAX_EVENT_LOG, readEventLog } from "./eventLog.js";
import { writeFakeRoot } from "./testing/fakeRoot.js";

const dirs: string[] = [];
const fresh = () => {
  const d = mkdtempSync(join(tmpdir(), "fleetd-fakeroot-"));
  dirs.push(d);
  return d;
};
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const machine = {
  serial: "7XK2LM4  ",
  uuid: "4C4C4544-0058-4B10-8032-B7C04F4D3332",
  nics: [
    { name: "eno8303", mac: "B0:7B:25:00:00:21" },
    { name: "eno8403", mac: "b0:7b:25:00:00:22", up: false },
    { name: "docker0", mac: "02:42:ac:11:00:01", virtual: true },
    { name: "veth1a2b", mac: "de:ad:be:ef:00:01", virtual: true },
    { name: "ib0", mac: "80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:0b:0c" },
  ],
  defaultRoute: "eno8303",
};

test("claims from a sysfs tree: serial trimmed, UUID lowercased, physical MACs only (lo, virtual and non-Ethernet skipped), sorted", () => {
  const root = writeFakeRoot(fresh(), machine);
  const c = collectHostClaims(root);
  assert.equal(c.serial, "7XK2LM4");
  assert.equal(c.uuid, "4c4c4544-0058-4b10-8032-b7c04f4d3332");
  assert.deepEqual(c.macs, ["b0:7b:25:00:00:21", "b0:7b:25:00:00:22"]);
  const byName = Object.fromEntries(c.interfaces.map((i) => [i.name, i]));
  assert.equal(byName["lo"], undefined, "lo is not listed");
  assert.equal(byName["docker0"]?.virtual, true);
  assert.equal(byName["ib0"]?.mac, undefined, "a 20-byte InfiniBand address is not a MAC");
  assert.equal(byName["eno8403"]?.up, false);
});

test("boot interface: configured wins; else the default route; else the first physical interface that is up", () => {
  const root = writeFakeRoot(fresh(), machine);
  const ifs = listInterfaces(root);
  assert.deepEqual(bootInterface(root, ifs, "eno8403"), { name: "eno8403", how: "configured" });
  assert.deepEqual(bootInterface(root, ifs), { name: "eno8303", how: "default-route" });
  const noRoute = writeFakeRoot(fresh(), { ...machine, defaultRoute: undefined, nics: [{ name: "docker0", mac: "02:42:ac:11:00:01", virtual: true }, { name: "eth1", mac: "b0:7b:25:00:00:22", up: false }, { name: "eth2", mac: "b0:7b:25:00:00:23" }] });
  assert.deepEqual(bootInterface(noRoute, listInterfaces(noRoute)), { name: "eth2", how: "first-up" });
  const none = writeFakeRoot(fresh(), { ...machine, defaultRoute: undefined, nics: [{ name: "eth1", mac: "b0:7b:25:00:00:22", up: false }] });
  assert.equal(bootInterface(none, listInterfaces(none)), undefined);
});

test("missing, empty or oversized SMBIOS values and no physical NIC are errors that name the file", () => {
  const noSerial = writeFakeRoot(fresh(), { ...machine, serial: undefined });
  assert.throws(() => collectHostClaims(noSerial), (e: unknown) => e instanceof ClaimsError && e.code === "dmi-missing" && e.path.endsWith("sys/class/dmi/id/product_serial"));
  const empty = writeFakeRoot(fresh(), { ...machine, uuid: "   " });
  assert.throws(() => collectHostClaims(empty), (e: unknown) => e instanceof ClaimsError && e.code === "dmi-empty" && e.path.endsWith("product_uuid"));
  const big = writeFakeRoot(fresh(), machine);
  writeFileSync(join(big, "sys/class/dmi/id/product_serial"), "X".repeat(10_000));
  assert.throws(() => collectHostClaims(big), (e: unknown) => e instanceof ClaimsError && e.code === "dmi-unreadable" && /larger than 256/.test(e.message));
  const virtualOnly = writeFakeRoot(fresh(), { ...machine, nics: [{ name: "br0", mac: "02:00:00:00:00:01", virtual: true }] });
  assert.throws(() => collectHostClaims(virtualOnly), (e: unknown) => e instanceof ClaimsError && e.code === "no-interfaces");
  assert.throws(() => collectHostClaims(fresh()), (e: unknown) => e instanceof ClaimsError && e.code === "dmi-missing");
});

test("event log: read from the root's securityfs path; missing, empty and over 1 MiB are errors (no mount under a test root)", async () => {
  const log = new Uint8Array([3, 0, 0, 0, 1, 2, 3]);
  const root = writeFakeRoot(fresh(), { ...machine, eventLog: log });
  const r = await readEventLog(root);
  assert.deepEqual(r.bytes, log);
  assert.equal(r.mounted, false);
  await assert.rejects(readEventLog(writeFakeRoot(fresh(), machine)), (e: unknown) => e instanceof EventLogError && e.code === "event-log-missing" && e.path.endsWith("tpm0/binary_bios_measurements"));
  await assert.rejects(readEventLog(writeFakeRoot(fresh(), { ...machine, eventLog: new Uint8Array() })), (e: unknown) => e instanceof EventLogError && e.code === "event-log-empty");
  await assert.rejects(readEventLog(writeFakeRoot(fresh(), { ...machine, eventLog: new Uint8Array(MAX_EVENT_LOG + 1) })), (e: unknown) => e instanceof EventLogError && e.code === "event-log-too-large");
});

test("three NICs, the boot one sorting last: bootMac is the boot interface's MAC, not the first sorted", () => {
  const root = writeFakeRoot(fresh(), {
    ...machine,
    nics: [
      { name: "eno1", mac: "b0:7b:25:00:00:a1" },
      { name: "eno2", mac: "b0:7b:25:00:00:b2" },
      { name: "ens9f0", mac: "b0:7b:25:00:00:f9" },
      { name: "br0", mac: "02:00:5e:10:00:01", virtual: true },
    ],
    defaultRoute: "ens9f0",
  });
  const c = collectHostClaims(root);
  assert.deepEqual(c.macs, ["b0:7b:25:00:00:a1", "b0:7b:25:00:00:b2", "b0:7b:25:00:00:f9"]);
  const boot = bootInterface(root, c.interfaces);
  assert.deepEqual(boot, { name: "ens9f0", how: "default-route" });
  assert.equal(bootMacOf(c, boot), "b0:7b:25:00:00:f9");
  // a virtual boot interface with an address of its own (a bridge) is none of the claimed MACs: no bootMac
  assert.equal(bootMacOf(c, { name: "br0", how: "configured" }), undefined);
  assert.equal(bootMacOf(c, undefined), undefined);
});
