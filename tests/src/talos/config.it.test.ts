/**
 * Every rendered config, worker or control plane, is loaded and validated by Talos's own pkg/machinery
 * (configloader strict decoding + Validate in metal mode, and the machine type's own requirements: for a
 * control plane, every cluster secret as Talos's secrets code reads it) at the Talos version pinned in
 * tests/go/talos/go.mod, and what Talos understood (its re-encoding) is compared with what was meant. Control
 * planes are rendered from a secrets bundle Talos itself generated (gen-secrets), as `talosctl gen secrets`.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { parse } from "yaml";
import {
  renderWorkerConfig, renderControlPlaneConfig, readSecretsBundle, type TalosSecretsBundle, SEED_DIR, SEED_FILES,
  TOKEN_PATTERN, type NodeInput,
} from "@fleetd/platform/talos/config";
import { nodeInputFixture, secretsBundleFixture, siteConfigFixture, siteForBundle, writeSecretsBundle } from "@fleetd/testkit/talosConfig";
import { TALOS_VERSION, talosGo, talosGoBinDir } from "./goTools.js";

let dir: string;
before(() => {
  dir = mkdtempSync(join(tmpdir(), "fleetd-talos-config-"));
  talosGoBinDir();
});
after(() => rmSync(dir, { recursive: true, force: true }));

const site = siteConfigFixture(TALOS_VERSION);
const baseNode = nodeInputFixture();

interface Validation {
  valid: boolean;
  errors: string[];
  warnings: string[];
  canonical?: string;
}
let n = 0;
function validate(yaml: string, extra: string[] = []): Validation {
  const p = join(dir, `config-${n++}.yaml`);
  writeFileSync(p, yaml);
  const r = talosGo("validate-config", [...extra, "--dump", p], true);
  assert.ok(r.status === 0 || r.status === 1, `validate-config crashed: ${r.stderr}`);
  return JSON.parse(r.stdout) as Validation;
}

type Tree = unknown;

/** The value at a dotted path (numbers index arrays), or undefined. */
function at(tree: Tree, path: string): unknown {
  let v: unknown = tree;
  for (const k of path.split(".")) {
    if (v === null || typeof v !== "object") return undefined;
    v = (v as Record<string, unknown>)[k];
  }
  return v;
}

function renderAndValidate(node: NodeInput, token?: { id: string; secret: string; token: string }): { tree: Tree; token: string } {
  const out = renderWorkerConfig(site, node, token ? { token } : {});
  const v = validate(out.yaml, ["--strict", "--type", "worker"]);
  assert.deepEqual(v.errors, [], `Talos ${TALOS_VERSION} refused the config:\n${out.yaml}`);
  assert.deepEqual(v.warnings, []);
  assert.equal(v.valid, true);
  return { tree: parse(v.canonical ?? "") as unknown, token: out.bootstrapToken.token };
}

test(`a worker selected by MAC: valid for Talos ${TALOS_VERSION} (metal), and Talos reads what was meant`, () => {
  assert.equal(site.talos.version, TALOS_VERSION);
  const { tree: c, token } = renderAndValidate(baseNode);
  assert.equal(at(c, "machine.type"), "worker");
  assert.equal(at(c, "machine.network.hostname"), "w1");
  const iface = "machine.network.interfaces.0";
  assert.deepEqual(at(c, `${iface}.deviceSelector`), { hardwareAddr: "52:54:00:12:34:56" });
  assert.equal(at(c, `${iface}.interface`), undefined);
  assert.deepEqual(at(c, `${iface}.addresses`), ["10.0.0.21/24"]);
  assert.deepEqual(at(c, `${iface}.routes`), [{ network: "0.0.0.0/0", gateway: "10.0.0.1" }]);
  assert.equal(at(c, `${iface}.dhcp`), false);
  assert.deepEqual(at(c, "machine.network.nameservers"), ["10.0.0.1"]);
  assert.equal(at(c, "machine.install.disk"), "/dev/sda");
  assert.equal(at(c, "machine.install.image"), site.talos.installerImage);
  assert.ok(String(at(c, "machine.install.image")).endsWith(`:${TALOS_VERSION}`));
  assert.equal(at(c, "machine.kubelet.image"), site.talos.kubeletImage);
  assert.equal(at(c, "machine.token"), site.cluster.trustdToken);
  assert.equal(Buffer.from(String(at(c, "machine.ca.crt")), "base64").toString(), site.cluster.osCaCert);
  assert.equal(at(c, "machine.ca.key"), "");
  assert.equal(Buffer.from(String(at(c, "cluster.ca.crt")), "base64").toString(), site.cluster.kubernetesCaCert);
  assert.equal(at(c, "cluster.ca.key"), "");
  assert.equal(at(c, "cluster.controlPlane.endpoint"), site.cluster.endpoint);
  assert.equal(at(c, "cluster.token"), token);
  assert.match(String(at(c, "cluster.token")), TOKEN_PATTERN);

  const files = at(c, "machine.files") as { content: string; permissions: number; path: string; op: string }[];
  assert.equal(files.length, 5);
  const seed = baseNode.seed;
  const expected: Record<string, Uint8Array | string> = {
    [SEED_FILES.ldevidCertChainPem]: seed.ldevidCertChainPem,
    [SEED_FILES.ldevidPublic]: seed.ldevidPublic,
    [SEED_FILES.ldevidPrivate]: seed.ldevidPrivate,
    [SEED_FILES.lakPublic]: seed.lakPublic,
    [SEED_FILES.lakPrivate]: seed.lakPrivate,
  };
  for (const f of files) {
    assert.equal(f.op, "create");
    assert.equal(f.permissions, 0o600);
    assert.ok(f.path.startsWith(SEED_DIR + "/"));
    const want = expected[f.path.slice(SEED_DIR.length + 1)];
    assert.ok(want !== undefined, f.path);
    assert.deepEqual(Buffer.from(f.content, "base64"), Buffer.from(want));
  }
});

test("a worker selected by interface name, and an IPv6 worker", () => {
  const byName = renderAndValidate({ ...baseNode, link: { name: "enp1s0" } }).tree;
  assert.equal(at(byName, "machine.network.interfaces.0.interface"), "enp1s0");
  assert.equal(at(byName, "machine.network.interfaces.0.deviceSelector"), undefined);

  const v6 = renderAndValidate({ ...baseNode, address: "2001:db8::21/64", gateway: "2001:db8::1" }).tree;
  assert.deepEqual(at(v6, "machine.network.interfaces.0.routes"), [{ network: "::/0", gateway: "2001:db8::1" }]);
  assert.deepEqual(at(v6, "machine.kubelet.nodeIP.validSubnets"), ["2001:db8::21/64"]);
});

test("random valid nodes and tokens (all-digit ones too) render to configs Talos accepts as meant", () => {
  const alnum = (n: number) => fc.string({ unit: fc.constantFrom(..."0123456789abcdefghijklmnopqrstuvwxyz"), minLength: n, maxLength: n });
  const digits = (n: number) => fc.string({ unit: fc.constantFrom(..."0123456789"), minLength: n, maxLength: n });
  const token = fc.oneof(fc.tuple(alnum(6), alnum(16)), fc.tuple(digits(6), digits(16))).map(([id, secret]) => ({ id, secret, token: `${id}.${secret}` }));
  const node = fc.record({
    name: fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?$/),
    link: fc.oneof(
      fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 6, maxLength: 6 }).map((b) => ({ mac: b.map((x) => x.toString(16).padStart(2, "0")).join(":") })),
      fc.stringMatching(/^[a-z][a-z0-9]{1,14}$/).map((name) => ({ name })),
    ),
    prefix: fc.integer({ min: 8, max: 30 }),
    host: fc.integer({ min: 0, max: 2 ** 24 - 1 }),
    disk: fc.constantFrom("/dev/sda", "/dev/nvme0n1", "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4", "/dev/vda"),
  });
  fc.assert(
    fc.property(node, token, (p, tok) => {
      // 10.x.y.z inside its /prefix, gateway = first host, address = another host
      const size = 2 ** (32 - p.prefix);
      const base = 10 * 2 ** 24 + (p.host - (p.host % size));
      const toIp = (v: number) => [24, 16, 8, 0].map((s) => Math.floor(v / 2 ** s) % 256).join(".");
      const addr = base + 2 + (p.host % (size - 3));
      const input: NodeInput = { ...baseNode, name: p.name, link: p.link, address: `${toIp(addr)}/${p.prefix}`, gateway: toIp(base + 1), installDisk: p.disk };
      const { tree: c } = renderAndValidate(input, tok);
      assert.equal(at(c, "cluster.token"), tok.token);
      assert.equal(at(c, "machine.network.hostname"), p.name);
      assert.deepEqual(at(c, "machine.network.interfaces.0.addresses"), [input.address]);
      if ("mac" in p.link) assert.equal(at(c, "machine.network.interfaces.0.deviceSelector.hardwareAddr"), p.link.mac);
      assert.equal(at(c, "machine.install.disk"), p.disk);
    }),
    { numRuns: Number(process.env["FLEETD_TALOS_CONFIG_RUNS"] ?? 30) },
  );
});

test("the validator can fail: Talos refuses a worker config carrying a CA key or lacking install", () => {
  const out = renderWorkerConfig(site, baseNode);
  const withKey = out.yaml.replace(/(machine:\n[\s\S]*?ca:\n\s+crt: \S+\n\s+key: )""/, "$1LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCg==");
  assert.notEqual(withKey, out.yaml);
  const v1 = validate(withKey);
  assert.equal(v1.valid, false);
  assert.ok(v1.errors.some((e) => /CA key is not allowed on non-controlplane nodes/.test(e)), v1.errors.join("\n"));
  const noInstall = out.yaml.replace(/\n  install:\n(    .*\n)+/, "\n");
  const v2 = validate(noInstall);
  assert.equal(v2.valid, false);
  assert.ok(v2.errors.some((e) => /install instructions are required in "metal" mode/.test(e)), v2.errors.join("\n"));
  const unknownKey = out.yaml.replace("persist: true", "persist: true\nfleetd: 1");
  const v3 = validate(unknownKey);
  assert.equal(v3.valid, false);
  assert.ok(v3.errors.some((e) => /unknown keys/.test(e)), v3.errors.join("\n"));
});

/** A secrets bundle as Talos writes it (`talosctl gen secrets`), read as fleetd reads the site's. */
function talosBundle(): { file: string; bundle: TalosSecretsBundle } {
  const file = join(dir, `talos-secrets-${n++}.yaml`);
  talosGo("gen-secrets", [file]);
  return { file, bundle: readSecretsBundle(file) };
}

function validateControlPlane(yaml: string, bundleFile: string): Validation {
  return validate(yaml, ["--strict", "--type", "controlplane", "--secrets", bundleFile]);
}

test(`a control plane from a Talos-generated secrets bundle: valid for Talos ${TALOS_VERSION} as a controlplane (metal), carrying that bundle's secrets`, () => {
  const { file, bundle } = talosBundle();
  const cpSite = siteForBundle(TALOS_VERSION, bundle, file);
  const out = renderControlPlaneConfig({ ...cpSite, controlPlane: { ...cpSite.controlPlane!, vip: "10.0.0.50", certSANs: ["api.lab.example"] } }, baseNode);
  const v = validateControlPlane(out.yaml, file);
  assert.deepEqual(v.errors, [], `Talos ${TALOS_VERSION} refused the control-plane config:\n${out.yaml}`);
  assert.deepEqual(v.warnings, []);
  const c = parse(v.canonical ?? "") as unknown;
  assert.equal(at(c, "machine.type"), "controlplane");
  assert.equal(at(c, "machine.network.hostname"), "w1");
  assert.deepEqual(at(c, "machine.network.interfaces.0.vip"), { ip: "10.0.0.50" });
  assert.deepEqual(at(c, "machine.certSANs"), ["10.0.0.21", "10.0.0.50", "api.lab.example"]);
  assert.deepEqual(at(c, "cluster.apiServer.certSANs"), ["api.lab.example", "10.0.0.21", "10.0.0.50"]);
  assert.equal(at(c, "cluster.apiServer.image"), cpSite.controlPlane!.images.apiServer);
  assert.deepEqual(at(c, "cluster.etcd.advertisedSubnets"), ["10.0.0.0/24"]);
  assert.equal(at(c, "cluster.token"), out.bootstrapToken.token);
  assert.notEqual(out.bootstrapToken.token, bundle.secrets.bootstraptoken, "a per-node token, not the bundle's");
  assert.equal(at(c, "machine.install.disk"), "/dev/sda");
  assert.equal((at(c, "machine.files") as unknown[]).length, 5);
});

test("a control plane from an openssl-made bundle (ECDSA CAs in SEC1 keys) is valid for Talos too, over IPv6 and by interface name", () => {
  const bundle = secretsBundleFixture();
  const file = writeSecretsBundle(join(dir, `fixture-secrets-${n++}.yaml`), bundle);
  const out = renderControlPlaneConfig(siteForBundle(TALOS_VERSION, bundle, file), { ...baseNode, link: { name: "enp1s0" }, address: "2001:db8::21/64", gateway: "2001:db8::1" });
  const v = validateControlPlane(out.yaml, file);
  assert.deepEqual(v.errors, [], out.yaml);
  assert.deepEqual(at(parse(v.canonical ?? ""), "cluster.etcd.advertisedSubnets"), ["2001:db8::21/64"]);
});

test("the validator can fail in controlplane mode: a worker, a control plane missing a secret, another cluster's bundle", () => {
  const { file, bundle } = talosBundle();
  const cpSite = siteForBundle(TALOS_VERSION, bundle, file);
  const worker = renderWorkerConfig(cpSite, baseNode);
  const v1 = validate(worker.yaml, ["--type", "controlplane"]);
  assert.equal(v1.valid, false);
  assert.ok(v1.errors.some((e) => /machine type is "worker", want "controlplane"/.test(e)), v1.errors.join("\n"));

  const cp = renderControlPlaneConfig(cpSite, baseNode).yaml;
  const noAggregator = cp.replace(/\n  aggregatorCA:\n(    .*\n)+/, "\n");
  assert.notEqual(noAggregator, cp);
  const v2 = validate(noAggregator, ["--type", "controlplane"]);
  assert.equal(v2.valid, false);
  assert.ok(v2.errors.some((e) => /certs\.k8saggregator is required/.test(e)), v2.errors.join("\n"));

  const noEtcdKey = cp.replace(/(\n  etcd:\n    ca:\n      crt: \S+\n      key: )\S+/, '$1""');
  assert.notEqual(noEtcdKey, cp);
  const v3 = validate(noEtcdKey, ["--type", "controlplane"]);
  assert.equal(v3.valid, false);
  assert.ok(v3.errors.some((e) => /certs\.etcd is invalid/.test(e)), v3.errors.join("\n"));

  const other = talosBundle();
  const v4 = validateControlPlane(cp, other.file);
  assert.equal(v4.valid, false);
  assert.ok(v4.errors.some((e) => /differ: certs\.etcd\.key/.test(e)), v4.errors.join("\n"));
  assert.ok(v4.errors.every((e) => !e.includes(bundle.certs.etcd.key) && !e.includes(other.bundle.certs.etcd.key)), "the validator quotes a secret");

  const v5 = validate(worker.yaml, ["--type", "worker"]);
  assert.deepEqual(v5.errors, []);
});
