/**
 * TinkerbellEffects from the site configuration's `kubernetes.management` section (kubeconfig, namespace,
 * `tinkerbell`), or undefined with the reason when the section is missing (callers then only record intents).
 */
import { readFileSync } from "node:fs";
import { ParseError } from "@fleetd/verify/codec";
import { CertificateError, certificatesFromPem, parseCertificate } from "@fleetd/verify/x509";
import { loadKube, type Kube } from "../kube/client.js";
import { ConfigError, type SiteConfig } from "../fleet/siteConfig.js";
import { TinkerbellEffects } from "./effects.js";

export type EffectsFromConfig = { effects: TinkerbellEffects; reason?: undefined } | { effects?: undefined; reason: string };

export function tinkerbellEffectsFromConfig(site: SiteConfig, opts: { kube?: Kube } = {}): EffectsFromConfig {
  const m = site.kubernetes?.management;
  if (!m) return { reason: "no kubernetes.management section in the site configuration" };
  if (!m.tinkerbell) return { reason: "no kubernetes.management.tinkerbell section (images, server URL and CA) in the site configuration" };
  let ca: string | undefined;
  if (m.tinkerbell.server.caFile) {
    try {
      ca = readFileSync(m.tinkerbell.server.caFile, "utf8");
    } catch (e) {
      throw new ConfigError(`kubernetes.management.tinkerbell.server.caFile: cannot read ${m.tinkerbell.server.caFile}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}`);
    }
    try {
      for (const der of certificatesFromPem(ca, { otherBlocks: "ignore" })) parseCertificate(der);
    } catch (e) {
      if (!(e instanceof CertificateError || e instanceof ParseError)) throw e;
      throw new ConfigError(`kubernetes.management.tinkerbell.server.caFile: ${m.tinkerbell.server.caFile} holds no PEM certificate that parses: ${e.message}`);
    }
  }
  const kube = opts.kube ?? loadKube(m.kubeconfig);
  return { effects: new TinkerbellEffects({ kube, namespace: m.namespace, site: m.tinkerbell, ...(ca ? { serverCaPem: ca } : {}) }) };
}
