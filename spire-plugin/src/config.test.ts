import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { parseAllDocuments } from "yaml";
import { loadSpirePluginConfig, parseSpirePluginConfig, SpirePluginConfigError } from "./config.js";

const pkg = resolve(fileURLToPath(import.meta.url), "../..");

test("the shipped example configuration parses (ConfigMap list and status, defaults)", () => {
  const c = loadSpirePluginConfig(join(pkg, "examples/spire-plugin.yaml"));
  assert.equal(c.trustDomain, "fleet.example.org");
  assert.equal(c.socketPath, "/run/spire/server/private/api.sock");
  assert.equal(c.devidCaPath, "/etc/spire/fleetd/devid-ca-bundle.pem");
  assert.deepEqual(c.list, { configMap: { kubeconfig: "in-cluster", namespace: "fleetd", name: "spire-nodes", key: "spire-nodes.json" } });
  assert.equal(c.batchSize, 200);
  assert.equal(c.ha, undefined);
});

test("bad configurations are refused naming the field", () => {
  const base = { trustDomain: "lab.test", devidCaPath: "/etc/spire/fleetd/devid-ca-bundle.pem", socketPath: "/run/api.sock", list: { file: "/x/spire-nodes.json" }, status: { file: "/x/status.json" } };
  assert.equal(parseSpirePluginConfig(base).intervalSeconds, 30);
  for (const [bad, field] of [
    [{ ...base, socketPath: "relative.sock" }, "socketPath"],
    [{ ...base, devidCaPath: "ca.pem" }, "devidCaPath"],
    [{ ...base, devidCaPath: undefined }, "devidCaPath"],
    [{ ...base, trustDomain: "Bad TD" }, "trustDomain"],
    [{ ...base, list: { file: "/a", configMap: {} } }, "list"],
    [{ ...base, batchSize: 0 }, "batchSize"],
    [{ ...base, extra: true }, ""],
    [{ ...base, ha: { namespace: "fleetd", identity: "a", retryPeriodSeconds: 20 } }, "ha"],
  ] as const) {
    assert.throws(() => parseSpirePluginConfig(bad), (e: unknown) => e instanceof SpirePluginConfigError && e.message.includes(field), JSON.stringify(bad));
  }
});

test("the sidecar manifest: the admin socket volume is mounted by the two containers only, the plugin runs with the server's group and sees only the LDevID CA bundle", () => {
  const docs = parseAllDocuments(readFileSync(join(pkg, "manifests/spire-server.yaml"), "utf8")).map((d) => d.toJSON() as Record<string, unknown>);
  const sts = docs.find((d) => d["kind"] === "StatefulSet") as { spec: { template: { spec: { securityContext: { fsGroup: number; runAsGroup: number }; containers: { name: string; volumeMounts: { name: string; mountPath: string }[] }[] } } } };
  const pod = sts.spec.template.spec;
  assert.equal(pod.securityContext.fsGroup, pod.securityContext.runAsGroup);
  const mounts = pod.containers.map((c) => [c.name, c.volumeMounts.filter((m) => m.name === "admin-socket").map((m) => m.mountPath)]);
  assert.deepEqual(mounts, [["spire-server", ["/run/spire/server/private"]], ["spire-plugin", ["/run/spire/server/private"]]]);
  const plugin = pod.containers.find((c) => c.name === "spire-plugin");
  assert.deepEqual(plugin?.volumeMounts.map((m) => m.name).sort(), ["admin-socket", "devid-ca", "plugin-conf"], "the sidecar sees no key or datastore");
  const volumes = (pod as unknown as { volumes: { name: string; secret?: { items?: { key: string }[] } }[] }).volumes;
  assert.deepEqual(volumes.find((v) => v.name === "devid-ca")?.secret?.items?.map((i) => i.key), ["devid-ca-bundle.pem"], "of the CA files, only the LDevID CA bundle (devidCaPath)");
  const role = docs.find((d) => d["kind"] === "Role" && (d["metadata"] as { name: string }).name === "fleetd-spire-plugin") as { rules: { resources: string[]; verbs: string[]; resourceNames?: string[] }[] };
  assert.ok(!role.rules.some((r) => r.resources.includes("secrets")), "no Secrets");
});

test("the sidecar has no readiness probe (its /readyz must not take spire-server out of its Service)", () => {
  const docs = parseAllDocuments(readFileSync(join(pkg, "manifests/spire-server.yaml"), "utf8")).map((d) => d.toJSON() as Record<string, unknown>);
  const sts = docs.find((d) => d["kind"] === "StatefulSet") as { spec: { template: { spec: { containers: { name: string; readinessProbe?: unknown; livenessProbe?: unknown }[] } } } };
  const plugin = sts.spec.template.spec.containers.find((c) => c.name === "spire-plugin");
  assert.equal(plugin?.readinessProbe, undefined);
  assert.ok(plugin?.livenessProbe);
});

test("ha from one shared file: FLEETD_HA_IDENTITY is each replica's identity; without ha it turns nothing on", () => {
  const dir = mkdtempSync(join(tmpdir(), "spire-plugin-cfg-"));
  try {
    const base = readFileSync(join(pkg, "examples/spire-plugin.yaml"), "utf8");
    const plain = join(dir, "plain.yaml");
    writeFileSync(plain, base);
    assert.equal(loadSpirePluginConfig(plain, { FLEETD_HA_IDENTITY: "spire-server-1" }).ha, undefined);
    const ha = join(dir, "ha.yaml");
    writeFileSync(ha, `${base}\nha: { namespace: fleetd, identity: spire-server-0 }\n`);
    assert.equal(loadSpirePluginConfig(ha, {}).ha?.identity, "spire-server-0");
    assert.equal(loadSpirePluginConfig(ha, { FLEETD_HA_IDENTITY: "spire-server-1" }).ha?.identity, "spire-server-1");
    assert.throws(() => loadSpirePluginConfig(ha, { FLEETD_HA_IDENTITY: "a b" }), (e: unknown) => e instanceof SpirePluginConfigError && e.message.includes("ha.identity"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
