/**
 * Renders a Talos v1alpha1 machine config for a worker (research/talos.md §4.1): hostname = node name,
 * a static address and default route on the interface chosen by MAC or name, the install disk and
 * installer image, the cluster endpoint and CAs (certificates only), a fresh single-use bootstrap token
 * as cluster.token, and the fleetd seed files under /var/lib/fleetd/seed/ (machine.files, op create).
 *
 * Every input comes from the site configuration or the node input, both checked with zod first.
 * The caller creates kube-system/bootstrap-token-<id> for the returned token before serving the config.
 */
import { Document, type Scalar } from "yaml";
import { ConfigInputError } from "./errors.js";
import { parseCidr, subnetOf } from "./net.js";
import { TalosSiteConfig, WorkerNodeInput } from "./schemas.js";
import { type BootstrapToken, newBootstrapToken } from "./token.js";

export const SEED_DIR = "/var/lib/fleetd/seed";

/** Seed file names; each holds base64 of the bytes (machine.files content is text). */
export const SEED_FILES = {
  ldevidCertChainPem: "ldevid-chain.pem.b64",
  ldevidPublic: "ldevid.pub.b64",
  ldevidPrivate: "ldevid.priv.b64",
  lakPublic: "lak.pub.b64",
  lakPrivate: "lak.priv.b64",
} as const;

const b64 = (b: Uint8Array | string) => Buffer.from(b).toString("base64");

export interface RenderedWorkerConfig {
  /** The machine config YAML, served once to the node. */
  yaml: string;
  /** The per-node bootstrap token in cluster.token (its id names the Kubernetes Secret). */
  bootstrapToken: BootstrapToken;
  /** Where the seeds land on the node. */
  seedPaths: string[];
}

export function renderWorkerConfig(siteInput: unknown, nodeInput: unknown, opts: { token?: BootstrapToken } = {}): RenderedWorkerConfig {
  const siteParsed = TalosSiteConfig.safeParse(siteInput);
  if (!siteParsed.success) throw ConfigInputError.from("site-config-invalid", siteParsed.error);
  const nodeParsed = WorkerNodeInput.safeParse(nodeInput);
  if (!nodeParsed.success) throw ConfigInputError.from("node-input-invalid", nodeParsed.error);
  const site = siteParsed.data;
  const node = nodeParsed.data;
  const token = opts.token ?? newBootstrapToken();
  const net = parseCidr(node.address)!;

  const files = (Object.keys(SEED_FILES) as (keyof typeof SEED_FILES)[]).map((k) => ({
    content: b64(node.seed[k]),
    permissions: 0o600,
    path: `${SEED_DIR}/${SEED_FILES[k]}`,
    op: "create",
  }));

  const config = {
    version: "v1alpha1",
    debug: false,
    persist: true,
    machine: {
      type: "worker",
      token: site.cluster.trustdToken,
      ca: { crt: b64(site.cluster.osCaCert), key: "" },
      certSANs: [],
      kubelet: {
        image: site.talos.kubeletImage,
        defaultRuntimeSeccompProfileEnabled: true,
        disableManifestsDirectory: true,
        nodeIP: { validSubnets: [subnetOf(net)] },
      },
      network: {
        hostname: node.name,
        nameservers: site.network.nameservers,
        interfaces: [
          {
            ...("mac" in node.link ? { deviceSelector: { hardwareAddr: node.link.mac } } : { interface: node.link.name }),
            addresses: [node.address],
            routes: [{ network: net.family === 4 ? "0.0.0.0/0" : "::/0", gateway: node.gateway }],
            dhcp: false,
          },
        ],
      },
      install: {
        disk: node.installDisk,
        image: site.talos.installerImage,
        wipe: false,
      },
      files,
    },
    cluster: {
      id: site.cluster.id,
      secret: site.cluster.secret,
      controlPlane: { endpoint: site.cluster.endpoint },
      clusterName: site.cluster.name,
      network: {
        dnsDomain: site.cluster.dnsDomain,
        podSubnets: site.cluster.podSubnets,
        serviceSubnets: site.cluster.serviceSubnets,
      },
      token: token.token,
      ca: { crt: b64(site.cluster.kubernetesCaCert), key: "" },
    },
  };

  const doc = new Document(config);
  files.forEach((_, i) => {
    const perm = doc.getIn(["machine", "files", i, "permissions"], true) as Scalar;
    perm.format = "OCT"; // 0o600, as talosctl writes it
  });
  return {
    yaml: doc.toString({ lineWidth: 0 }),
    bootstrapToken: token,
    seedPaths: files.map((f) => f.path),
  };
}
