/** The server's configuration: defaults, environment overrides, and every refusal naming its field. */
import { DEFAULT_LISTENER_LIMITS } from "@fleetd/platform/http";
import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { parse as parseYaml, stringify } from "yaml";
import { DEFAULT_MODE_GATES } from "@fleetd/platform/fleet";
import { secretsBundleFixture, siteConfigFixture, siteForBundle, writeSecretsBundle } from "@fleetd/testkit/talosConfig";
import { ConfigError, loadServerConfig, toServerConfig } from "./config.js";

const dir = mkdtempSync(join(tmpdir(), "fleetd-server-config-"));
const siteFile = join(dir, "talos-site.yaml");
writeFileSync(siteFile, stringify(siteConfigFixture("v1.13.9")));
const TOKEN = "nbt_abcdefghijkl.0123456789012345678901234567890123456789";
const ENV = { FLEETD_NETBOX_TOKEN: TOKEN };

function raw(server: Record<string, unknown> = {}, top: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    netbox: { url: "https://netbox.example.org" },
    accounts: { apply: "fleetd-apply", handler: "fleetd-handler" },
    authorizedGroup: "fleetd-operators",
    server: {
      tls: { certFile: "/etc/fleetd/tls.crt", keyFile: "/etc/fleetd/tls.key" },
      stateDb: "/var/lib/fleetd/server/state.db",
      ekRootsDir: "/etc/fleetd/ek-roots",
      ca: { signer: { module: "/usr/lib/softhsm/libsofthsm2.so", token: { label: "fleetd-ca" }, key: { id: "02" }, pin: { env: "FLEETD_CA_PIN" } }, bundleStateFile: "/var/lib/fleetd/server/ca-bundle.json" },
      talos: { siteFile },
      ...server,
    },
    ...top,
  };
}

function refused(fn: () => unknown, message: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof ConfigError, String(e));
    assert.match(e.message, message);
    assert.ok(!e.message.includes(TOKEN), "the token never appears in a message");
    return true;
  });
}

test("a minimal configuration gets the documented defaults", () => {
  const c = toServerConfig("f.yaml", raw(), ENV);
  assert.equal(c.server.mode, "production");
  assert.deepEqual(c.server.listen, { host: "0.0.0.0", port: 8443, limits: DEFAULT_LISTENER_LIMITS });
  assert.deepEqual(c.server.ttl, { sessionSeconds: 300, installCodeSeconds: 7200, staleClaimSeconds: 60 });
  assert.deepEqual(c.server.rateLimit, { maxFailures: 5, windowSeconds: 60, attestRequests: 60, attestWindowSeconds: 60 });
  assert.deepEqual(c.server.roleSlugs, { worker: "fleetd-worker", "control-plane": "fleetd-control-plane" });
  assert.equal(c.server.ca.ldevidLifetimeDays, 30);
  assert.equal(c.server.ca.signer.rsaMechanism, "auto");
  assert.equal(c.server.provisioningProfile, "hookos");
  assert.equal(c.server.bodyLimitBytes, 2 * 1024 * 1024);
  assert.deepEqual(c.gates, DEFAULT_MODE_GATES);
  assert.equal(c.site.netbox.token, TOKEN);
  assert.equal(c.talos.cluster.name, "lab");
});

test("mode gates: a mode given replaces its default, the others keep theirs", () => {
  const c = toServerConfig("f.yaml", raw({ gates: { provision: ["staged"] } }), ENV);
  assert.deepEqual(c.gates, { ...DEFAULT_MODE_GATES, provision: ["staged"] });
  refused(() => toServerConfig("f.yaml", raw({ gates: { provision: ["Not A Slug"] } }), ENV), /server\.gates\.provision\.0: must be a NetBox slug/);
  refused(() => toServerConfig("f.yaml", raw({ gates: { decommission: [] } }), ENV), /server\.gates: .*decommission/);
});

test("environment overrides: listen host/port and log level", () => {
  const c = toServerConfig("f.yaml", raw({ listen: { host: "127.0.0.1", port: 1 } }), { ...ENV, FLEETD_SERVER_PORT: "9443", FLEETD_LOG_LEVEL: "debug" });
  assert.deepEqual(c.server.listen, { host: "127.0.0.1", port: 9443, limits: DEFAULT_LISTENER_LIMITS });
  assert.equal(c.server.logLevel, "debug");
  refused(() => toServerConfig("f.yaml", raw(), { ...ENV, FLEETD_SERVER_PORT: "https" }), /FLEETD_SERVER_PORT: "https" is not a port number/);
  refused(() => toServerConfig("f.yaml", raw(), { ...ENV, FLEETD_SERVER_PORT: "70000" }), /server\.listen\.port: /);
});

test("plain HTTP only in the lab", () => {
  const noTls = raw();
  delete (noTls["server"] as Record<string, unknown>)["tls"];
  refused(() => toServerConfig("f.yaml", noTls, ENV), /server\.tls: required: plain HTTP is allowed only with server\.mode: lab/);
  (noTls["server"] as Record<string, unknown>)["mode"] = "lab";
  assert.equal(toServerConfig("f.yaml", noTls, ENV).server.tls, undefined);
});

test("secrets: the NetBox token from the environment or a file, never from the configuration outside the lab", () => {
  const inline = raw({}, { netbox: { url: "https://netbox.example.org", token: TOKEN } });
  refused(() => toServerConfig("f.yaml", inline, {}), /netbox\.token: talos-config-server takes the NetBox token only from FLEETD_NETBOX_TOKEN or netbox\.tokenFile/);
  refused(() => toServerConfig("f.yaml", inline, ENV), /netbox\.token: /);
  assert.equal(toServerConfig("f.yaml", raw({ mode: "lab" }, { netbox: { url: "https://netbox.example.org", token: TOKEN } }), {}).site.netbox.token, TOKEN);
  const tokenFile = join(dir, "token");
  writeFileSync(tokenFile, `${TOKEN}\n`);
  assert.equal(toServerConfig("f.yaml", raw({}, { netbox: { url: "https://netbox.example.org", tokenFile } }), {}).site.netbox.token, TOKEN);
  refused(() => toServerConfig("f.yaml", raw({}, { netbox: { url: "https://netbox.example.org", tokenFile: join(dir, "none") } }), {}), /netbox\.tokenFile: cannot read .*none: ENOENT/);
  refused(() => toServerConfig("f.yaml", raw(), {}), /netbox\.token: /);
  refused(() => toServerConfig("f.yaml", raw({ ca: { ...(raw()["server"] as { ca: Record<string, unknown> }).ca, signer: { module: "/x.so", token: { label: "t" }, key: { id: "02" }, pin: "123456" } } }), ENV), /server\.ca\.signer\.pin: /);
});

test("bounds and shapes are refused with the field's path", () => {
  const ca = (raw()["server"] as { ca: Record<string, unknown> }).ca;
  refused(() => toServerConfig("f.yaml", raw({ ca: { ...ca, ldevidLifetimeDays: 31 } }), ENV), /server\.ca\.ldevidLifetimeDays: .*30/);
  refused(() => toServerConfig("f.yaml", raw({ ttl: { sessionSeconds: 5 } }), ENV), /server\.ttl\.sessionSeconds: /);
  refused(() => toServerConfig("f.yaml", raw({ rateLimit: { maxFailures: 0 } }), ENV), /server\.rateLimit\.maxFailures: /);
  refused(() => toServerConfig("f.yaml", raw({ stateDb: "" }), ENV), /server\.stateDb: must be a path/);
  refused(() => toServerConfig("f.yaml", { netbox: {} }, ENV), /server: required/);
  refused(() => toServerConfig("f.yaml", raw({ talos: { siteFile: join(dir, "missing.yaml") } }), ENV), /server\.talos\.siteFile: cannot read .*missing\.yaml: ENOENT/);
  const badSite = join(dir, "bad-site.yaml");
  writeFileSync(badSite, stringify({ ...siteConfigFixture("v1.13.9"), network: { nameservers: [] } }));
  refused(() => toServerConfig("f.yaml", raw({ talos: { siteFile: badSite } }), ENV), /invalid Talos site file .*bad-site\.yaml: network\.nameservers: /);
});

test("control planes: the Talos site file's secrets bundle is checked at start; refusals name the file and field, never a secret", () => {
  const bundle = secretsBundleFixture();
  const secrets = [bundle.certs.os.key, bundle.certs.k8s.key, bundle.certs.etcd.key, bundle.certs.k8saggregator.key, bundle.certs.k8sserviceaccount.key, bundle.cluster.secret, bundle.trustdinfo.token, bundle.secrets.secretboxencryptionsecret!];
  const site = (bundleFile: string, b = bundle) => {
    const f = join(dir, `cp-site-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(f, stringify(siteForBundle("v1.13.9", b, bundleFile)));
    return raw({ talos: { siteFile: f } });
  };
  const good = writeSecretsBundle(join(dir, "cp-secrets.yaml"), bundle);
  const c = toServerConfig("f.yaml", site(good), ENV);
  assert.equal(c.talos.controlPlane?.secretsBundleFile, good);
  assert.ok(!JSON.stringify(c.talos).includes(bundle.certs.etcd.key), "the bundle's contents stay in their file");
  const noSecret = (fn: () => unknown, message: RegExp) =>
    refused(() => {
      try {
        return fn();
      } catch (e) {
        for (const v of secrets) assert.ok(!(e as Error).message.includes(v), `a secret in: ${(e as Error).message}`);
        throw e;
      }
    }, message);
  noSecret(() => toServerConfig("f.yaml", site(writeSecretsBundle(join(dir, "cp-secrets-0644.yaml"), bundle, 0o644)), ENV), /Talos site file .*: controlPlane\.secretsBundleFile: .*cp-secrets-0644\.yaml: has mode 0644/);
  noSecret(() => toServerConfig("f.yaml", site(join(dir, "cp-none.yaml")), ENV), /cp-none\.yaml: cannot be read \(ENOENT\)/);
  noSecret(() => toServerConfig("f.yaml", site(writeSecretsBundle(join(dir, "cp-other.yaml"), secretsBundleFixture())), ENV), /cp-other\.yaml: cluster\.id: differs from the site configuration's cluster\.id/);
  const noKey = structuredClone(bundle) as unknown as { certs: { os: Record<string, unknown> } };
  delete noKey.certs.os["key"];
  noSecret(() => toServerConfig("f.yaml", site(writeSecretsBundle(join(dir, "cp-nokey.yaml"), noKey)), ENV), /cp-nokey\.yaml: certs\.os\.key: required/);
});

test("control planes: the server process refuses to start on a bad secrets bundle, and what it prints holds no secret", () => {
  const bundle = secretsBundleFixture();
  const secrets = [bundle.certs.os.key, bundle.certs.k8s.key, bundle.certs.etcd.key, bundle.certs.k8saggregator.key, bundle.certs.k8sserviceaccount.key, bundle.cluster.secret, bundle.trustdinfo.token, bundle.secrets.secretboxencryptionsecret!];
  const start = (bundleFile: string) => {
    const site = join(dir, `proc-site-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(site, stringify(siteForBundle("v1.13.9", bundle, bundleFile)));
    const config = join(dir, `proc-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(config, stringify(raw({ talos: { siteFile: site } })));
    const r = spawnSync(process.execPath, [new URL("./main.js", import.meta.url).pathname, "--config", config], { encoding: "utf8", env: { ...process.env, ...ENV }, timeout: 30_000 });
    for (const v of [...secrets, TOKEN]) assert.ok(!r.stdout.includes(v) && !r.stderr.includes(v), `a secret in the output: ${r.stderr}`);
    return r;
  };
  const open = start(writeSecretsBundle(join(dir, "proc-0644.yaml"), bundle, 0o644));
  assert.equal(open.status, 2, open.stderr);
  assert.match(open.stderr, /controlPlane\.secretsBundleFile: .*proc-0644\.yaml: has mode 0644/);
  const broken = start(writeSecretsBundle(join(dir, "proc-broken.yaml"), `cluster: {id: ${bundle.cluster.id}, secret: ${bundle.cluster.secret}\ncerts: [${bundle.certs.os.key}`));
  assert.equal(broken.status, 2, broken.stderr);
  assert.match(broken.stderr, /proc-broken\.yaml: is not valid YAML/);
});

test("loadServerConfig reads --config or FLEETD_CONFIG", () => {
  const file = join(dir, "fleetd.yaml");
  writeFileSync(file, stringify(raw()));
  assert.equal(loadServerConfig(undefined, { ...ENV, FLEETD_CONFIG: file }).path, file);
  refused(() => loadServerConfig(undefined, ENV), /no configuration: pass --config FILE or set FLEETD_CONFIG/);
  writeFileSync(join(dir, "broken.yaml"), "server: [\n");
  refused(() => loadServerConfig(join(dir, "broken.yaml"), ENV), /broken\.yaml is not valid YAML/);
});

test("the commented example configuration is valid (with a real Talos site file in place of its path)", () => {
  const example = parseYaml(readFileSync(new URL("../examples/config.yaml", import.meta.url), "utf8")) as Record<string, unknown>;
  const tokenFile = join(dir, "example-token");
  writeFileSync(tokenFile, `${TOKEN}\n`);
  (example["netbox"] as Record<string, unknown>)["tokenFile"] = tokenFile;
  ((example["server"] as Record<string, unknown>)["talos"] as Record<string, unknown>)["siteFile"] = siteFile;
  const c = toServerConfig("examples/config.yaml", example, {});
  assert.equal(c.server.mode, "production");
  assert.ok(c.server.tls);
  assert.deepEqual(c.gates, DEFAULT_MODE_GATES, "the example shows the default gates");
  assert.deepEqual(c.server.ca.signer.pin, { env: "FLEETD_CA_PIN" });
  assert.equal(c.site.netbox.token, TOKEN);
});

test("the commented example Talos site file is valid (with a real bundle's values in place of its placeholders), with and without control planes", () => {
  const text = readFileSync(new URL("../examples/talos-site.yaml", import.meta.url), "utf8");
  assert.ok(!/PRIVATE KEY/.test(text), "no key in the example");
  const example = parseYaml(text) as { cluster: Record<string, unknown>; controlPlane?: Record<string, unknown> };
  const bundle = secretsBundleFixture();
  const fill = siteForBundle("v1.13.9", bundle, writeSecretsBundle(join(dir, "example-secrets.yaml"), bundle));
  for (const k of ["id", "secret", "trustdToken", "osCaCert", "kubernetesCaCert"] as const) example.cluster[k] = fill.cluster[k];
  example.controlPlane!["secretsBundleFile"] = fill.controlPlane!.secretsBundleFile;
  const withCp = join(dir, "example-site.yaml");
  writeFileSync(withCp, stringify(example));
  const c = toServerConfig("f.yaml", raw({ talos: { siteFile: withCp } }), ENV);
  assert.equal(c.talos.controlPlane?.images.apiServer, "registry.k8s.io/kube-apiserver:v1.34.1");
  delete example.controlPlane;
  const workersOnly = join(dir, "example-site-workers.yaml");
  writeFileSync(workersOnly, stringify(example));
  assert.equal(toServerConfig("f.yaml", raw({ talos: { siteFile: workersOnly } }), ENV).talos.controlPlane, undefined);
});

test("ha: optional; with it the state is in Kubernetes (no stateDb), lease timings are ordered, the fields are checked", () => {
  const tls = { caFile: "/etc/fleetd/peer/ca.crt", certFile: "/etc/fleetd/peer/tls.crt", keyFile: "/etc/fleetd/peer/tls.key", clientCertFile: "/etc/fleetd/peer/client.crt", clientKeyFile: "/etc/fleetd/peer/client.key" };
  const ha = { namespace: "fleetd", identity: "tcs-0", internalUrl: "https://10.0.0.7:9443", peerSecretFile: "/run/secrets/peer", internal: { tls } };
  const noDb = (extra: Record<string, unknown>) => {
    const r = raw({ ha: { ...ha, ...extra } });
    delete (r["server"] as Record<string, unknown>)["stateDb"];
    return r;
  };
  const c = toServerConfig("f.yaml", noDb({}), ENV);
  assert.deepEqual(
    { ...c.server.ha },
    {
      ...ha,
      internal: { listen: { host: "0.0.0.0", port: 9443, limits: DEFAULT_LISTENER_LIMITS }, tls },
      kubeconfig: "in-cluster", signerLease: "fleetd-ca-signer", loopsLease: "fleetd-config-server", leaseDurationSeconds: 15, renewDeadlineSeconds: 10, retryPeriodSeconds: 2,
    },
  );
  assert.equal(toServerConfig("f.yaml", raw(), ENV).server.ha, undefined, "without it: single process");
  refused(() => toServerConfig("f.yaml", raw({ ha }), ENV), /server\.stateDb: not with ha/);
  refused(() => toServerConfig("f.yaml", noDb({ leaseDurationSeconds: 10, renewDeadlineSeconds: 10 }), ENV), /server\.ha: need retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds/);
  refused(() => toServerConfig("f.yaml", noDb({ namespace: "Not_A_Namespace" }), ENV), /server\.ha\.namespace/);
  refused(() => toServerConfig("f.yaml", noDb({ internalUrl: "ftp://x" }), ENV), /server\.ha\.internalUrl/);
  refused(() => toServerConfig("f.yaml", noDb({ peerSecret: "inline" }), ENV), /server\.ha/);
  // the internal listener is mutual TLS only: https, its own port, every TLS file named
  refused(() => toServerConfig("f.yaml", noDb({ internalUrl: "http://10.0.0.7:9443" }), ENV), /server\.ha\.internalUrl: must be an https: URL/);
  refused(() => toServerConfig("f.yaml", noDb({ internal: undefined }), ENV), /server\.ha\.internal: /);
  for (const k of Object.keys(tls)) {
    const partial: Record<string, string> = { ...tls };
    delete partial[k];
    refused(() => toServerConfig("f.yaml", noDb({ internal: { tls: partial } }), ENV), new RegExp(`server\\.ha\\.internal\\.tls\\.${k}`));
  }
  refused(() => toServerConfig("f.yaml", noDb({ internal: { listen: { port: 8443 }, tls } }), ENV), /server\.ha\.internal\.listen\.port: must differ from listen\.port \(8443\)/);
  assert.equal(toServerConfig("f.yaml", noDb({ internal: { listen: { host: "10.0.0.7", port: 8443 }, tls } }), { ...ENV, FLEETD_SERVER_HOST: "192.0.2.1" }).server.ha?.internal.listen.port, 8443, "the same port on another address");
  refused(() => toServerConfig("f.yaml", noDb({ peerCaFile: "/etc/fleetd/peer-ca.pem" }), ENV), /server\.ha\.peerCaFile: moved to server\.ha\.internal\.tls\.caFile/);
  refused(() => toServerConfig("f.yaml", noDb({ internal: { tls, extra: 1 } }), ENV), /server\.ha\.internal/);
  const r = raw();
  delete (r["server"] as Record<string, unknown>)["stateDb"];
  refused(() => toServerConfig("f.yaml", r, ENV), /server\.stateDb: required/);
});

test("ha from one shared file: FLEETD_HA_IDENTITY and FLEETD_HA_INTERNAL_URL are each replica's own, checked like the file's; never turn ha on", () => {
  const tls = { caFile: "/etc/fleetd/peer/ca.crt", certFile: "/etc/fleetd/peer/tls.crt", keyFile: "/etc/fleetd/peer/tls.key", clientCertFile: "/etc/fleetd/peer/client.crt", clientKeyFile: "/etc/fleetd/peer/client.key" };
  const r = raw({ ha: { namespace: "fleetd", identity: "from-file", internalUrl: "https://from-file:9443", peerSecretFile: "/run/secrets/peer", internal: { tls } } });
  delete (r["server"] as Record<string, unknown>)["stateDb"];
  const replica = { ...ENV, FLEETD_HA_IDENTITY: "talos-config-server-1", FLEETD_HA_INTERNAL_URL: "https://talos-config-server-1.peers.fleetd.svc:9443" };
  const ha = toServerConfig("f.yaml", r, replica).server.ha;
  assert.equal(ha?.identity, "talos-config-server-1");
  assert.equal(ha?.internalUrl, "https://talos-config-server-1.peers.fleetd.svc:9443");
  assert.equal(toServerConfig("f.yaml", r, { ...ENV, FLEETD_HA_IDENTITY: "" }).server.ha?.identity, "from-file", "an empty variable is not a value");
  refused(() => toServerConfig("f.yaml", r, { ...replica, FLEETD_HA_IDENTITY: "bad name" }), /server\.ha\.identity/);
  refused(() => toServerConfig("f.yaml", r, { ...replica, FLEETD_HA_INTERNAL_URL: "http://x:9443" }), /server\.ha\.internalUrl: must be an https: URL/);
  assert.equal(toServerConfig("f.yaml", raw(), replica).server.ha, undefined, "without server.ha the variables change nothing");
});
