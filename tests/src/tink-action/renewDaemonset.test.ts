/**
 * The node agent's DaemonSet (tink-action/manifests/renew-daemonset.yaml): parsed and checked for what the agent
 * relies on — the Talos paths as hostPaths (the seed read-only everywhere, the devid directory written only by
 * fleetd's containers), /dev/tpmrm0, the event log, every image pinned by digest, privileged only where the TPM is
 * opened (and said why), the restart mechanism wired (shared PID namespace + process:spire-agent), probes on the
 * agent's health port, resources, and a configuration the agent's own loader accepts.
 */
import { strict as assert } from "node:assert";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { parseAllDocuments } from "yaml";
import { loadRenewConfig } from "@fleetd/tink-action/renewConfig";
import { selfSigned } from "@fleetd/tink-action/testing/selfSigned";

const repo = resolve(fileURLToPath(import.meta.url), "../../../..");
const FILE = join(repo, "tink-action/manifests/renew-daemonset.yaml");
const text = readFileSync(FILE, "utf8");

interface Mount { name: string; mountPath: string; readOnly?: boolean }
interface Container {
  name: string;
  image: string;
  args?: string[];
  env?: { name: string; value: string }[];
  envFrom?: { configMapRef: { name: string } }[];
  securityContext?: { privileged?: boolean; allowPrivilegeEscalation?: boolean; readOnlyRootFilesystem?: boolean; capabilities?: { drop?: string[]; add?: string[] } };
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  volumeMounts?: Mount[];
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  livenessProbe?: unknown;
  ports?: { name: string; containerPort: number }[];
}
interface Volume { name: string; hostPath?: { path: string; type?: string }; configMap?: unknown; emptyDir?: unknown }

const docs = parseAllDocuments(text).map((d) => {
  assert.deepEqual(d.errors, [], "the manifest parses");
  return d.toJS() as { kind: string; metadata: { name: string }; data?: Record<string, string>; spec?: { template: { spec: { shareProcessNamespace?: boolean; hostPID?: boolean; automountServiceAccountToken?: boolean; initContainers: Container[]; containers: Container[]; volumes: Volume[] } } } };
});
const ds = docs.find((d) => d.kind === "DaemonSet");
const cm = docs.find((d) => d.kind === "ConfigMap" && d.metadata.name === "fleetd-renew");
const pod = ds?.spec?.template.spec;

test("the manifest: a DaemonSet and the agent's ConfigMap", () => {
  assert.ok(ds && pod, "a DaemonSet");
  assert.ok(cm?.data, "the ConfigMap fleetd-renew");
  assert.deepEqual(pod.initContainers.map((c) => [c.name, c.args]), [["fleetd-seed", ["renew", "--seed-only"]]]);
  assert.deepEqual(pod.containers.map((c) => c.name).sort(), ["fleetd-renew", "spire-agent"]);
  assert.deepEqual(pod.containers.find((c) => c.name === "fleetd-renew")?.args, ["renew"]);
});

const all = () => [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])];
const volume = (name: string) => pod?.volumes.find((v) => v.name === name);
const mountOf = (c: Container, hostPath: string) => c.volumeMounts?.find((m) => volume(m.name)?.hostPath?.path === hostPath);

test("hostPaths: the seed read-only everywhere; the devid directory written only by fleetd's containers, read-only for spire-agent; the TPM and the event log", () => {
  assert.deepEqual(volume("fleetd-seed")?.hostPath, { path: "/var/lib/fleetd/seed", type: "Directory" });
  assert.equal(volume("fleetd-devid")?.hostPath?.path, "/var/lib/fleetd/devid");
  assert.deepEqual(volume("tpmrm0")?.hostPath, { path: "/dev/tpmrm0", type: "CharDevice" });
  assert.equal(volume("securityfs")?.hostPath?.path, "/sys/kernel/security");
  for (const c of all()) {
    const seed = mountOf(c, "/var/lib/fleetd/seed");
    if (seed) assert.equal(seed.readOnly, true, `${c.name}: the seed is read-only`);
    const sec = mountOf(c, "/sys/kernel/security");
    if (sec) assert.equal(sec.readOnly, true, `${c.name}: securityfs read-only`);
  }
  const spire = pod?.containers.find((c) => c.name === "spire-agent") as Container;
  assert.equal(mountOf(spire, "/var/lib/fleetd/devid")?.readOnly, true, "spire-agent only reads the LDevID files");
  assert.equal(mountOf(spire, "/var/lib/fleetd/seed"), undefined, "spire-agent never sees the seed");
  for (const name of ["fleetd-seed", "fleetd-renew"]) {
    const c = all().find((x) => x.name === name) as Container;
    const m = mountOf(c, "/var/lib/fleetd/devid");
    assert.ok(m && !m.readOnly && m.mountPath === "/var/lib/fleetd/devid", `${name} writes the devid directory at its own path`);
    assert.ok(mountOf(c, "/var/lib/fleetd/seed"), `${name} reads the seed`);
  }
  const renew = pod?.containers.find((c) => c.name === "fleetd-renew") as Container;
  assert.ok(mountOf(renew, "/dev/tpmrm0") && mountOf(renew, "/sys/kernel/security"), "the renew agent opens the TPM and reads the event log");
  assert.ok(mountOf(spire, "/dev/tpmrm0"), "spire-agent opens the TPM");
});

test("images pinned by digest (placeholders a site replaces); no tag-only reference", () => {
  for (const c of all()) assert.match(c.image, /@sha256:[A-Z0-9_]+$|@sha256:[0-9a-f]{64}$/, `${c.name}: ${c.image}`);
  assert.ok(all().filter((c) => c.name !== "spire-agent").every((c) => c.image.includes("fleetd-tink-action@")), "fleetd's containers run the action's image");
});

test("privileged only where /dev/tpmrm0 is opened, and the file says why; otherwise no privilege at all", () => {
  for (const c of all()) {
    const sc = c.securityContext ?? {};
    const tpm = mountOf(c, "/dev/tpmrm0") !== undefined;
    assert.equal(sc.privileged === true, tpm, `${c.name}: privileged exactly when it opens the TPM`);
    assert.equal(sc.readOnlyRootFilesystem, true, `${c.name}: read-only root filesystem`);
    assert.deepEqual(sc.capabilities?.add ?? [], [], `${c.name}: no added capabilities`);
    if (!tpm) {
      assert.deepEqual(sc.capabilities?.drop, ["ALL"], `${c.name}: every capability dropped`);
      assert.equal(sc.allowPrivilegeEscalation, false);
    }
  }
  assert.match(text, /device cgroup/, "the manifest says why privileged is needed");
  assert.equal(pod?.hostPID ?? false, false, "no host PID namespace");
  assert.equal(pod?.automountServiceAccountToken, false, "no API token");
});

test("the restart mechanism: one PID namespace for the pod and FLEETD_SPIRE_SIGNAL=process:spire-agent; spire-agent's data_dir is an emptyDir (a new pod attests at start; a container restart keeps the agent SVID and spire-plugin's sync makes it attest again)", () => {
  assert.equal(pod?.shareProcessNamespace, true);
  const spire = pod?.containers.find((c) => c.name === "spire-agent") as Container;
  const conf = readFileSync(join(repo, "spire-plugin/examples/agent.conf"), "utf8");
  const dataDir = /data_dir = "([^"]+)"/.exec(conf)?.[1];
  const m = spire.volumeMounts?.find((x) => x.mountPath === dataDir);
  assert.ok(m, "agent.conf's data_dir is mounted");
  assert.ok(volume(m.name)?.emptyDir && !volume(m.name)?.hostPath, "an emptyDir, not a hostPath: no cached agent SVID survives the pod");
  const renew = pod?.containers.find((c) => c.name === "fleetd-renew") as Container;
  assert.equal(renew.env?.find((e) => e.name === "FLEETD_SPIRE_SIGNAL")?.value, "process:spire-agent");
});

test("probes on the agent's health port; resources for every container", () => {
  const renew = pod?.containers.find((c) => c.name === "fleetd-renew") as Container;
  const port = renew.env?.find((e) => e.name === "FLEETD_HEALTH_PORT")?.value;
  const named = renew.ports?.find((p) => p.name === renew.readinessProbe?.httpGet?.port);
  assert.equal(String(named?.containerPort), port);
  assert.equal(renew.readinessProbe?.httpGet?.path, "/readyz");
  assert.ok(renew.livenessProbe);
  for (const c of all()) {
    assert.ok(c.resources?.requests?.["cpu"] && c.resources.requests["memory"], `${c.name}: requests`);
    assert.ok(c.resources?.limits?.["memory"], `${c.name}: a memory limit`);
  }
});

test("the configuration is one the agent's loader accepts (with a real CA in place of the placeholder), naming the mounted paths", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-renew-ds-"));
  try {
    const caFile = join(dir, "server-ca.pem");
    writeFileSync(caFile, selfSigned("fleetd test CA").cert);
    const renew = pod?.containers.find((c) => c.name === "fleetd-renew") as Container;
    assert.deepEqual(renew.envFrom?.map((e) => e.configMapRef.name), ["fleetd-renew"]);
    const env = Object.fromEntries(Object.entries(cm?.data ?? {}).filter(([k]) => k.startsWith("FLEETD_")));
    for (const e of renew.env ?? []) env[e.name] = e.value;
    const caMount = renew.volumeMounts?.find((m) => m.name === "fleetd-server-ca");
    assert.equal(env["FLEETD_SERVER_CA"], `${caMount?.mountPath}/server-ca.pem`, "the CA path is the mounted ConfigMap key");
    const cfg = loadRenewConfig({ ...env, FLEETD_SERVER_CA: caFile });
    assert.equal(cfg.seedDir, mountOf(renew, "/var/lib/fleetd/seed")?.mountPath);
    assert.equal(cfg.devidDir, mountOf(renew, "/var/lib/fleetd/devid")?.mountPath);
    assert.deepEqual(cfg.tpm, { kind: "device", path: "/dev/tpmrm0" });
    assert.ok(cfg.eventLog.startsWith(`${mountOf(renew, "/sys/kernel/security")?.mountPath}/`));
    assert.deepEqual(cfg.spireSignal, { kind: "process", name: "spire-agent", signal: "SIGTERM" });
    assert.ok(renew.volumeMounts?.some((m) => cfg.statusFile.startsWith(`${m.mountPath}/`) && volume(m.name)?.emptyDir), "the status file is on a writable emptyDir");
    assert.equal(cfg.server.protocol, "https:");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("spire-agent's agent.conf reads the LDevID files where the devid directory is mounted", () => {
  const conf = readFileSync(join(repo, "spire-plugin/examples/agent.conf"), "utf8");
  for (const k of ["devid_cert_path", "devid_priv_path", "devid_pub_path"]) {
    assert.match(conf, new RegExp(`${k} = "/var/lib/fleetd/devid/[a-z.]+"`), k);
  }
  assert.match(conf, /tpm_device_path = "\/dev\/tpmrm0"/);
});
