import { strict as assert } from "node:assert";
import { test } from "node:test";
import { parse } from "yaml";
import { renderWorkerConfig, SEED_DIR, SEED_FILES } from "@fleetd/platform/talos/config";
import { nodeInputFixture, siteConfigFixture } from "@fleetd/testkit/talosConfig";

const files = (yaml: string) => (parse(yaml) as { machine: { files: { path: string; content: string; permissions: number; op: string }[] } }).machine.files;

test("seed files: the LAK certificate (lak-cert.pem.b64) is rendered when given, as the base64 of its PEM, 0600; absent, the five others only", () => {
  const node = nodeInputFixture();
  const lakPem = node.seed.ldevidCertChainPem.slice(0, node.seed.ldevidCertChainPem.indexOf("-----END CERTIFICATE-----") + 26);
  const withLak = renderWorkerConfig(siteConfigFixture("v1.13.9"), { ...node, seed: { ...node.seed, lakCertPem: lakPem } });
  const f = files(withLak.yaml).find((x) => x.path === `${SEED_DIR}/${SEED_FILES.lakCertPem}`);
  assert.ok(f, "rendered");
  assert.equal(Buffer.from(f.content, "base64").toString("utf8"), lakPem);
  assert.equal(f.permissions, 0o600);
  assert.equal(f.op, "create");
  assert.equal(withLak.seedPaths.length, 6);
  const without = renderWorkerConfig(siteConfigFixture("v1.13.9"), node);
  assert.deepEqual(without.seedPaths, Object.entries(SEED_FILES).filter(([k]) => k !== "lakCertPem").map(([, v]) => `${SEED_DIR}/${v}`));
  assert.throws(() => renderWorkerConfig(siteConfigFixture("v1.13.9"), { ...node, seed: { ...node.seed, lakCertPem: "not PEM" } }), /lakCertPem/);
});
