/** talos-config-server/manifests/csr-gate.yaml is what `fleetd kube setup` applies for the default account. */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { csrGateManifest } from "@fleetd/cli";
import { approvalPolicy, csrGateObjects, DEFAULT_GATE_ACCOUNT } from "@fleetd/platform/kube";

const FILE = fileURLToPath(new URL("../../../talos-config-server/manifests/csr-gate.yaml", import.meta.url));

test("the shipped manifest equals the objects the code applies (regenerate with fleetd kube setup --print)", () => {
  const text = readFileSync(FILE, "utf8");
  assert.equal(text, csrGateManifest(DEFAULT_GATE_ACCOUNT));
  const docs = parseAllDocuments(text).map((d) => d.toJS() as unknown);
  assert.deepEqual(docs, JSON.parse(JSON.stringify(csrGateObjects(DEFAULT_GATE_ACCOUNT))));
  assert.deepEqual(docs.map((d) => (d as { kind: string }).kind), ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]);
});

test("the policy names the configured account, and an account name cannot inject CEL", () => {
  const p = approvalPolicy({ namespace: "ops", name: "gate" });
  assert.match(p.spec?.validations?.[0]?.expression ?? "", /request\.userInfo\.username == 'system:serviceaccount:ops:gate'/);
  assert.throws(() => approvalPolicy({ namespace: "ops", name: "x' || true || '" }), /not a service account name/);
  assert.throws(() => approvalPolicy({ namespace: "Ops", name: "gate" }), /not a namespace name/);
});
