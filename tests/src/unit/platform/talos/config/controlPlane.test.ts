import { strict as assert } from "node:assert";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { parse } from "yaml";
import {
  ConfigInputError, renderControlPlaneConfig, renderNodeConfig, renderWorkerConfig, TOKEN_PATTERN,
  type TalosSecretsBundle,
} from "@fleetd/platform/talos/config";
import { nodeInputFixture, secretsBundleFixture, siteForBundle, writeSecretsBundle } from "@fleetd/testkit/talosConfig";

const dir = mkdtempSync(join(tmpdir(), "fleetd-cp-"));
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
const bundleFile = (b: unknown, mode = 0o600) => writeSecretsBundle(join(dir, `secrets-${files++}.yaml`), b, mode);

const bundle = secretsBundleFixture();
const file = bundleFile(bundle);
const site = siteForBundle("v1.13.9", bundle, file);
const node = nodeInputFixture();
const token = { id: "abc123", secret: "0123456789abcdef", token: "abc123.0123456789abcdef" };

type Tree = Record<string, unknown>;
const at = (t: unknown, path: string): unknown =>
  path.split(".").reduce<unknown>((v, k) => (v !== null && typeof v === "object" ? (v as Tree)[k] : undefined), t);

/** Every secret value of a bundle, and the PEM bodies inside the base64 ones. */
function secretsOf(b: TalosSecretsBundle): string[] {
  const out: string[] = [];
  const walk = (v: unknown) => {
    if (typeof v === "string") {
      out.push(v);
      const pem = Buffer.from(v, "base64").toString("utf8");
      for (const m of pem.matchAll(/-----BEGIN [A-Z0-9 ]+-----\n([\s\S]+?)-----END/g)) out.push(...m[1]!.split("\n").filter((l) => l.length >= 16));
    } else if (v && typeof v === "object") Object.values(v).forEach(walk);
  };
  walk(b);
  return out.filter((s) => s.length >= 8);
}

function refusal(f: () => unknown): ConfigInputError {
  try {
    f();
  } catch (e) {
    if (e instanceof ConfigInputError) return e;
    throw e;
  }
  throw new Error("rendered, but should have been refused");
}

function assertNoSecret(e: Error, b: TalosSecretsBundle): void {
  const text = `${e.message}\n${JSON.stringify(e)}\n${String(e.stack)}`;
  for (const s of secretsOf(b)) assert.ok(!text.includes(s), `the refusal quotes a secret: ${e.message}`);
}

test("a control-plane config carries the bundle's CA keys and secrets, the node's own values and a per-node token", () => {
  const out = renderControlPlaneConfig({ ...site, controlPlane: { ...site.controlPlane!, vip: "10.0.0.50", certSANs: ["api.lab.example", "10.0.0.50"] } }, node, { token });
  const c = parse(out.yaml) as Tree;
  assert.equal(at(c, "machine.type"), "controlplane");
  assert.deepEqual(at(c, "machine.ca"), { crt: bundle.certs.os.crt, key: bundle.certs.os.key });
  assert.equal(at(c, "machine.token"), bundle.trustdinfo.token);
  assert.deepEqual(at(c, "machine.certSANs"), ["10.0.0.21", "10.0.0.50", "api.lab.example"]);
  assert.equal(at(c, "machine.network.hostname"), "w1");
  assert.deepEqual(at(c, "machine.network.interfaces.0.vip"), { ip: "10.0.0.50" });
  assert.deepEqual(at(c, "machine.network.interfaces.0.addresses"), ["10.0.0.21/24"]);
  assert.equal(at(c, "machine.install.disk"), "/dev/sda");
  assert.equal((at(c, "machine.files") as unknown[]).length, 5);
  assert.deepEqual(at(c, "cluster.ca"), { crt: bundle.certs.k8s.crt, key: bundle.certs.k8s.key });
  assert.deepEqual(at(c, "cluster.aggregatorCA"), bundle.certs.k8saggregator);
  assert.deepEqual(at(c, "cluster.serviceAccount"), bundle.certs.k8sserviceaccount);
  assert.deepEqual(at(c, "cluster.etcd.ca"), bundle.certs.etcd);
  assert.deepEqual(at(c, "cluster.etcd.advertisedSubnets"), ["10.0.0.0/24"]);
  assert.equal(at(c, "cluster.secretboxEncryptionSecret"), bundle.secrets.secretboxencryptionsecret);
  assert.equal(at(c, "cluster.id"), bundle.cluster.id);
  assert.equal(at(c, "cluster.secret"), bundle.cluster.secret);
  assert.equal(at(c, "cluster.token"), token.token, "the node's own token, not the bundle's");
  assert.notEqual(at(c, "cluster.token"), bundle.secrets.bootstraptoken);
  assert.deepEqual(at(c, "cluster.apiServer.certSANs"), ["api.lab.example", "10.0.0.21", "10.0.0.50"]);
  assert.equal(at(c, "cluster.apiServer.image"), site.controlPlane!.images.apiServer);
  assert.equal(at(c, "cluster.controllerManager.image"), site.controlPlane!.images.controllerManager);
  assert.equal(at(c, "cluster.scheduler.image"), site.controlPlane!.images.scheduler);
  assert.equal(at(c, "cluster.proxy.image"), site.controlPlane!.images.proxy);
  assert.equal(at(c, "cluster.allowSchedulingOnControlPlanes"), undefined);
  assert.equal(out.bootstrapToken, token);

  const fresh = renderControlPlaneConfig(site, node);
  assert.match(fresh.bootstrapToken.token, TOKEN_PATTERN);
  assert.equal(at(parse(fresh.yaml), "cluster.token"), fresh.bootstrapToken.token);
  assert.equal(at(parse(fresh.yaml), "machine.network.interfaces.0.vip"), undefined);
});

test("renderNodeConfig renders by role; a worker gets no key even when the site has a secrets bundle", () => {
  const w = renderNodeConfig(site, "worker", node, { token });
  assert.equal(w.yaml, renderWorkerConfig({ ...site, controlPlane: undefined }, node, { token }).yaml);
  const wc = parse(w.yaml) as Tree;
  assert.equal(at(wc, "machine.type"), "worker");
  assert.equal(at(wc, "machine.ca.key"), "");
  assert.equal(at(wc, "cluster.ca.key"), "");
  for (const s of secretsOf(bundle).filter((x) => x !== bundle.certs.os.crt && x !== bundle.certs.k8s.crt)) {
    if ([bundle.cluster.id, bundle.cluster.secret, bundle.trustdinfo.token].includes(s)) continue; // workers have these
    if (Buffer.from(bundle.certs.os.crt, "base64").toString().includes(s) || Buffer.from(bundle.certs.k8s.crt, "base64").toString().includes(s)) continue;
    assert.ok(!w.yaml.includes(s), "a worker config carries a control-plane secret");
  }
  assert.equal(at(parse(renderNodeConfig(site, "control-plane", node).yaml), "machine.type"), "controlplane");
});

test("control-plane refusals name the file and the field, never a secret", () => {
  const other = secretsBundleFixture();
  const withBundle = (b: unknown, mode?: number) => ({ ...site, controlPlane: { ...site.controlPlane!, secretsBundleFile: bundleFile(b, mode) } });
  const drop = (path: string): unknown => {
    const b = structuredClone(bundle) as unknown as Tree;
    const keys = path.split(".");
    const parent = keys.slice(0, -1).reduce<Tree>((v, k) => v[k] as Tree, b);
    delete parent[keys.at(-1)!];
    return b;
  };
  const subdir = join(dir, "a-directory");
  mkdirSync(subdir);
  const cases: [string, unknown, ConfigInputError["code"], string, RegExp][] = [
    ["no controlPlane section", { ...site, controlPlane: undefined }, "site-config-invalid", "controlPlane", /secretsBundleFile/],
    ["a relative path", { ...site, controlPlane: { ...site.controlPlane!, secretsBundleFile: "secrets.yaml" } }, "site-config-invalid", "controlPlane.secretsBundleFile", /absolute/],
    ["no such file", { ...site, controlPlane: { ...site.controlPlane!, secretsBundleFile: join(dir, "missing.yaml") } }, "site-secrets-invalid", "", /cannot be read \(ENOENT\)/],
    ["a directory", { ...site, controlPlane: { ...site.controlPlane!, secretsBundleFile: subdir } }, "site-secrets-invalid", "", /not a regular file|EISDIR/],
    ["readable by others", withBundle(bundle, 0o644), "site-secrets-invalid", "", /mode 0644.*0600/],
    ["readable by the group", withBundle(bundle, 0o640), "site-secrets-invalid", "", /mode 0640/],
    ["no etcd CA key", withBundle(drop("certs.etcd.key")), "site-secrets-invalid", "certs.etcd.key", /.+/],
    ["no service-account key", withBundle(drop("certs.k8sserviceaccount")), "site-secrets-invalid", "certs.k8sserviceaccount", /.+/],
    ["no aggregator CA", withBundle(drop("certs.k8saggregator")), "site-secrets-invalid", "certs.k8saggregator", /.+/],
    ["no encryption secret", withBundle(drop("secrets.secretboxencryptionsecret")), "site-secrets-invalid", "secrets", /one of secretboxencryptionsecret, aescbcencryptionsecret/],
    ["two encryption secrets", withBundle({ ...bundle, secrets: { ...bundle.secrets, aescbcencryptionsecret: other.secrets.secretboxencryptionsecret } }), "site-secrets-invalid", "secrets", /only one of/],
    ["a short encryption secret", withBundle({ ...bundle, secrets: { ...bundle.secrets, secretboxencryptionsecret: "c2hvcnQ=" } }), "site-secrets-invalid", "secrets.secretboxencryptionsecret", /32 bytes/],
    ["another CA's key", withBundle({ ...bundle, certs: { ...bundle.certs, k8s: { ...bundle.certs.k8s, key: bundle.certs.etcd.key } } }), "site-secrets-invalid", "certs.k8s.key", /not the key of this crt/],
    ["a certificate as the key", withBundle({ ...bundle, certs: { ...bundle.certs, os: { ...bundle.certs.os, key: bundle.certs.os.crt } } }), "site-secrets-invalid", "certs.os.key", /PEM private key/],
    ["a key that is not base64", withBundle({ ...bundle, certs: { ...bundle.certs, etcd: { ...bundle.certs.etcd, key: "-----BEGIN EC PRIVATE KEY-----" } } }), "site-secrets-invalid", "certs.etcd.key", /base64/],
    ["a bad trustd token", withBundle({ ...bundle, trustdinfo: { token: "ABCDEF.0123456789abcdef" } }), "site-secrets-invalid", "trustdinfo.token", /token/],
    ["an unknown key", withBundle({ ...bundle, extra: { note: 1 } }), "site-secrets-invalid", "", /extra/],
    ["not YAML", withBundle(`cluster: {id: ${bundle.cluster.id}, secret: ${bundle.cluster.secret}\n  : [`), "site-secrets-invalid", "", /not valid YAML/],
    // aliases (a billion-laughs shape) are refused without being expanded
    ["a YAML alias", withBundle("a: &a [x, x]\nb: &b [*a, *a]\ncluster: *b\n"), "site-secrets-invalid", "", /aliases/],
    ["another cluster's bundle", withBundle(other), "site-secrets-invalid", "cluster.id", /differs from the site configuration's cluster.id/],
    ["a VIP outside the node's subnet", { ...site, controlPlane: { ...site.controlPlane!, vip: "10.0.1.50" } }, "site-config-invalid", "controlPlane.vip", /subnet/],
    ["the node's own address as VIP", { ...site, controlPlane: { ...site.controlPlane!, vip: "10.0.0.21" } }, "site-config-invalid", "controlPlane.vip", /another address/],
    ["an apiserver of another Kubernetes version", { ...site, controlPlane: { ...site.controlPlane!, images: { ...site.controlPlane!.images, apiServer: "registry.k8s.io/kube-apiserver:v1.33.0" } } }, "site-config-invalid", "controlPlane.images.apiServer", /kubelet/],
  ];
  for (const [name, s, code, path, message] of cases) {
    const e = refusal(() => renderControlPlaneConfig(s, node));
    assert.equal(e.code, code, `${name}: ${e.message}`);
    const issue = e.issues.find((i) => i.path === path || (path !== "" && i.path.startsWith(path + ".")));
    assert.ok(issue, `${name}: no issue at "${path}" in ${e.message}`);
    assert.match(e.message, message, name);
    if (code === "site-secrets-invalid" && path !== "controlPlane.secretsBundleFile") assert.match(e.message, /secrets bundle \//, `${name}: the refusal names the file`);
    assertNoSecret(e, bundle);
    assertNoSecret(e, other);
  }
  const mismatch = refusal(() => renderControlPlaneConfig(withBundle(other), node));
  assert.deepEqual(mismatch.issues.map((i) => i.path).sort(), ["certs.k8s.crt", "certs.os.crt", "cluster.id", "cluster.secret", "trustdinfo.token"]);
});
