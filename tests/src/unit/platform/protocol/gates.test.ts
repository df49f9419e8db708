/**
 * What the challenge may decide on the EK-binding index's copy of a node, the gates check again on a fresh read
 * (evidence.ts checkGates): the serial, the TPM family of the session's variant, the chain each EK needs now;
 * and decideOnIndex never refuses on what the index held without reading the node again.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Reason } from "@fleetd/verify/attest";
import { DEFAULT_MODE_GATES, type Node } from "@fleetd/platform/fleet";
import type { Claims } from "@fleetd/platform/protocol";
import { challengedWith, checkGates, decideOnIndex, type ServerContext } from "@fleetd/platform/protocol/server";

const A = "a".repeat(64);
const B = "b".repeat(64);
const node = (over: Partial<Node> = {}): Node => ({
  deviceId: 7, name: "worker-1", serial: "S1", class: "talos", role: "worker", tpm: "2.0",
  ekBindings: [{ binding: A, alg: "rsa", chain: true }, { binding: B, alg: "ecc", chain: false }],
  status: "planned", desiredAction: null, macs: [], unattributed: [], switchPortWaived: true, ...over,
});
const claims: Claims = { serial: "S1", uuid: "4c4c4544-0058-4b10-8032-b7c04f4d3332", macs: ["00:00:5e:00:53:01"], lldp: null, mode: "intake", workflow: "w" } as Claims;
const ctx = { settings: { gates: DEFAULT_MODE_GATES } } as unknown as ServerContext;
const ref = { deviceId: 7, name: "worker-1" };
const failed = (r: Reason[]) => r.map((x) => x.check).filter((c) => c !== "gate");

test("the gates pass a node as the challenge found it", () => {
  assert.deepEqual(failed(checkGates(ctx, node(), ref, "intake", [A, B], claims, { tpm: "2.0", chained: [A] })), []);
});

test("gate.serial: the claimed serial must be the node's serial now", () => {
  assert.deepEqual(failed(checkGates(ctx, node({ serial: "S2" }), ref, "intake", [A, B], claims)), ["gate.serial"]);
});

test("gate.tpm: the node must still be recorded with the TPM family of the session's variant", () => {
  assert.deepEqual(failed(checkGates(ctx, node({ tpm: "1.2" }), ref, "intake", [A, B], claims)), ["gate.tpm"]);
  assert.deepEqual(failed(checkGates(ctx, node({ tpm: "1.2" }), ref, "intake", [A, B], claims, challengedWith({ tpm: "1.2" }))), []);
  assert.deepEqual(failed(checkGates(ctx, node(), ref, "intake", [A, B], claims, challengedWith({ tpm: "1.2" }))), ["gate.tpm"]);
});

test("gate.ekChain: an EK that needs a manufacturer chain now, which the challenge did not chain-check, is refused", () => {
  const both = node({ ekBindings: [{ binding: A, alg: "rsa", chain: true }, { binding: B, alg: "ecc", chain: true }] });
  assert.deepEqual(failed(checkGates(ctx, both, ref, "intake", [A, B], claims, challengedWith({ ekChained: [A] }))), ["gate.ekChain"]);
  assert.deepEqual(failed(checkGates(ctx, both, ref, "intake", [A, B], claims, challengedWith({ ekChained: [A, B] }))), []);
  // A session from before the challenge recorded it: that challenge read the node fresh; the gate is skipped.
  assert.deepEqual(failed(checkGates(ctx, both, ref, "intake", [A, B], claims, challengedWith({}))), []);
});

test("decideOnIndex: a pass on the index's node costs no fresh read; a refusal is decided again on a fresh read", async () => {
  const calls: boolean[] = [];
  const inventory = (indexed: Node | undefined, fresh: Node | undefined) => ({
    findByEkBinding: async (_b: string, o?: { fresh?: boolean }) => {
      calls.push(o?.fresh === true);
      return o?.fresh ? fresh : indexed;
    },
  });
  const judge = async (n: Node): Promise<Reason[]> => (n.serial === "S1" ? [] : [{ check: "claims.serial", detail: "x" }]);
  const run = (indexed: Node | undefined, fresh: Node | undefined) => decideOnIndex({ inventory: inventory(indexed, fresh) } as unknown as ServerContext, [A], judge);

  calls.length = 0;
  assert.deepEqual((await run(node(), node({ serial: "S2" })))?.reasons, []);
  assert.deepEqual(calls, [false], "the index's node passed: no fresh read");

  calls.length = 0;
  const r = await run(node({ serial: "OLD" }), node());
  assert.deepEqual(r?.reasons, [], "the index was stale: the fresh node passes");
  assert.deepEqual(calls, [false, true]);

  calls.length = 0;
  assert.deepEqual((await run(node({ serial: "X" }), node({ serial: "X" })))?.reasons.map((x) => x.check), ["claims.serial"], "refused on the fresh read");
  assert.equal(await run(node({ serial: "X" }), undefined), undefined, "no longer approved: unknown (pending)");
  assert.equal(await run(undefined, node()), undefined);
});
