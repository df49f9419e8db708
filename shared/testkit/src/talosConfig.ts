/**
 * Test support: a complete site configuration and node input with freshly made certificates (openssl
 * CLI: an EC P-256 CA per role, and an LDevID leaf), so rendering tests use real certificates; for control
 * planes, a Talos secrets bundle of such CAs written as a 0600 file, and the site configuration that goes
 * with a bundle (its cluster values and CA certificates, `controlPlane.secretsBundleFile` naming it).
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { type NodeInput, type TalosSiteConfig, type TalosSecretsBundle, newBootstrapToken } from "@fleetd/platform/talos/config";

function openssl(args: string[], cwd: string): void {
  execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
}

/** A self-signed CA certificate (PEM) and its key (PEM, SEC1), and, if `leafCn` is given, a leaf it issued (PEM). */
export function makeCerts(caCn: string, leafCn?: string): { ca: string; caKey: string; leaf?: string } {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-certs-"));
  try {
    openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"], dir);
    openssl(["req", "-x509", "-new", "-key", "ca.key", "-subj", `/CN=${caCn}`, "-days", "1", "-out", "ca.pem",
      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"], dir);
    const ca = readFileSync(join(dir, "ca.pem"), "utf8");
    const caKey = readFileSync(join(dir, "ca.key"), "utf8");
    if (!leafCn) return { ca, caKey };
    openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "leaf.key"], dir);
    openssl(["req", "-new", "-key", "leaf.key", "-subj", `/CN=${leafCn}`, "-out", "leaf.csr"], dir);
    writeFileSync(join(dir, "ext"), "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n");
    openssl(["x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "2", "-days", "1", "-extfile", "ext", "-out", "leaf.pem"], dir);
    return { ca, caKey, leaf: readFileSync(join(dir, "leaf.pem"), "utf8") };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function siteConfigFixture(talosVersion: string): TalosSiteConfig {
  return {
    talos: {
      version: talosVersion,
      installerImage: `factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:${talosVersion}`,
      kubeletImage: "ghcr.io/siderolabs/kubelet:v1.34.1",
    },
    cluster: {
      name: "lab",
      endpoint: "https://api.lab.example:6443",
      id: "0raF93qnkMvF-FZNuvyGozXNdLiT2FOWSlyBaW4PR-w=",
      secret: "pofHbABZq7VXuObsdLdy/bHmz6hlMHZ3p8+6WKrv1ic=",
      trustdToken: "d8cwfa.eyvpi0xwxyarbfid",
      osCaCert: makeCerts("talos").ca,
      kubernetesCaCert: makeCerts("kubernetes").ca,
      dnsDomain: "cluster.local",
      podSubnets: ["10.244.0.0/16"],
      serviceSubnets: ["10.96.0.0/12"],
    },
    network: { nameservers: ["10.0.0.1"] },
  };
}

export function nodeInputFixture(): NodeInput {
  const { ca, leaf } = makeCerts("fleetd devid", "w1.g1");
  return {
    name: "w1",
    link: { mac: "52:54:00:12:34:56" },
    address: "10.0.0.21/24",
    gateway: "10.0.0.1",
    installDisk: "/dev/sda",
    seed: {
      ldevidCertChainPem: leaf! + ca,
      ldevidPublic: Uint8Array.from([0x00, 0x23, 0x00, 0x0b, 1, 2, 3]),
      ldevidPrivate: Uint8Array.from([0x00, 0x20, 9, 9, 9]),
      lakPublic: Uint8Array.from([0x00, 0x23, 0x00, 0x0b, 4, 5, 6]),
      lakPrivate: Uint8Array.from([0x00, 0x20, 8, 8, 8]),
    },
  };
}

const b64 = (s: string) => Buffer.from(s).toString("base64");
const unb64 = (s: string) => Buffer.from(s, "base64").toString("utf8");

function caPair(cn: string): { crt: string; key: string } {
  const c = makeCerts(cn);
  return { crt: b64(c.ca), key: b64(c.caKey) };
}

/** A Talos secrets bundle (as `talosctl gen secrets` lays it out) of fresh openssl-made CAs and keys. */
export function secretsBundleFixture(): TalosSecretsBundle {
  return {
    cluster: { id: randomBytes(32).toString("base64url") + "=", secret: randomBytes(32).toString("base64") },
    secrets: { bootstraptoken: newBootstrapToken().token, secretboxencryptionsecret: randomBytes(32).toString("base64") },
    trustdinfo: { token: newBootstrapToken().token },
    certs: {
      etcd: caPair("etcd"),
      k8s: caPair("kubernetes"),
      k8saggregator: caPair("aggregator"),
      k8sserviceaccount: { key: caPair("service accounts").key },
      os: caPair("talos"),
    },
  };
}

/** Writes a bundle (a value, as YAML; a string as it is) as a secrets file with `mode` (default 0600); returns the path. */
export function writeSecretsBundle(file: string, bundle: unknown, mode = 0o600): string {
  writeFileSync(file, typeof bundle === "string" ? bundle : stringify(bundle, { indent: 4 }), { mode });
  chmodSync(file, mode); // the umask does not narrow what the test asked for
  return file;
}

/** The site configuration of the cluster a bundle belongs to, with a control-plane section naming `bundleFile`. */
export function siteForBundle(talosVersion: string, bundle: TalosSecretsBundle, bundleFile: string): TalosSiteConfig {
  const site = siteConfigFixture(talosVersion);
  return {
    ...site,
    cluster: {
      ...site.cluster,
      id: bundle.cluster.id,
      secret: bundle.cluster.secret,
      trustdToken: bundle.trustdinfo.token,
      osCaCert: unb64(bundle.certs.os.crt),
      kubernetesCaCert: unb64(bundle.certs.k8s.crt),
    },
    controlPlane: {
      secretsBundleFile: bundleFile,
      images: {
        apiServer: "registry.k8s.io/kube-apiserver:v1.34.1",
        controllerManager: "registry.k8s.io/kube-controller-manager:v1.34.1",
        scheduler: "registry.k8s.io/kube-scheduler:v1.34.1",
        proxy: "registry.k8s.io/kube-proxy:v1.34.1",
      },
      certSANs: [],
      allowSchedulingOnControlPlanes: false,
    },
  };
}
