/**
 * The lab OS's kubelet bootstrap client (kubeletBootstrap.ts) against fleetd's own pieces, without a cluster: its
 * inputs come from a config fleetd renders, and the CSR it makes is one fleetd's CSR gate approves for that node
 * (and denies for another). The cluster side runs in vm/hookos.it.test.ts (test 5).
 */
import { strict as assert } from "node:assert";
import { generateKeyPairSync } from "node:crypto";
import { test } from "node:test";
import * as kube from "@fleetd/platform/kube";
import { judgeBootstrapCsr, parseCsr, type CsrObject } from "@fleetd/platform/kube";
import { renderWorkerConfig } from "@fleetd/platform/talos/config";
import { nodeInputFixture, siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { certificationRequest, inputsFromTalosConfig, KUBELET_CLIENT_SIGNER, KUBELET_USAGES } from "./kubeletBootstrap.js";

const pem = (der: Uint8Array) => `-----BEGIN CERTIFICATE REQUEST-----\n${Buffer.from(der).toString("base64")}\n-----END CERTIFICATE REQUEST-----\n`;

test("the inputs are the rendered config's cluster endpoint, Kubernetes CA, bootstrap token and hostname", () => {
  const site = siteConfigFixture("v1.11.5");
  const rendered = renderWorkerConfig(site, nodeInputFixture());
  const i = inputsFromTalosConfig(rendered.yaml);
  assert.equal(i.endpoint, site.cluster.endpoint);
  assert.equal(i.caPem, site.cluster.kubernetesCaCert);
  assert.equal(i.token, rendered.bootstrapToken.token);
  assert.equal(i.node, nodeInputFixture().name);
  assert.throws(() => inputsFromTalosConfig(rendered.yaml.replace(rendered.bootstrapToken.token, "not-a-token")), /cluster\.token/);
});

test("the CSR is a kubelet's: fleetd's gate approves it for the token's node and denies it for another", () => {
  assert.equal(KUBELET_CLIENT_SIGNER, kube.KUBELET_CLIENT_SIGNER);
  assert.deepEqual(KUBELET_USAGES, kube.KUBELET_USAGES);
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const der = certificationRequest([["2.5.4.10", "system:nodes"], ["2.5.4.3", "system:node:w1"]], privateKey);
  const parsed = parseCsr(Buffer.from(pem(der)));
  assert.equal(parsed.signatureValid, true);
  assert.equal(parsed.key.detail, "EC prime256v1");
  assert.deepEqual(parsed.commonNames, ["system:node:w1"]);
  assert.deepEqual(parsed.organizations, ["system:nodes"]);
  const csr: CsrObject = {
    metadata: { name: "csr-x" },
    spec: { signerName: KUBELET_CLIENT_SIGNER, request: Buffer.from(pem(der)).toString("base64"), username: "system:bootstrap:abcdef", usages: [...KUBELET_USAGES] },
  };
  const now = new Date();
  assert.equal(judgeBootstrapCsr(csr, "abcdef", { node: "w1", expiresAt: now.getTime() + 60_000 }, now).action, "approve");
  const other = judgeBootstrapCsr(csr, "abcdef", { node: "w2", expiresAt: now.getTime() + 60_000 }, now);
  assert.equal(other.action, "deny");
  assert.deepEqual(other.action === "deny" ? other.reasons.map((r) => r.check) : [], ["csr.subject.cn"]);
});
