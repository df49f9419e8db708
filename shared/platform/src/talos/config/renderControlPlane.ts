/**
 * Renders a Talos v1alpha1 machine config for a control-plane node: the common node config (machineConfig.ts)
 * as `machine.type: controlplane`, with the cluster's secrets from the site's Talos secrets bundle
 * (secretsBundle.ts) — the Talos API CA and Kubernetes CA with their keys, the aggregator (front-proxy) and etcd
 * CAs, the service-account key, the secretbox (or aescbc) encryption secret — and the control-plane components
 * as `talosctl gen config` writes them for this Talos version (talos:`pkg/machinery/config/generate/init.go`):
 * apiServer with the PodSecurity admission defaults, controllerManager, scheduler, proxy, etcd.
 *
 * Per node, as for workers: hostname, static address, install disk, the seeds, and a fresh bootstrap token as
 * cluster.token (the bundle's own `secrets.bootstraptoken` is not served). The node's address, the site's VIP
 * and extra names go into machine.certSANs and apiServer.certSANs; etcd advertises the node's subnet.
 *
 * The bundle is read when the config is rendered (a rotated file is picked up; nothing of it is kept) and must
 * belong to the site's cluster (siteSecretsBundle), or the render is refused naming the fields, never values.
 */
import { inSubnet, ipFamily, sameAddress, subnetOf } from "./net.js";
import { ConfigInputError } from "./errors.js";
import { baseConfig, checkInputs, type RenderedConfig, toYaml } from "./machineConfig.js";
import { siteSecretsBundle } from "./secretsBundle.js";
import type { BootstrapToken } from "./token.js";

/** Talos's generator labels control planes so external load balancers leave them out. */
const EXCLUDE_FROM_EXTERNAL_LB = "node.kubernetes.io/exclude-from-external-load-balancers";

/** Pod Security admission as `talosctl gen config` sets it (PodSecurityAdmissionEnabled, Talos ≥ 1.1). */
const POD_SECURITY_ADMISSION = [
  {
    name: "PodSecurity",
    configuration: {
      apiVersion: "pod-security.admission.config.k8s.io/v1alpha1",
      kind: "PodSecurityConfiguration",
      defaults: { enforce: "baseline", "enforce-version": "latest", audit: "restricted", "audit-version": "latest", warn: "restricted", "warn-version": "latest" },
      exemptions: { usernames: [], runtimeClasses: [], namespaces: ["kube-system"] },
    },
  },
];

const unique = (xs: string[]) => xs.filter((x, i) => xs.findIndex((y) => y === x || sameAddress(x, y)) === i);

export function renderControlPlaneConfig(
  siteInput: unknown,
  nodeInput: unknown,
  opts: { token?: BootstrapToken } = {},
): RenderedConfig {
  const inputs = checkInputs(siteInput, nodeInput, opts.token);
  const { site, net } = inputs;
  const cp = site.controlPlane;
  if (!cp) {
    throw new ConfigInputError("site-config-invalid", [
      { path: "controlPlane", message: "required to render a control-plane node: secretsBundleFile (the Talos secrets bundle) and images" },
    ]);
  }
  if (cp.vip !== undefined && (ipFamily(cp.vip) !== net.family || !inSubnet(net, cp.vip) || sameAddress(cp.vip, net.address))) {
    throw new ConfigInputError("site-config-invalid", [
      { path: "controlPlane.vip", message: `${cp.vip} is not another address in the node's subnet (${inputs.node.address}): Talos holds the VIP on that interface` },
    ]);
  }
  const bundle = siteSecretsBundle(site); // always the site's file, checked against the site: no other way in

  const base = baseConfig(inputs);
  const sans = unique([net.address, ...(cp.vip ? [cp.vip] : []), ...cp.certSANs]);
  const [iface] = base.machine.network.interfaces;
  const encryption = bundle.secrets.secretboxencryptionsecret !== undefined
    ? { secretboxEncryptionSecret: bundle.secrets.secretboxencryptionsecret }
    : { aescbcEncryptionSecret: bundle.secrets.aescbcencryptionsecret };
  const { ca: _workerCa, ...cluster } = base.cluster; // re-keyed below, in Talos's order
  const config = {
    ...base,
    machine: {
      ...base.machine,
      type: "controlplane",
      ca: { crt: bundle.certs.os.crt, key: bundle.certs.os.key },
      certSANs: sans,
      network: { ...base.machine.network, interfaces: [{ ...iface!, ...(cp.vip ? { vip: { ip: cp.vip } } : {}) }] },
      nodeLabels: { [EXCLUDE_FROM_EXTERNAL_LB]: "" },
    },
    cluster: {
      ...cluster,
      ...encryption,
      ca: { crt: bundle.certs.k8s.crt, key: bundle.certs.k8s.key },
      aggregatorCA: { crt: bundle.certs.k8saggregator.crt, key: bundle.certs.k8saggregator.key },
      serviceAccount: { key: bundle.certs.k8sserviceaccount.key },
      apiServer: {
        image: cp.images.apiServer,
        certSANs: unique([new URL(site.cluster.endpoint).hostname.replace(/^\[|\]$/g, ""), ...sans]),
        admissionControl: POD_SECURITY_ADMISSION,
      },
      controllerManager: { image: cp.images.controllerManager },
      proxy: { image: cp.images.proxy },
      scheduler: { image: cp.images.scheduler },
      etcd: { ca: { crt: bundle.certs.etcd.crt, key: bundle.certs.etcd.key }, advertisedSubnets: [subnetOf(net)] },
      ...(cp.allowSchedulingOnControlPlanes ? { allowSchedulingOnControlPlanes: true } : {}),
    },
  };
  return { yaml: toYaml(config), bootstrapToken: inputs.token, seedPaths: config.machine.files.map((f) => f.path) };
}
