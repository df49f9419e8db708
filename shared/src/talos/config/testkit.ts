/**
 * Test support: a complete site configuration and node input with freshly made certificates (openssl
 * CLI: an EC P-256 CA per role, and an LDevID leaf), so rendering tests use real certificates.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NodeInput, TalosSiteConfig } from "./schemas.js";

function openssl(args: string[], cwd: string): void {
  execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
}

/** A self-signed CA certificate (PEM) and, if `leafCn` is given, a leaf it issued (PEM). */
export function makeCerts(caCn: string, leafCn?: string): { ca: string; leaf?: string } {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-certs-"));
  try {
    openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"], dir);
    openssl(["req", "-x509", "-new", "-key", "ca.key", "-subj", `/CN=${caCn}`, "-days", "1", "-out", "ca.pem",
      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"], dir);
    const ca = readFileSync(join(dir, "ca.pem"), "utf8");
    if (!leafCn) return { ca };
    openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "leaf.key"], dir);
    openssl(["req", "-new", "-key", "leaf.key", "-subj", `/CN=${leafCn}`, "-out", "leaf.csr"], dir);
    writeFileSync(join(dir, "ext"), "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n");
    openssl(["x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "2", "-days", "1", "-extfile", "ext", "-out", "leaf.pem"], dir);
    return { ca, leaf: readFileSync(join(dir, "leaf.pem"), "utf8") };
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
