import { strict as assert } from "node:assert";
import { test } from "node:test";
import {
  ConfigInputError, renderWorkerConfig, newBootstrapToken, TOKEN_PATTERN, inSubnet, isUsableHost, parseCidr,
  subnetOf,
} from "@fleetd/platform/talos/config";
import { makeCerts, nodeInputFixture, siteConfigFixture } from "@fleetd/testkit/talosConfig";

const site = siteConfigFixture("v1.13.9");
const node = nodeInputFixture();

function refusal(s: unknown, n: unknown): ConfigInputError {
  try {
    renderWorkerConfig(s, n);
  } catch (e) {
    if (e instanceof ConfigInputError) return e;
    throw e;
  }
  throw new Error("rendered, but should have been refused");
}

test("bootstrap tokens have the Kubernetes format and differ", () => {
  const seen = new Set<string>();
  for (let i = 0; i < 200; i++) {
    const t = newBootstrapToken();
    assert.match(t.token, TOKEN_PATTERN);
    assert.equal(t.token, `${t.id}.${t.secret}`);
    seen.add(t.id);
  }
  assert.ok(seen.size > 190);
});

test("addresses: CIDR parsing, subnet membership, usable hosts", () => {
  assert.deepEqual(parseCidr("10.0.0.21/24"), { address: "10.0.0.21", prefix: 24, family: 4 });
  assert.equal(parseCidr("10.0.0.21"), undefined);
  assert.equal(parseCidr("10.0.0.300/24"), undefined);
  assert.equal(parseCidr("10.0.0.1/33"), undefined);
  assert.equal(parseCidr("10.0.0.1/024"), undefined);
  assert.equal(parseCidr("fe80::1%eth0/64"), undefined);
  assert.equal(parseCidr("2001:db8::21/64")?.family, 6);
  assert.ok(inSubnet(parseCidr("10.0.0.21/24")!, "10.0.0.1"));
  assert.ok(!inSubnet(parseCidr("10.0.0.21/24")!, "10.0.1.1"));
  assert.ok(inSubnet(parseCidr("2001:db8::21/64")!, "2001:db8::1"));
  assert.ok(!isUsableHost(parseCidr("10.0.0.0/24")!));
  assert.ok(!isUsableHost(parseCidr("10.0.0.255/24")!));
  assert.ok(isUsableHost(parseCidr("10.0.0.0/31")!));
  assert.equal(subnetOf(parseCidr("10.1.2.200/25")!), "10.1.2.128/25");
});

test("node input: bad addresses and gateways are refused before rendering", () => {
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ address: "10.0.0.300/24" }, "address", /CIDR/],
    [{ address: "10.0.0.21" }, "address", /CIDR/],
    [{ address: "10.0.0.0/24" }, "address", /network or broadcast/],
    [{ address: "10.0.0.255/24" }, "address", /network or broadcast/],
    [{ address: "not-an-ip/24" }, "address", /CIDR/],
    [{ gateway: "10.0.1.1" }, "gateway", /outside 10\.0\.0\.21\/24/],
    [{ gateway: "2001:db8::1" }, "gateway", /family/],
    [{ gateway: "10.0.0.21" }, "gateway", /own address/],
    [{ gateway: "10.0.0" }, "gateway", /IPv4 or IPv6/],
    [{ address: "2001:db8::21/64", gateway: "2001:db8:0::21" }, "gateway", /own address/],
    [{ link: { mac: "52:54:00:12:34" } }, "link", /.+/],
    [{ link: { name: "eth0; rm -rf /" } }, "link", /.+/],
    [{ link: { mac: "52:54:00:12:34:56", name: "eth0" } }, "link", /.+/],
    [{ name: "W1" }, "name", /DNS label/],
    [{ name: "w1.example.com" }, "name", /DNS label/],
    [{ installDisk: "sda" }, "installDisk", /.+/],
    [{ installDisk: "/dev/../etc/passwd" }, "installDisk", /\.\./],
    [{ seed: { ...node.seed, ldevidCertChainPem: "garbage" } }, "seed.ldevidCertChainPem", /PEM/],
    [{ seed: { ...node.seed, lakPrivate: new Uint8Array(0) } }, "seed.lakPrivate", /bytes/],
    [{ extra: 1 }, "", /.+/],
  ];
  for (const [patch, path, message] of cases) {
    const e = refusal(site, { ...node, ...patch });
    assert.equal(e.code, "node-input-invalid", JSON.stringify(patch));
    const issue = e.issues.find((i) => i.path === path || i.path.startsWith(path + "."));
    assert.ok(issue, `${JSON.stringify(patch)}: no issue at ${path} in ${e.message}`);
    assert.match(issue.message, message, JSON.stringify(patch));
  }
});

test("site config: version, images, endpoint, CAs and tokens are checked", () => {
  const withKey = makeCerts("talos").ca + "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
  const leaf = makeCerts("ca", "not-a-ca").leaf!;
  const cases: [(s: typeof site) => unknown, string][] = [
    [(s) => ({ ...s, talos: { ...s.talos, version: "1.13.9" } }), "talos.version"],
    [(s) => ({ ...s, talos: { ...s.talos, installerImage: "ghcr.io/siderolabs/installer:v1.12.0" } }), "talos.installerImage"],
    [(s) => ({ ...s, talos: { ...s.talos, kubeletImage: "kubelet" } }), "talos.kubeletImage"],
    [(s) => ({ ...s, cluster: { ...s.cluster, endpoint: "http://api.lab.example:6443" } }), "cluster.endpoint"],
    [(s) => ({ ...s, cluster: { ...s.cluster, osCaCert: withKey } }), "cluster.osCaCert"],
    [(s) => ({ ...s, cluster: { ...s.cluster, kubernetesCaCert: leaf } }), "cluster.kubernetesCaCert"],
    [(s) => ({ ...s, cluster: { ...s.cluster, trustdToken: "ABCDEF.0123456789abcdef" } }), "cluster.trustdToken"],
    [(s) => ({ ...s, cluster: { ...s.cluster, podSubnets: [] } }), "cluster.podSubnets"],
    [(s) => ({ ...s, network: { nameservers: ["dns.example"] } }), "network.nameservers.0"],
    [(s) => ({ ...s, talos: undefined }), "talos"],
  ];
  for (const [patch, path] of cases) {
    const e = refusal(patch(site), node);
    assert.equal(e.code, "site-config-invalid");
    assert.ok(e.issues.some((i) => i.path === path), `expected an issue at ${path}: ${e.message}`);
  }
});
