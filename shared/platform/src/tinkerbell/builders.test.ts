import { strict as assert } from "node:assert";
import { test } from "node:test";
import fc from "fast-check";
import { ownCredentialsRef, resolveCredentials } from "./credentials.js";
import { TinkerbellError } from "./errors.js";
import { buildHardware } from "./hardware.js";
import { jobStateOf } from "./job.js";
import { canonicalMac, CANONICAL_MAC } from "./mac.js";
import { buildMachine } from "./machine.js";
import { enrollmentWorkflowName, requireNodeName, workflowName } from "./names.js";
import { checkNode, netmaskOf } from "./node.js";
import { PINNED_IMAGE, TinkerbellSiteConfig } from "../fleet/tinkerbellSiteConfig.js";
import { buildTemplateData, isLoopbackUrl, TEMPLATE_KINDS } from "./templates.js";
import { buildWorkflow } from "./workflow.js";

const code = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof TinkerbellError, `not a TinkerbellError: ${String(e)}`);
    return e.code;
  }
  return "no error";
};

const site = (o: Record<string, unknown> = {}) =>
  TinkerbellSiteConfig.parse({
    server: { url: "https://fleetd.example:8443", caFile: "/ca.pem" },
    images: { action: `r.example/a@sha256:${"a".repeat(64)}`, wipe: `r.example/w:1@sha256:${"b".repeat(64)}`, image2disk: `quay.io/t/i@sha256:${"c".repeat(64)}` },
    talosImageUrl: "https://factory.talos.dev/image/x/v1.13.9/metal-amd64.raw.zst",
    ...o,
  });

test("canonicalMac: any spelling of six bytes gives lowercase colon form; anything else is a typed refusal (property)", () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 6, maxLength: 6 }), fc.constantFrom(":", "-", ""), fc.boolean(), (bytes, sep, upper) => {
      const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0"));
      const text = hex.join(sep);
      const out = canonicalMac(upper ? text.toUpperCase() : text);
      assert.equal(out, hex.join(":"));
      assert.match(out, CANONICAL_MAC);
    }),
  );
  fc.assert(fc.property(fc.string({ maxLength: 40 }), (s) => {
    try {
      assert.match(canonicalMac(s), CANONICAL_MAC);
    } catch (e) {
      assert.ok(e instanceof TinkerbellError && e.code === "mac-not-canonical");
    }
  }));
  assert.equal(canonicalMac("0CC4.7A00.0001"), "0c:c4:7a:00:00:01");
  for (const bad of ["0c:c4:7a:00:00", "0c:c4:7a:00:00:01:02", "gg:c4:7a:00:00:01", "XX0c:c4:7a:00:00:01"]) assert.equal(code(() => canonicalMac(bad)), "mac-not-canonical", bad);
});

test("Workflow names: deterministic per request, a valid Kubernetes name for any request id (property)", () => {
  fc.assert(fc.property(fc.string({ maxLength: 300 }), fc.constantFrom("provision" as const, "attest" as const, "wipe" as const), (rid, mode) => {
    const n = workflowName(requireNodeName("node-a"), mode, rid);
    assert.equal(n, workflowName(requireNodeName("node-a"), mode, rid));
    assert.match(n, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
    assert.ok(n.length <= 90);
  }));
  assert.notEqual(workflowName(requireNodeName("n"), "provision", "a"), workflowName(requireNodeName("n"), "provision", "b"));
  // The name is checked once, where it enters (requireNodeName; checkNode calls it): workflowName takes a NodeName.
  assert.equal(code(() => requireNodeName("Node_A")), "invalid-input");
  assert.equal(code(() => checkNode({ name: "Node_A", macs: ["0c:c4:7a:00:00:01"] })), "invalid-input");
  assert.equal(enrollmentWorkflowName("0c:c4:7a:00:00:01"), "enrollment-0c-c4-7a-00-00-01");
});

test("Hardware: only canonical MACs, netmask from the prefix, bmcRef only with a BMC; a node with no MAC is refused (by checkNode, the one check before any builder)", () => {
  assert.deepEqual([24, 16, 30, 32, 1].map(netmaskOf), ["255.255.255.0", "255.255.0.0", "255.255.255.252", "255.255.255.255", "128.0.0.0"]);
  const n = { name: "n1", macs: ["0c:c4:7a:00:00:01"], address: "10.0.0.5/22", gateway: "10.0.0.1", installDisk: "/dev/sda" };
  const hw = buildHardware(checkNode(n), "tb");
  assert.deepEqual(hw.spec.interfaces[0]?.dhcp.ip, { address: "10.0.0.5", netmask: "255.255.252.0", gateway: "10.0.0.1" });
  assert.equal(hw.spec.bmcRef, undefined);
  assert.equal(code(() => checkNode({ ...n, macs: ["0C:C4:7A:00:00:01"] })), "mac-not-canonical");
  assert.equal(code(() => checkNode({ ...n, macs: [] })), "no-proven-mac");
  assert.equal(code(() => checkNode({ ...n, macs: ["0c:c4:7a:00:00:01", "0c:c4:7a:00:00:01"] })), "invalid-input");
  assert.equal(code(() => checkNode({ ...n, address: "10.0.0.5" })), "invalid-input");
  const wf = buildWorkflow(checkNode({ ...n, bmc: { type: "amt", address: "a", credentials: "env:X" } }), { mode: "wipe", requestId: "r" }, "tb");
  assert.equal(wf.spec.templateRef, "fleetd-wipe");
  assert.deepEqual(wf.spec.bootOptions, { toggleAllowNetboot: true, bootMode: "netboot" });
});

test("site configuration and Templates: images must be pinned by digest; https needs the CA; http only in the lab", () => {
  for (const ok of [`registry.example.internal/fleetd/a@sha256:${"0".repeat(64)}`, `localhost:5000/x:tag@sha256:${"f".repeat(64)}`]) assert.match(ok, PINNED_IMAGE);
  for (const bad of ["quay.io/x/y:latest", `quay.io/x/y@sha256:${"F".repeat(64)}`, `quay.io/x/y@sha256:${"0".repeat(63)}`, `quay.io/x/y@sha512:${"0".repeat(64)}`]) assert.doesNotMatch(bad, PINNED_IMAGE);
  assert.throws(() => site({ images: { action: "a:1", wipe: "b", image2disk: "c" } }), /pinned by digest/);
  assert.throws(() => site({ server: { url: "https://x" } }), /required for an https server/);
  assert.throws(() => site({ server: { url: "http://x" } }), /only with server.lab: true/);
  assert.equal(code(() => buildTemplateData("attest", { site: site() })), "template-invalid", "https without the CA PEM");
  const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const lab = buildTemplateData("attest", { site: site({ server: { url: "http://127.0.0.1:8080", lab: true } }) });
  assert.equal(lab.tasks[0]?.actions[0]?.environment?.["FLEETD_ALLOW_HTTP"], "lab");
  // No Template wipes without attesting first (there is no unattested wipe).
  for (const kind of TEMPLATE_KINDS) assert.equal(buildTemplateData(kind, { site: site(), serverCaPem: pem }).tasks[0]?.actions[0]?.name, "fleetd-attest", kind);
  assert.deepEqual(buildTemplateData("wipe", { site: site(), serverCaPem: pem }).tasks[0]?.actions.map((a) => a.name), ["fleetd-attest", "wipe-disk"]);
  const prov = buildTemplateData("provision", { site: site(), serverCaPem: pem });
  assert.ok(prov.tasks[0]?.actions.every((a) => a.timeout > 0));
  assert.equal(prov.tasks[0]?.actions[2]?.environment?.["IMG_URL"], "https://factory.talos.dev/image/x/v1.13.9/metal-amd64.raw.zst");
});

test("the real agent's lab: Templates from the site's workerDir, TPM transport and OS image URL (swtpm socket and loopback image only with server.lab)", () => {
  const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  // Defaults are HookOS's: /worker, the TPM device, the OS image over https on the bridge network.
  const prod = buildTemplateData("provision", { site: site({ clearTpmOnRetire: true }), serverCaPem: pem });
  assert.deepEqual(prod.tasks[0]?.volumes, ["/dev:/dev", "/dev/console:/dev/console", "/lib/firmware:/lib/firmware:ro", "/worker:/worker"]);
  const pa = prod.tasks[0]!.actions;
  assert.equal(pa[0]?.environment?.["FLEETD_TPM"], "/dev/tpmrm0");
  assert.equal(pa[0]?.volumes, undefined);
  assert.deepEqual(pa.map((a) => a.namespaces?.network ?? "bridge"), ["host", "bridge", "bridge", "bridge"]);
  const wipeProd = buildTemplateData("wipe", { site: site({ clearTpmOnRetire: true }), serverCaPem: pem }).tasks[0]!.actions;
  assert.equal(wipeProd.find((a) => a.name === "fleetd-clear-tpm")?.environment?.["FLEETD_TPM"], "/dev/tpmrm0");

  // The lab: per-machine worker directory, swtpm's Unix socket in the TPM actions only, the OS image on loopback.
  const imageDigest = `127.0.0.1:5000/fleetd/tink-action@sha256:${"d".repeat(64)}`;
  const labSite = site({
    server: { url: "http://127.0.0.1:8080", lab: true },
    images: { action: imageDigest, wipe: `127.0.0.1:5000/fleetd/debian@sha256:${"e".repeat(64)}`, image2disk: `127.0.0.1:5000/fleetd/image2disk@sha256:${"f".repeat(64)}` },
    talosImageUrl: "http://127.0.0.1:9080/lab-os.raw.gz",
    workerDir: "/tmp/fleetd-lab/m1/worker",
    tpm: { kind: "unix-socket", hostDir: "/tmp/fleetd-lab/m1/tpm", socket: "swtpm.sock" },
    clearTpmOnRetire: true,
  });
  const lab = buildTemplateData("provision", { site: labSite });
  assert.deepEqual(lab.tasks[0]?.volumes, ["/dev:/dev", "/dev/console:/dev/console", "/lib/firmware:/lib/firmware:ro", "/tmp/fleetd-lab/m1/worker:/worker"]);
  const la = lab.tasks[0]!.actions;
  assert.deepEqual(la.map((a) => a.name), ["fleetd-attest", "wipe-disk", "install-talos", "fleetd-write-meta"]);
  assert.equal(la[0]?.image, imageDigest, "images from the local registry, by digest");
  assert.equal(la[0]?.environment?.["FLEETD_TPM"], "unix:/run/fleetd-tpm/swtpm.sock");
  assert.deepEqual(la[0]?.volumes, ["/tmp/fleetd-lab/m1/tpm:/run/fleetd-tpm"]);
  assert.deepEqual(la.map((a) => a.volumes?.length ?? 0), [1, 0, 0, 0], "the TPM socket reaches the TPM action only");
  assert.deepEqual(la.map((a) => a.namespaces?.network ?? "bridge"), ["host", "bridge", "host", "bridge"], "install-talos fetches a loopback URL: host network");
  assert.equal(la[2]?.environment?.["IMG_URL"], "http://127.0.0.1:9080/lab-os.raw.gz");
  assert.equal(la[2]?.environment?.["DEST_DISK"], "{{ index .Hardware.Disks 0 }}", "the disk is the Hardware's (the lab's loop device)");
  const clear = buildTemplateData("wipe", { site: labSite }).tasks[0]!.actions.find((a) => a.name === "fleetd-clear-tpm");
  assert.equal(clear?.environment?.["FLEETD_TPM"], "unix:/run/fleetd-tpm/swtpm.sock");
  assert.deepEqual(clear?.volumes, ["/tmp/fleetd-lab/m1/tpm:/run/fleetd-tpm"]);
  for (const u of ["http://localhost:1/x.raw.gz", "http://127.9.0.1/x.raw.xz", "http://[::1]:80/x.raw.zst"]) assert.ok(isLoopbackUrl(u), u);
  for (const u of ["https://factory.talos.dev/x.raw.zst", "http://10.0.0.1/x.raw.gz", "http://127.example/x.raw.gz"]) assert.ok(!isLoopbackUrl(u), u);

  // Refusals: the lab's transports outside the lab, and paths a bind mount would misread.
  assert.throws(() => site({ talosImageUrl: "http://127.0.0.1:9080/lab-os.raw.gz" }), /talosImageUrl.*only with server.lab: true|only with server.lab: true/);
  assert.throws(() => site({ tpm: { kind: "unix-socket", hostDir: "/run/swtpm", socket: "s" } }), /unix-socket \(a swtpm\) only with server.lab: true/);
  assert.throws(() => site({ server: { url: "http://x", lab: true }, talosImageUrl: "http://x/lab-os.raw" }), /compressed raw image/);
  for (const bad of ["worker", "/a:/b", "/a,b", "/a/../etc", "/a b"]) assert.throws(() => site({ workerDir: bad }), /absolute path|'\.\.'/, bad);
  assert.throws(() => site({ server: { url: "http://x", lab: true }, tpm: { kind: "unix-socket", hostDir: "/t", socket: "../s" } }), /a file name/);
  assert.throws(() => site({ server: { url: "http://x", lab: true }, tpm: { kind: "unix-socket", hostDir: "/t", socket: ".." } }), /a file name/);

  // A lab machine's sysfs/procfs: mounted read-only into fleetd-attest only, FLEETD_ROOT, LLDP settings.
  const withMachine = buildTemplateData("provision", { site: { ...labSite, labMachine: { root: "/tmp/fleetd-lab/m1/root", bootInterface: "veth-m1", lldp: "lldpd" } } }).tasks[0]!.actions;
  assert.deepEqual(withMachine[0]?.volumes, ["/tmp/fleetd-lab/m1/tpm:/run/fleetd-tpm", "/tmp/fleetd-lab/m1/root:/run/fleetd-machine:ro"]);
  assert.equal(withMachine[0]?.environment?.["FLEETD_ROOT"], "/run/fleetd-machine");
  assert.equal(withMachine[0]?.environment?.["FLEETD_BOOT_INTERFACE"], "veth-m1");
  assert.equal(withMachine[0]?.environment?.["FLEETD_LLDP"], "lldpd");
  assert.deepEqual(withMachine.map((a) => a.volumes?.length ?? 0), [2, 0, 0, 0], "the machine's root reaches fleetd-attest only");
  assert.equal(la[0]?.environment?.["FLEETD_ROOT"], undefined, "no labMachine: the action reads its own root");
  assert.throws(() => site({ labMachine: { root: "/tmp/m1" } }), /labMachine.*only with server.lab: true|only with server.lab: true/);
  assert.throws(() => site({ server: { url: "http://x", lab: true }, labMachine: { root: "/tmp/m1", bootInterface: "a/b" } }), /network interface name/);
});

test("Machines per BMC type and Job states from conditions", () => {
  const ref = { name: "s", namespace: "tb" };
  const n = requireNodeName("n");
  assert.deepEqual(buildMachine(n, { type: "amt", address: "a", credentials: "" }, ref, "tb", { insecureTLS: true, amtScheme: "https" }).spec.connection.providerOptions, { preferredOrder: ["IntelAMT"], intelAMT: { port: 16993, hostScheme: "https" } });
  assert.deepEqual(buildMachine(n, { type: "redfish", address: "a", credentials: "" }, ref, "tb", { insecureTLS: false, redfishSystemName: "sys1", redfishPort: 8000, redfishBasicAuth: true }).spec.connection,
    { host: "a", insecureTLS: false, authSecretRef: ref, providerOptions: { preferredOrder: ["gofish"], redfish: { port: 8000, useBasicAuth: true, systemName: "sys1" } } });
  const job = (conditions: { type: string; status: string; message?: string }[]) => jobStateOf({ metadata: { name: "j" }, status: { conditions } });
  assert.deepEqual(job([]), { state: "pending" });
  assert.deepEqual(job([{ type: "Running", status: "True" }]), { state: "running" });
  assert.deepEqual(job([{ type: "Completed", status: "False" }, { type: "Running", status: "True" }]), { state: "running" });
  assert.deepEqual(job([{ type: "Completed", status: "True" }]), { state: "completed" });
  assert.deepEqual(job([{ type: "Completed", status: "True" }, { type: "Failed", status: "True", message: "m" }]), { state: "failed", message: "m" });
});

test("credentials references: only the node's own Secret in the Tinkerbell namespace; env:, file:, vault: refused", () => {
  const nodeA = requireNodeName("node-a");
  assert.deepEqual(resolveCredentials("secret:tinkerbell/fleetd-bmc-node-a", nodeA, "tinkerbell"), { namespace: "tinkerbell", name: "fleetd-bmc-node-a" });
  assert.equal(ownCredentialsRef(nodeA, "tinkerbell"), "secret:tinkerbell/fleetd-bmc-node-a");
  // Another node's Secret, another namespace, a prefix or suffix trick, path tricks: refused.
  for (const bad of [
    "secret:tinkerbell/fleetd-bmc-node-b", "secret:other/fleetd-bmc-node-a", "secret:kube-system/fleetd-bmc-node-a", "secret:tinkerbell/fleetd-bmc-node-a-x",
    "secret:tinkerbell/fleetd-bmc-node", "secret:tinkerbell/fleetd-bmc-node-a/x", "secret:tinkerbell/../fleetd-bmc-node-a", "secret:TINKERBELL/fleetd-bmc-node-a", "secret:tinkerbell/bmc-shared",
  ]) assert.equal(code(() => resolveCredentials(bad, nodeA, "tinkerbell")), "credentials-not-own", bad);
  for (const bad of ["env:BMC_A", "env:FLEETD_BMC_NODE_A", "file:/etc/fleetd/bmc/node-a", "file:relative", "vault:kv/bmc/node-a"]) assert.equal(code(() => resolveCredentials(bad, nodeA, "tinkerbell")), "credentials-unsupported", bad);
  for (const bad of ["ldap:x", "nothing", ":x"]) assert.equal(code(() => resolveCredentials(bad, nodeA, "tinkerbell")), "invalid-input", bad);
});
