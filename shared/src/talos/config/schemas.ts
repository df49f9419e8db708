/**
 * Inputs of the Talos worker config renderer, checked with zod at the trust boundary: the site
 * configuration (a file the operator writes) and the per-node input (from NetBox and the attestation
 * step). Nothing about the Talos version, images, endpoint or CAs is a constant in code.
 */
import { X509Certificate } from "node:crypto";
import { z } from "zod";
import { inSubnet, ipFamily, isUsableHost, parseCidr, sameAddress } from "./net.js";

/** Kubernetes bootstrap token / Talos trustd token: [a-z0-9]{6}.[a-z0-9]{16}. */
export const TOKEN_PATTERN = /^[a-z0-9]{6}\.[a-z0-9]{16}$/;

const ip = z.string().refine((s) => ipFamily(s) !== undefined, "not an IPv4 or IPv6 address");
const cidr = z.string().refine((s) => parseCidr(s) !== undefined, "not an address with a prefix length (CIDR), e.g. 10.0.0.21/24");

/** An OCI image reference with a tag (registry/path:tag), no digest-only refs so the version is visible. */
const imageRef = z
  .string()
  .regex(/^[a-z0-9.-]+(:[0-9]+)?(\/[a-z0-9._-]+)+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/, "not an image reference registry/path:tag");

function pemCertificates(pem: string): X509Certificate[] | undefined {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g);
  if (!blocks) return undefined;
  const rest = pem.replace(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g, "").trim();
  if (rest !== "") return undefined; // nothing else (no keys!) in the file
  try {
    return blocks.map((b) => new X509Certificate(b));
  } catch {
    return undefined;
  }
}

/** One PEM CA certificate, and nothing else (a private key in a worker config is refused by Talos, too). */
const caCertPem = z.string().refine((s) => {
  const certs = pemCertificates(s);
  return certs !== undefined && certs.length === 1 && certs[0]!.ca;
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
        id: z.string().regex(/^[A-Za-z0-9+/=_-]{16,128}$/),
        secret: z.string().regex(/^[A-Za-z0-9+/=_-]{16,128}$/),
        /** secrets.yaml trustdinfo.token: cluster-wide, equal to the control planes' machine.token. */
        trustdToken: z.string().regex(TOKEN_PATTERN, "[a-z0-9]{6}.[a-z0-9]{16}"),
        /** Talos API (OS) CA certificate, PEM; never the key. */
        osCaCert: caCertPem,
        /** Kubernetes CA certificate, PEM; never the key. */
        kubernetesCaCert: caCertPem,
        dnsDomain: z.string().regex(/^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/),
        podSubnets: z.array(cidr).min(1),
        serviceSubnets: z.array(cidr).min(1),
      })
      .strict(),
    network: z
      .object({
        nameservers: z.array(ip).min(1).max(3),
      })
      .strict(),
  })
  .strict();
export type TalosSiteConfig = z.infer<typeof TalosSiteConfig>;

const blob = z.instanceof(Uint8Array).refine((b) => b.length > 0 && b.length <= 8192, "1 to 8192 bytes");

export const WorkerNodeInput = z
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
export type WorkerNodeInput = z.input<typeof WorkerNodeInput>;
