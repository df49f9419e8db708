/** Node lists for the SPIRE sync tests: rendered by the product's `renderNodeList` from nodes shaped as NetBox gives them. */
import { renderNodeList, serializeNodeList, type NodeList } from "@fleetd/platform/spire";
import type { Node } from "@fleetd/platform/fleet";

export type ListNode = Pick<Node, "name" | "status" | "role" | "ldevid" | "runtime" | "unattributed">;


/** An eligible node: active, a current LDevID `<name>.g<gen>`, a passing runtime verdict. */
export function eligibleNode(name: string, gen = 1, role: Node["role"] = "worker"): ListNode {
  const at = new Date(Date.UTC(2026, 0, 1));
  return {
    name, status: "active", role, unattributed: [],
    ldevid: { serial: `0${gen}`, cn: `${name}.g${gen}`, notAfter: new Date(Date.UTC(2099, 0, 1)) },
    runtime: { verdict: "pass", at, lastPassAt: at },
  };
}

export function nodeNames(n: number, prefix = "node"): string[] {
  return Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(5, "0")}`);
}

export function listOf(trustDomain: string, caFingerprints: readonly string[], nodes: readonly ListNode[]): NodeList {
  return renderNodeList(nodes, { trustDomain, caFingerprints, now: new Date(), keepFailedControlPlanes: true }).list;
}

export function listBytes(list: NodeList): Buffer {
  return Buffer.from(serializeNodeList(list));
}
