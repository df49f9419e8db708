/**
 * What every fleetd node's Talos v1alpha1 machine config has, worker or control plane (research/talos.md §4.1):
 * hostname = node name, a static address and default route on the interface chosen by MAC or name, the install
 * disk and installer image, the cluster endpoint and CAs (certificates only), a fresh single-use bootstrap token
 * as cluster.token, and the fleetd seed files under /var/lib/fleetd/seed/ (machine.files, op create).
 * renderWorker.ts serves it as it is; renderControlPlane.ts adds the control plane's keys and components.
 */
import { Document, type Scalar } from "yaml";
import type { z } from "zod";
import { ConfigInputError } from "./errors.js";
import { type Cidr, parseCidr, subnetOf } from "./net.js";
import { NodeInput, TalosSiteConfig } from "./schemas.js";
import { type BootstrapToken, newBootstrapToken } from "./token.js";

export const SEED_DIR = "/var/lib/fleetd/seed";

/** Seed file names; each holds base64 of the bytes (machine.files content is text). */
export const SEED_FILES = {
  ldevidCertChainPem: "ldevid-chain.pem.b64",
  ldevidPublic: "ldevid.pub.b64",
  ldevidPrivate: "ldevid.priv.b64",
  lakPublic: "lak.pub.b64",
  lakPrivate: "lak.priv.b64",
  /**
   * The LAK certificate (PEM). The node agent (`tink-action renew`) presents it with the LDevID at every runtime
   * attestation. Optional in the input while the renderer's callers are updated; the agent refuses a seed without it.
   */
  lakCertPem: "lak-cert.pem.b64",
} as const;

const b64 = (b: Uint8Array | string) => Buffer.from(b).toString("base64");

export interface RenderedConfig {
  /** The machine config YAML, served once to the node. */
  yaml: string;
  /** The per-node bootstrap token in cluster.token (its id names the Kubernetes Secret). */
  bootstrapToken: BootstrapToken;
  /** Where the seeds land on the node. */
  seedPaths: string[];
}

export interface CheckedInputs {
  site: TalosSiteConfig;
  node: z.output<typeof NodeInput>;
  net: Cidr;
  token: BootstrapToken;
}

/** The site configuration and the node input, checked (zod) before anything is rendered. */
export function checkInputs(siteInput: unknown, nodeInput: unknown, token?: BootstrapToken): CheckedInputs {
  const siteParsed = TalosSiteConfig.safeParse(siteInput);
  if (!siteParsed.success) throw ConfigInputError.from("site-config-invalid", siteParsed.error);
  const nodeParsed = NodeInput.safeParse(nodeInput);
  if (!nodeParsed.success) throw ConfigInputError.from("node-input-invalid", nodeParsed.error);
  return { site: siteParsed.data, node: nodeParsed.data, net: parseCidr(nodeParsed.data.address)!, token: token ?? newBootstrapToken() };
}

/** The machine config as a worker gets it; a plain object in Talos's key order. */
export function baseConfig({ site, node, net, token }: CheckedInputs) {
  const files = (Object.keys(SEED_FILES) as (keyof typeof SEED_FILES)[]).flatMap((k) => {
    const value = node.seed[k];
    return value === undefined ? [] : [{ k, value }];
  }).map(({ k, value }) => ({
    content: b64(value),
    permissions: 0o600,
    path: `${SEED_DIR}/${SEED_FILES[k]}`,
    op: "create",
  }));
  return {
    version: "v1alpha1",
    debug: false,
    persist: true,
    machine: {
      type: "worker",
      token: site.cluster.trustdToken,
      ca: { crt: b64(site.cluster.osCaCert), key: "" },
      certSANs: [] as string[],
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
}

/** The YAML Talos reads, with the seed files' permissions in octal as talosctl writes them. */
export function toYaml(config: { machine: { files: unknown[] } }): string {
  const doc = new Document(config);
  config.machine.files.forEach((_, i) => {
    const perm = doc.getIn(["machine", "files", i, "permissions"], true) as Scalar;
    perm.format = "OCT"; // 0o600
  });
  return doc.toString({ lineWidth: 0 });
}
