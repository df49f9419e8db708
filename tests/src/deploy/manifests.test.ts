/**
 * The deployable fleetd (talos-config-server/deploy/overlays/{management,workload}), rendered by the real kustomize
 * with the digests given (made up here; manifests.it.test.ts takes a build's): every image pinned by digest to
 * exactly those; every container with probes, a locked-down securityContext and resources (the exceptions named,
 * each with the file that says why); no Secret value in any object; every file path the site configurations
 * name lies in a volume the container mounts; the overlay's copies of the example configurations equal them; the
 * site configurations load with each service's own loader and the replica's FLEETD_HA_* values.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { parse, stringify } from "yaml";
import { siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { parseNodesFile, parseSiteConfig } from "@fleetd/platform/fleet";
import { toHandlerConfig } from "@fleetd/netbox-script";
import { parseSpirePluginConfig } from "@fleetd/spire-plugin";
import { toServerConfig } from "@fleetd/talos-config-server/config";
import {
  ACTION_PIN_FILES, DEPLOY, FLEETD_IMAGES, imagesComponent, ImagesError, pinnedReference, pinsFromDigests, pinsFromImagesJson, readImagesComponent,
  repoRoot, shippedPins, SITE_IMAGES, withActionPin,
} from "./images.js";
import { madeUpDigests, renderOverlay, type K8sObject, type Overlay } from "./render.js";

interface Probe { httpGet?: { path: string; port: string | number; scheme?: string }; exec?: unknown }
interface SecurityContext {
  runAsNonRoot?: boolean; runAsUser?: number; privileged?: boolean; allowPrivilegeEscalation?: boolean; readOnlyRootFilesystem?: boolean;
  capabilities?: { drop?: string[]; add?: string[] }; seccompProfile?: { type: string };
}
interface Container {
  name: string; image: string; env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: unknown; fieldRef?: unknown } }[];
  ports?: { name: string; containerPort: number }[]; livenessProbe?: Probe; readinessProbe?: Probe; startupProbe?: Probe;
  securityContext?: SecurityContext; resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}
interface Volume { name: string; configMap?: { name: string }; secret?: { secretName: string }; hostPath?: { path: string }; emptyDir?: unknown }
interface PodSpec { securityContext?: SecurityContext; initContainers?: Container[]; containers: Container[]; volumes?: Volume[] }
type Workload = K8sObject & { spec: { replicas?: number; template: { metadata: { labels: Record<string, string> }; spec: PodSpec } } };

const WORKLOAD_KINDS = new Set(["Deployment", "StatefulSet", "DaemonSet"]);
const pins = pinsFromDigests(madeUpDigests(), "registry.test.internal/fleetd");
const rendered = new Map<Overlay, K8sObject[]>();
async function objects(o: Overlay): Promise<K8sObject[]> {
  let r = rendered.get(o);
  if (!r) {
    r = (await renderOverlay(o, pins)).objects;
    rendered.set(o, r);
  }
  return r;
}
const workloads = (objs: K8sObject[]) => objs.filter((o) => WORKLOAD_KINDS.has(o.kind)) as Workload[];
const byName = (objs: K8sObject[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);
const key = (o: K8sObject) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;

/**
 * Containers that may not meet the common securityContext, and where that is said: the node agent's DaemonSet
 * opens /dev/tpmrm0 (privileged: the device cgroup), and its seed copy reads Talos's root-owned seed as root.
 */
const SECURITY_EXCEPTIONS: Record<string, string> = {
  "spire-system/spire-agent-fleetd/spire-agent": "tink-action/manifests/renew-daemonset.yaml (privileged for /dev/tpmrm0)",
  "spire-system/spire-agent-fleetd/fleetd-renew": "tink-action/manifests/renew-daemonset.yaml (privileged for /dev/tpmrm0)",
  "spire-system/spire-agent-fleetd/fleetd-seed": "tink-action/manifests/renew-daemonset.yaml (root, every capability dropped)",
};
/** fleetd's servers without a readiness probe, and where that is said. */
const NO_READINESS: Record<string, string> = {
  "fleetd/spire-server/spire-plugin": "spire-plugin/manifests/spire-server.yaml, spire-plugin/README.md (a refused list must not take spire-server out of its Service)",
};

test("both overlays render; no object twice; the counts", async () => {
  for (const o of ["management", "workload"] as const) {
    const objs = await objects(o);
    const keys = objs.map(key);
    assert.equal(new Set(keys).size, keys.length, `${o}: an object twice`);
    const kinds: Record<string, number> = {};
    for (const x of objs) kinds[x.kind] = (kinds[x.kind] ?? 0) + 1;
    process.stdout.write(`# ${o}: ${objs.length} objects ${JSON.stringify(kinds)}\n`);
  }
  const m = await objects("management");
  assert.equal((byName(m, "StatefulSet", "talos-config-server") as Workload).spec.replicas, 2);
  assert.equal((byName(m, "Deployment", "netbox-script") as Workload).spec.replicas, 2);
  assert.ok(byName(m, "StatefulSet", "spire-server"), "spire-server with the spire-plugin sidecar");
  const w = await objects("workload");
  assert.ok(byName(w, "ValidatingAdmissionPolicy", "fleetd-kubelet-bootstrap-csr-approval"), "the CSR approval policy");
  assert.ok(byName(w, "DaemonSet", "spire-agent-fleetd"), "the node agent");
});

test("the existing RBAC and policy manifests are part of the overlays, object for object", async () => {
  const { parseAllDocuments } = await import("yaml");
  const fileObjects = (f: string) => parseAllDocuments(readFileSync(join(repoRoot, f), "utf8")).map((d) => d.toJS() as K8sObject);
  const m = new Set((await objects("management")).map(key));
  const w = new Set((await objects("workload")).map(key));
  for (const [f, set] of [
    ["netbox-script/manifests/management-rbac.yaml", m], ["spire-plugin/manifests/spire-server.yaml", m], ["netbox-script/deploy/management/retire-progress-rbac.yaml", m],
    ["talos-config-server/manifests/csr-gate.yaml", w], ["netbox-script/deploy/workload/retire-rbac.yaml", w], ["tink-action/manifests/renew-daemonset.yaml", w],
  ] as const) {
    for (const o of fileObjects(f)) assert.ok(set.has(key(o)), `${f}: ${key(o)} rendered`);
  }
});

test("every image pinned by digest: fleetd's to exactly the digests given, the site's SPIRE pins as shipped", async () => {
  const site = shippedPins().filter((p) => (SITE_IMAGES as readonly string[]).includes(p.name));
  const allowed = new Set([...pins, ...site].map(pinnedReference));
  const seen = new Set<string>();
  for (const o of ["management", "workload"] as const) {
    for (const w of workloads(await objects(o))) {
      for (const c of [...(w.spec.template.spec.initContainers ?? []), ...w.spec.template.spec.containers]) {
        assert.match(c.image, /@sha256:[0-9a-f]{64}$/, `${w.metadata.name}/${c.name}`);
        assert.ok(allowed.has(c.image), `${w.metadata.name}/${c.name}: ${c.image} is one of the pins`);
        seen.add(c.image);
      }
    }
  }
  for (const p of pins) assert.ok(seen.has(pinnedReference(p)), `${p.name} is used`);
});

test("every container: resources; the common securityContext (non-root, read-only root, no escalation, ALL dropped, seccomp RuntimeDefault) unless named", async () => {
  const used = new Set<string>();
  for (const o of ["management", "workload"] as const) {
    for (const w of workloads(await objects(o))) {
      const pod = w.spec.template.spec;
      for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
        const id = `${w.metadata.namespace}/${w.metadata.name}/${c.name}`;
        assert.ok(c.resources?.requests?.["cpu"] && c.resources.requests["memory"], `${id}: cpu and memory requests`);
        assert.ok(c.resources?.limits?.["memory"], `${id}: a memory limit`);
        const sc = c.securityContext ?? {};
        assert.equal(sc.readOnlyRootFilesystem, true, `${id}: read-only root filesystem`);
        assert.deepEqual(sc.capabilities?.add ?? [], [], `${id}: no added capability`);
        if (SECURITY_EXCEPTIONS[id]) {
          used.add(id);
          continue;
        }
        assert.equal(sc.privileged ?? false, false, `${id}: not privileged`);
        assert.equal(sc.allowPrivilegeEscalation, false, `${id}: no privilege escalation`);
        assert.deepEqual(sc.capabilities?.drop, ["ALL"], `${id}: every capability dropped`);
        assert.equal(sc.runAsNonRoot ?? pod.securityContext?.runAsNonRoot, true, `${id}: runAsNonRoot`);
        const uid = sc.runAsUser ?? pod.securityContext?.runAsUser;
        assert.ok(uid !== undefined && uid !== 0, `${id}: a non-root uid`);
        assert.equal((sc.seccompProfile ?? pod.securityContext?.seccompProfile)?.type, "RuntimeDefault", `${id}: seccomp RuntimeDefault`);
      }
    }
  }
  assert.deepEqual([...used].sort(), Object.keys(SECURITY_EXCEPTIONS).sort(), "every exception is still needed");
});

test("probes: fleetd's servers on /healthz (liveness) and /readyz (readiness) at a port they declare, unless named; third-party containers a liveness probe", async () => {
  for (const o of ["management", "workload"] as const) {
    for (const w of workloads(await objects(o))) {
      for (const c of w.spec.template.spec.containers) {
        const id = `${w.metadata.namespace}/${w.metadata.name}/${c.name}`;
        assert.ok(c.livenessProbe, `${id}: a liveness probe`);
        if (!/\/fleetd-[a-z-]+@/.test(c.image)) continue; // SPIRE's own: exec healthchecks
        const port = (p?: Probe) => c.ports?.find((x) => x.name === p?.httpGet?.port || x.containerPort === p?.httpGet?.port);
        assert.equal(c.livenessProbe.httpGet?.path, "/healthz", `${id}: liveness on /healthz`);
        assert.ok(port(c.livenessProbe), `${id}: the liveness port is declared`);
        if (NO_READINESS[id]) {
          assert.equal(c.readinessProbe, undefined, `${id}: no readiness probe (${NO_READINESS[id]})`);
          continue;
        }
        assert.equal(c.readinessProbe?.httpGet?.path, "/readyz", `${id}: readiness on /readyz`);
        assert.ok(port(c.readinessProbe), `${id}: the readiness port is declared`);
      }
    }
  }
});

test("each server has a metrics Service that selects its pods and targets a port they declare", async () => {
  const m = await objects("management");
  const services = m.filter((o) => o.kind === "Service" && o.metadata.labels?.["fleetd.io/metrics"] === "true") as (K8sObject & { spec: { selector: Record<string, string>; ports: { targetPort: string }[] } })[];
  const covered = new Set<string>();
  for (const s of services) {
    const pods = workloads(m).filter((w) => Object.entries(s.spec.selector).every(([k, v]) => w.spec.template.metadata.labels[k] === v));
    assert.equal(pods.length, 1, `${s.metadata.name} selects one workload`);
    const w = pods[0] as Workload;
    const c = w.spec.template.spec.containers.find((x) => x.ports?.some((p) => p.name === s.spec.ports[0]?.targetPort));
    assert.ok(c, `${s.metadata.name}: port ${s.spec.ports[0]?.targetPort} is declared`);
    covered.add(`${w.metadata.name}/${c.name}`);
  }
  assert.deepEqual([...covered].sort(), ["netbox-script/netbox-script", "spire-server/spire-plugin", "talos-config-server/talos-config-server"]);
});

test("no Secret value anywhere: Secrets only as service-account tokens the API fills; secret-looking variables come from Secrets; no key or token in a ConfigMap", async () => {
  for (const o of ["management", "workload"] as const) {
    const objs = await objects(o);
    for (const s of objs.filter((x) => x.kind === "Secret")) {
      assert.equal(s["type"], "kubernetes.io/service-account-token", `${key(s)}: only token Secrets are rendered`);
      assert.equal(s["data"], undefined, `${key(s)}: no data`);
      assert.equal(s["stringData"], undefined, `${key(s)}: no stringData`);
    }
    for (const w of workloads(objs)) {
      for (const c of [...(w.spec.template.spec.initContainers ?? []), ...w.spec.template.spec.containers]) {
        for (const e of c.env ?? []) {
          if (/TOKEN|SECRET|PIN|PASSWORD|KEY/.test(e.name)) assert.ok(e.valueFrom?.secretKeyRef && e.value === undefined, `${w.metadata.name}/${c.name}: ${e.name} comes from a Secret`);
        }
      }
    }
    for (const cm of objs.filter((x) => x.kind === "ConfigMap")) {
      for (const [k, v] of Object.entries((cm["data"] ?? {}) as Record<string, string>)) {
        assert.doesNotMatch(v, /PRIVATE KEY|nbt_[A-Za-z0-9]{8}/, `${key(cm)} ${k}: no key or NetBox token`);
        if (k === "fleetd.yaml") {
          const site = parse(v) as { netbox: Record<string, unknown>; webhook?: Record<string, unknown> };
          assert.equal(site.netbox["token"], undefined, `${key(cm)}: the NetBox token by file only`);
          assert.equal(site.webhook?.["secret"], undefined, `${key(cm)}: the webhook secret from the environment only`);
        }
      }
    }
  }
});

/** The Secrets and ConfigMaps the pods mount or read that the overlays do not make: the site's (README "Deploying"). */
test("what the site creates: every Secret and ConfigMap a pod needs is rendered or listed here, and the README's Deploying section names each", async () => {
  const site: Record<Overlay, string[]> = {
    management: [
      "ConfigMap/fleetd-ca-bundle", "ConfigMap/fleetd-ek-roots", "ConfigMap/fleetd-site-authorities",
      "Secret/fleetd-ca-pin", "Secret/fleetd-netbox-script-netbox", "Secret/fleetd-netbox-script-workload", "Secret/fleetd-talos-config-server-netbox",
      "Secret/fleetd-talos-config-server-peer", "Secret/fleetd-talos-config-server-tls", "Secret/fleetd-talos-config-server-workload", "Secret/fleetd-talos-site",
      "Secret/fleetd-webhook", "Secret/spire-fleetd-cas",
    ],
    workload: ["ConfigMap/spire-bundle"],
  };
  const readme = readFileSync(join(repoRoot, "talos-config-server/README.md"), "utf8");
  const deploying = readme.slice(readme.indexOf("## Deploying"));
  assert.ok(readme.includes("## Deploying"), "talos-config-server/README.md has a Deploying section");
  for (const o of ["management", "workload"] as const) {
    const objs = await objects(o);
    const made = new Set(objs.filter((x) => x.kind === "ConfigMap" || x.kind === "Secret").map((x) => `${x.kind}/${x.metadata.name}`));
    const needed = new Set<string>();
    for (const w of workloads(objs)) {
      const pod = w.spec.template.spec;
      for (const v of pod.volumes ?? []) {
        if (v.configMap) needed.add(`ConfigMap/${v.configMap.name}`);
        if (v.secret) needed.add(`Secret/${v.secret.secretName}`);
      }
      for (const c of [...(pod.initContainers ?? []), ...pod.containers]) {
        for (const e of c.env ?? []) {
          const ref = (e.valueFrom?.secretKeyRef as { name?: string } | undefined)?.name;
          if (ref) needed.add(`Secret/${ref}`);
        }
      }
    }
    const missing = [...needed].filter((n) => !made.has(n)).sort();
    assert.deepEqual(missing, [...site[o]].sort(), `${o}: the site's objects`);
    for (const n of missing) assert.ok(deploying.includes(n.split("/")[1] as string), `README "Deploying" names ${n}`);
  }
});

/** A container's mount that holds `path`. */
const mountOf = (c: Container, path: string) => c.volumeMounts?.find((m) => path === m.mountPath || path.startsWith(`${m.mountPath}/`));

test("the site configurations load with each service's own loader, every path they name is mounted, and each replica's HA values come from its pod", async () => {
  const m = await objects("management");
  const cm = (prefix: string) => m.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith(prefix)) as K8sObject & { data: Record<string, string> };
  const container = (kind: string, name: string, c: string) => (byName(m, kind, name) as Workload).spec.template.spec.containers.find((x) => x.name === c) as Container;
  const envOf = (c: Container, name: string) => c.env?.find((e) => e.name === name);
  const dir = mkdtempSync(join(tmpdir(), "fleetd-deploy-cfg-"));
  try {
    const token = join(dir, "token");
    writeFileSync(token, "nbt_0123456789ab.0123456789012345678901234567890123456789\n");
    const withToken = (raw: { netbox: Record<string, unknown> }) => ({ ...raw, netbox: { ...raw.netbox, tokenFile: token } });

    // talos-config-server: two replicas, their identity and internal URL from the pod
    const tcs = container("StatefulSet", "talos-config-server", "talos-config-server");
    const tcsRaw = parse(cm("talos-config-server-config").data["fleetd.yaml"] as string) as { netbox: Record<string, unknown> };
    assert.equal(envOf(tcs, "FLEETD_HA_IDENTITY")?.value, "$(POD_NAME)");
    assert.match(envOf(tcs, "FLEETD_HA_INTERNAL_URL")?.value ?? "", /^https:\/\/\$\(POD_NAME\)\.talos-config-server-peers\.\$\(POD_NAMESPACE\)\.svc:9443$/);
    const env = { FLEETD_HA_IDENTITY: "talos-config-server-1", FLEETD_HA_INTERNAL_URL: "https://talos-config-server-1.talos-config-server-peers.fleetd.svc:9443" };
    // the files the loader reads: the token (above) and the Talos site file (a valid one of the testkit's)
    const talosSite = join(dir, "talos-site.yaml");
    writeFileSync(talosSite, stringify(siteConfigFixture("v1.11.0")));
    const tcsFiles = withToken(tcsRaw) as unknown as { server: { talos: Record<string, unknown> } };
    const siteFile = String(tcsFiles.server.talos["siteFile"]);
    const tc = toServerConfig("fleetd.yaml", { ...tcsFiles, server: { ...tcsFiles.server, talos: { ...tcsFiles.server.talos, siteFile: talosSite } } }, env);
    assert.equal(tc.server.ha?.identity, "talos-config-server-1");
    assert.equal(tc.server.ha?.internalUrl, env.FLEETD_HA_INTERNAL_URL);
    assert.equal(tc.server.csrGate.run, false, "the CSR gate on the loops leader only");
    const s = tc.server;
    const paths = [
      String(tcsRaw.netbox["tokenFile"]), s.tls?.certFile, s.tls?.keyFile, s.ha?.peerSecretFile, ...Object.values(s.ha?.internal.tls ?? {}), s.ekRootsDir, s.siteAuthoritiesDir,
      "file" in s.ca.signer.pin ? s.ca.signer.pin.file : undefined, s.ca.bundleStateFile, siteFile, tc.site.kubernetes?.workload.kubeconfig,
      tc.site.kubernetes?.management.tinkerbell?.server.caFile, envOf(tcs, "FLEETD_CONFIG")?.value,
    ];
    for (const p of paths) {
      assert.ok(p, "a path");
      assert.ok(mountOf(tcs, p), `talos-config-server: ${p} is in a mounted volume`);
    }
    assert.ok(!mountOf(tcs, s.ca.bundleStateFile)?.readOnly, "the bundle state file is writable");
    const pcscd = tcs.volumeMounts?.find((v) => v.mountPath === "/run/pcscd");
    assert.ok(pcscd?.readOnly, "the YubiKey through the host's pcscd socket, read-only");
    assert.ok(s.ca.signer.module.startsWith("/usr/lib/"), "the PKCS#11 module in the image");

    // netbox-script: two replicas, the identity from the pod, the webhook secret from a Secret
    const nbs = container("Deployment", "netbox-script", "netbox-script");
    const nbsCm = cm("netbox-script-config");
    const nbsRaw = parse(nbsCm.data["fleetd.yaml"] as string) as { netbox: Record<string, unknown> };
    assert.equal(envOf(nbs, "FLEETD_HA_IDENTITY")?.value, "$(POD_NAME)");
    assert.ok(envOf(nbs, "FLEETD_WEBHOOK_SECRET")?.valueFrom?.secretKeyRef);
    const nenv = { FLEETD_HA_IDENTITY: "netbox-script-7d9f-x2", FLEETD_WEBHOOK_SECRET: "w".repeat(40) };
    const h = toHandlerConfig(parseSiteConfig(withToken(nbsRaw), nenv), nenv);
    assert.equal(h.handler.ha?.identity, "netbox-script-7d9f-x2");
    assert.equal(h.site.webhook.secret, nenv.FLEETD_WEBHOOK_SECRET);
    for (const p of [String(nbsRaw.netbox["tokenFile"]), h.handler.nodesFile, h.handler.spireNodes?.caBundle, h.site.kubernetes?.workload.kubeconfig, h.handler.stateDir, h.site.kubernetes?.management.tinkerbell?.server.caFile, envOf(nbs, "FLEETD_CONFIG")?.value]) {
      assert.ok(p, "a path");
      assert.ok(mountOf(nbs, p), `netbox-script: ${p} is in a mounted volume`);
    }
    assert.notEqual(mountOf(nbs, h.handler.stateDir)?.mountPath, h.handler.stateDir, "stateDir below the volume (created 0700 by the handler)");
    assert.equal(h.handler.listen.host, "0.0.0.0");
    parseNodesFile(nbsCm.data["nodes.yaml"] as string);

    // the Templates' action image: the same pin in both configurations, and the one the images component carries
    const action = tc.site.kubernetes?.management.tinkerbell?.images.action;
    assert.equal(h.site.kubernetes?.management.tinkerbell?.images.action, action);
    const shippedAction = shippedPins().find((p) => p.name === "fleetd-tink-action");
    assert.equal(action, shippedAction && pinnedReference(shippedAction), "the action pin is the images component's");

    // spire-plugin: the sidecar's configuration from the ConfigMap it mounts
    const sp = container("StatefulSet", "spire-server", "spire-plugin");
    const spCfg = parseSpirePluginConfig(parse(cm("spire-plugin-conf").data["spire-plugin.yaml"] as string));
    for (const p of [spCfg.devidCaPath, spCfg.socketPath, envOf(sp, "FLEETD_SPIRE_PLUGIN_CONFIG")?.value]) {
      assert.ok(p && mountOf(sp, p), `spire-plugin: ${p} is in a mounted volume`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the overlays' copies of the example configurations equal them (Kustomize reads files only below the kustomization)", () => {
  for (const [copy, original] of [
    ["overlays/management/config/server.conf", "spire-plugin/examples/server.conf"],
    ["overlays/management/config/spire-plugin.yaml", "spire-plugin/examples/spire-plugin.yaml"],
    ["overlays/workload/config/agent.conf", "spire-plugin/examples/agent.conf"],
    ["overlays/management/config/nodes.yaml", "tests/examples/nodes.yaml"],
  ] as const) {
    assert.equal(readFileSync(join(DEPLOY, copy), "utf8"), readFileSync(join(repoRoot, original), "utf8"), `${copy} = ${original}`);
  }
});

test("the images component: shipped with every image; regenerated from an images JSON (three shapes), the SPIRE pins kept; the action pin rewritten in place", () => {
  const shipped = shippedPins();
  assert.deepEqual(shipped.map((p) => p.name), [...FLEETD_IMAGES, ...SITE_IMAGES]);
  const d = madeUpDigests();
  const asList = FLEETD_IMAGES.map((n) => ({ name: n, tag: "0.1.0-abc", digest: d[n] }));
  for (const json of [
    { images: asList },
    asList.map((e) => ({ ...e, name: e.name.replace(/^fleetd-/, "") })),
    Object.fromEntries(asList.map((e) => [e.name, { tag: e.tag, digest: e.digest, reference: `127.0.0.1:5000/fleetd/${e.name}:${e.tag}` }])),
  ]) {
    const got = pinsFromImagesJson(JSON.stringify(json), "127.0.0.1:5000/fleetd");
    assert.deepEqual(got.map((p) => [p.name, p.newName, p.digest]), FLEETD_IMAGES.map((n) => [n, `127.0.0.1:5000/fleetd/${n}`, d[n]]));
    const text = imagesComponent(got, shipped, "test");
    assert.deepEqual(readImagesComponent(text).slice(4), shipped.slice(4), "the site's pins kept");
    assert.deepEqual(readImagesComponent(text).slice(0, 4).map((p) => p.digest), FLEETD_IMAGES.map((n) => d[n]));
  }
  assert.throws(() => pinsFromImagesJson(JSON.stringify({ images: asList.slice(1) })), (e: unknown) => e instanceof ImagesError && /no digest for fleetd-talos-config-server/.test(e.message));
  assert.throws(() => pinsFromImagesJson(JSON.stringify({ images: [{ ...asList[0], digest: "sha256:abc" }] })), /digest/);
  assert.throws(() => pinsFromDigests({ ...d, "fleetd-netbox-script": "latest" }), /fleetd-netbox-script/);
  for (const f of ACTION_PIN_FILES) {
    const text = readFileSync(f, "utf8");
    const ref = `127.0.0.1:5000/fleetd/fleetd-tink-action@${d["fleetd-tink-action"]}`;
    const out = withActionPin(text, ref);
    assert.equal(out.split("\n").length, text.split("\n").length, "one line changed, nothing else");
    assert.equal((parse(out) as { kubernetes: { management: { tinkerbell: { images: { action: string } } } } }).kubernetes.management.tinkerbell.images.action, ref);
    assert.equal(withActionPin(out, pinnedReference(shipped[3] as (typeof shipped)[number])), text, "back to the shipped pin");
  }
});
