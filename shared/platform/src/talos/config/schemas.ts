/**
 * Inputs of the Talos config renderers (workers and control planes), checked with zod at the trust boundary:
 * the site configuration (a file the operator writes) and the per-node input (from NetBox and the attestation
 * step). Nothing about the Talos version, images, endpoint or CAs is a constant in code. The control planes'
 * CA keys are not in the site configuration: `controlPlane.secretsBundleFile` names the file that holds them
 * (secretsBundle.ts).
 */
import { z } from "zod";
import { ParseError } from "@fleetd/verify/codec";
import { type Certificate, CertificateError, parseCertificate, pemBlocksOnly } from "@fleetd/verify/x509";
import { inSubnet, ipFamily, isUsableHost, parseCidr, sameAddress } from "./net.js";

/** Kubernetes bootstrap token / Talos trustd token: [a-z0-9]{6}.[a-z0-9]{16}. */
export const TOKEN_PATTERN = /^[a-z0-9]{6}\.[a-z0-9]{16}$/;

/** secrets.yaml cluster.id / cluster.secret: base64 (std or URL alphabet) of random bytes. */
export const CLUSTER_SECRET_PATTERN = /^[A-Za-z0-9+/=_-]{16,128}$/;

const DNS_NAME = /^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const ip = z.string().refine((s) => ipFamily(s) !== undefined, "not an IPv4 or IPv6 address");
const cidr = z.string().refine((s) => parseCidr(s) !== undefined, "not an address with a prefix length (CIDR), e.g. 10.0.0.21/24");

/** An OCI image reference with a tag (registry/path:tag), no digest-only refs so the version is visible. */
const imageRef = z
  .string()
  .regex(/^[a-z0-9.-]+(:[0-9]+)?(\/[a-z0-9._-]+)+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/, "not an image reference registry/path:tag");

/** The certificates of a PEM text that holds certificates and nothing else (no keys), or undefined. */
export function pemCertificates(pem: string): Certificate[] | undefined {
  try {
    const blocks = pemBlocksOnly(pem);
    if (blocks.length === 0 || blocks.some((b) => b.label !== "CERTIFICATE")) return undefined; // nothing else (no keys!) in the file
    return blocks.map((b) => parseCertificate(b.der));
  } catch (e) {
    if (e instanceof CertificateError || e instanceof ParseError) return undefined;
    throw e;
  }
}

/** BasicConstraints cA (what node's X509Certificate.ca reports). */
export const isCaCertificate = (c: Certificate): boolean => c.ext.basicConstraints?.cA === true;

/** One PEM CA certificate, and nothing else (a private key in a worker config is refused by Talos, too). */
const caCertPem = z.string().refine((s) => {
  const certs = pemCertificates(s);
  return certs !== undefined && certs.length === 1 && isCaCertificate(certs[0]!);
}, "not exactly one PEM CA certificate");

/** A chain of PEM certificates, leaf first. */
const certChainPem = z.string().refine((s) => (pemCertificates(s)?.length ?? 0) >= 1, "not a chain of PEM certificates");

export const TalosSiteConfig = z
  .object({
    talos: z
      .object({
        /** The Talos version every node installs, e.g. v1.13.9. */
        version: z.string().regex(/^v\d+\.\d+\.\d+$/, "a Talos version like v1.13.9"),
        /** Installer image, e.g. factory.talos.dev/metal-installer/<schematic>:v1.13.9 (tag = version). */
        installerImage: imageRef,
        /** Kubelet image, e.g. ghcr.io/siderolabs/kubelet:v1.34.1. */
        kubeletImage: imageRef,
      })
      .strict()
      .refine((t) => t.installerImage.endsWith(`:${t.version}`), {
        message: "the installer image's tag must be the Talos version",
        path: ["installerImage"],
      }),
    cluster: z
      .object({
        name: z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, "a DNS label"),
        /** https://host:port of the control plane (sideronet.ValidateEndpointURI wants https). */
        endpoint: z
          .string()
          .refine((s) => URL.canParse(s) && new URL(s).protocol === "https:" && new URL(s).hostname !== "", "an https:// URL"),
        /** secrets.yaml cluster.id / cluster.secret (discovery). */
        id: z.string().regex(CLUSTER_SECRET_PATTERN),
        secret: z.string().regex(CLUSTER_SECRET_PATTERN),
        /** secrets.yaml trustdinfo.token: cluster-wide, equal to the control planes' machine.token. */
        trustdToken: z.string().regex(TOKEN_PATTERN, "[a-z0-9]{6}.[a-z0-9]{16}"),
        /** Talos API (OS) CA certificate, PEM; never the key. */
        osCaCert: caCertPem,
        /** Kubernetes CA certificate, PEM; never the key. */
        kubernetesCaCert: caCertPem,
        dnsDomain: z.string().regex(DNS_NAME),
        podSubnets: z.array(cidr).min(1),
        serviceSubnets: z.array(cidr).min(1),
      })
      .strict(),
    network: z
      .object({
        nameservers: z.array(ip).min(1).max(3),
      })
      .strict(),
    /** Needed only to render control-plane nodes; a site of workers leaves it out. */
    controlPlane: z
      .object({
        /**
         * The Talos secrets bundle (`talosctl gen secrets -o FILE`), mode 0600 or 0400: the cluster's CA keys,
         * service-account key, encryption secret. By reference only: its contents never go into this file.
         */
        secretsBundleFile: z.string().regex(/^\/[^\0]*$/, "an absolute path").refine((p) => !p.split("/").includes(".."), "no .."),
        /** Control-plane component images; their tag is the kubelet's (one Kubernetes version). */
        images: z
          .object({ apiServer: imageRef, controllerManager: imageRef, scheduler: imageRef, proxy: imageRef })
          .strict(),
        /** A shared (virtual) IP the control planes hold on their node interface (Talos `vip`), if any. */
        vip: ip.optional(),
        /** Extra names and addresses in the API server's and Talos API's certificates (a load balancer's). */
        certSANs: z
          .array(z.string().refine((s) => ipFamily(s) !== undefined || DNS_NAME.test(s), "a DNS name or an IP address"))
          .max(32)
          .default([]),
        /** Let ordinary workloads run on the control planes. */
        allowSchedulingOnControlPlanes: z.boolean().default(false),
      })
      .strict()
      .optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    // zod runs this even when a section failed: look only at what is there
    if (!s.controlPlane?.images || typeof s.talos?.kubeletImage !== "string") return;
    const tag = (ref: string) => ref.slice(ref.lastIndexOf(":") + 1);
    const want = tag(s.talos.kubeletImage);
    for (const [k, ref] of Object.entries(s.controlPlane.images)) {
      if (tag(ref) !== want) {
        ctx.addIssue({ code: "custom", path: ["controlPlane", "images", k], message: `the tag must be the kubelet image's (${want}): one Kubernetes version` });
      }
    }
  });
export type TalosSiteConfig = z.infer<typeof TalosSiteConfig>;

const blob = z.instanceof(Uint8Array).refine((b) => b.length > 0 && b.length <= 8192, "1 to 8192 bytes");

/** One node's own values, the same for workers and control planes. */
export const NodeInput = z
  .object({
    /** The node name; it becomes the hostname, which the kubelet CSR check compares with the node name. */
    name: z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, "a lowercase DNS label (it becomes the hostname)"),
    /** The interface carrying the static address: by MAC (deviceSelector.hardwareAddr) or by name. */
    link: z.union([
      z.object({ mac: z.string().regex(/^([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}$/, "a MAC address").transform((m) => m.toLowerCase().replace(/-/g, ":")) }).strict(),
      z.object({ name: z.string().regex(/^[A-Za-z0-9_.-]{1,15}$/, "a Linux interface name") }).strict(),
    ]),
    /** The node's static address with its prefix length, e.g. 10.0.0.21/24. */
    address: cidr.refine((s) => {
      const c = parseCidr(s);
      return c === undefined || isUsableHost(c); // zod runs this even when `cidr` failed
    }, "the network or broadcast address of its subnet"),
    gateway: ip,
    /** The disk Talos installs to, e.g. /dev/sda or /dev/disk/by-id/... */
    installDisk: z.string().regex(/^\/dev\/[A-Za-z0-9_.:+@-]+(\/[A-Za-z0-9_.:+@-]+)*$/).refine((s) => !s.split("/").includes(".."), "no .."),
    /** Seeds copied once by the renewal DaemonSet: the LDevID certificate chain and the TPM key blobs. */
    seed: z
      .object({
        ldevidCertChainPem: certChainPem,
        ldevidPublic: blob,
        ldevidPrivate: blob,
        lakPublic: blob,
        lakPrivate: blob,
        /** The LAK certificate (PEM), which the node agent presents at runtime attestation (SEED_FILES.lakCertPem). */
        lakCertPem: certChainPem.optional(),
      })
      .strict(),
  })
  .strict()
  .superRefine((n, ctx) => {
    const net = parseCidr(n.address);
    if (!net) return;
    if (ipFamily(n.gateway) !== net.family) {
      ctx.addIssue({ code: "custom", path: ["gateway"], message: `gateway ${n.gateway} is not of the address's family (IPv${net.family})` });
    } else if (!inSubnet(net, n.gateway)) {
      ctx.addIssue({ code: "custom", path: ["gateway"], message: `gateway ${n.gateway} is outside ${n.address}` });
    } else if (sameAddress(n.gateway, net.address)) {
      ctx.addIssue({ code: "custom", path: ["gateway"], message: `gateway ${n.gateway} is the node's own address` });
    }
  });
export type NodeInput = z.input<typeof NodeInput>;
