import { strict as assert } from "node:assert";
import { test } from "node:test";
import { parseSiteConfig } from "@fleetd/platform/fleet";
import { HandlerSection, keepFailedControlPlanesOf, toHandlerConfig } from "./config.js";

const site = (extra: Record<string, unknown> = {}) =>
  parseSiteConfig({
    netbox: { url: "http://127.0.0.1:1", token: "nbt_x.y" },
    accounts: { apply: "a", handler: "h" },
    authorizedGroup: "g",
    ...extra,
  });

test("handler.spireNodes: trust domain, CA bundle, list and status locations; defaults for role slugs and the poll", () => {
  const h = HandlerSection.parse({
    stateDir: "/s", nodesFile: "/n",
    spireNodes: { trustDomain: "fleet.example.org", caBundle: "/ca.pem", list: { file: "/l/spire-nodes.json" }, status: { configMap: { namespace: "fleetd", name: "spire-sync-status", key: "s.json" } } },
  });
  assert.equal(h.spireNodes?.roleSlugs["control-plane"], "fleetd-control-plane");
  assert.equal(h.spireNodes?.confirmPollMs, 1000);
  assert.equal((h.spireNodes?.status as { configMap: { kubeconfig: string } }).configMap.kubeconfig, "in-cluster");
  for (const bad of [{ trustDomain: "Bad" }, { list: { file: "relative" } }, { list: {} }]) {
    assert.equal(HandlerSection.safeParse({ stateDir: "/s", nodesFile: "/n", spireNodes: { trustDomain: "t.example", caBundle: "/c", list: { file: "/l" }, status: { file: "/s" }, ...bad } }).success, false, JSON.stringify(bad));
  }
});

test("keepFailedControlPlanes: default true (the site setting is read when the site configuration has it)", () => {
  assert.equal(keepFailedControlPlanesOf(site()), true);
});

test("handler.ha from one shared file: FLEETD_HA_IDENTITY is each replica's identity (checked like the file's); without ha it turns nothing on", () => {
  const withHa = site({ webhook: { url: "https://x.example/netbox/events", secret: "s".repeat(32) }, handler: { stateDir: "/s", nodesFile: "/n.yaml", ha: { namespace: "fleetd", identity: "netbox-script-0" } } });
  assert.equal(toHandlerConfig(withHa).handler.ha?.identity, "netbox-script-0");
  assert.equal(toHandlerConfig(withHa, { FLEETD_HA_IDENTITY: "netbox-script-5d8c-xk2" }).handler.ha?.identity, "netbox-script-5d8c-xk2");
  assert.throws(() => toHandlerConfig(withHa, { FLEETD_HA_IDENTITY: "no spaces" }), /handler\.ha\.identity/);
  const without = site({ webhook: { url: "https://x.example/netbox/events", secret: "s".repeat(32) }, handler: { stateDir: "/s", nodesFile: "/n.yaml" } });
  assert.equal(toHandlerConfig(without, { FLEETD_HA_IDENTITY: "netbox-script-1" }).handler.ha, undefined);
});
