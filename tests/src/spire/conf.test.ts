/**
 * The SPIRE harness runs exactly the shipped configs (spire-plugin/examples/server.conf and agent.conf) with only
 * paths, ports and addresses replaced. The real-server tests (spire.it.test.ts) check the file each process ran
 * with `changedValues`; this file checks the substitution itself and its refusals.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { AGENT_CONF_SUBSTITUTABLE, confValue, renderSpireConf, SERVER_CONF_SUBSTITUTABLE, SHIPPED_AGENT_CONF, SHIPPED_SERVER_CONF } from "../harness/spire.js";
import { changedValues } from "./confDiff.js";

const server = readFileSync(SHIPPED_SERVER_CONF, "utf8");
const agent = readFileSync(SHIPPED_AGENT_CONF, "utf8");

test("server.conf: replacing every substitutable value changes those lines' values and no other byte", () => {
  const values = Object.fromEntries(SERVER_CONF_SUBSTITUTABLE.map((k, i) => [k, k === "bind_port" ? "40000" : k === "bind_address" ? "127.0.0.1" : `/tmp/t/${i}/${k}`]));
  const ran = renderSpireConf(server, values, SERVER_CONF_SUBSTITUTABLE);
  const changed = changedValues(server, ran);
  assert.deepEqual([...changed.keys()].sort(), [...SERVER_CONF_SUBSTITUTABLE].sort());
  for (const [k, v] of changed) assert.equal(v.ran, values[k]);
  // what the tests rely on stays the shipped value
  assert.equal(confValue(ran, "trust_domain"), confValue(server, "trust_domain"));
  assert.equal(confValue(ran, "database_type"), "sqlite3");
  assert.match(ran, /NodeAttestor "tpm_devid" \{/);
  // the substitutable keys are the paths, ports and the listen address of the shipped file
  for (const k of SERVER_CONF_SUBSTITUTABLE) {
    const v = confValue(server, k);
    assert.ok(v.startsWith("/") || /^\d+$/.test(v) || k === "bind_address", `${k} = ${v} is not a path, port or address`);
  }
});

test("agent.conf: likewise, and the shipped agent attests with tpm_devid from tink-action's LDevID files", () => {
  const values = Object.fromEntries(AGENT_CONF_SUBSTITUTABLE.map((k, i) => [k, k === "server_port" ? "40001" : k === "server_address" ? "127.0.0.1" : `/tmp/a/${i}/${k}`]));
  const ran = renderSpireConf(agent, values, AGENT_CONF_SUBSTITUTABLE);
  assert.deepEqual([...changedValues(agent, ran).keys()].sort(), [...AGENT_CONF_SUBSTITUTABLE].sort());
  assert.equal(confValue(agent, "trust_domain"), confValue(server, "trust_domain"));
  assert.match(agent, /NodeAttestor "tpm_devid" \{/);
  assert.deepEqual(
    ["devid_cert_path", "devid_pub_path", "devid_priv_path"].map((k) => confValue(agent, k)),
    ["/var/lib/fleetd/devid/ldevid.crt", "/var/lib/fleetd/devid/ldevid.pub", "/var/lib/fleetd/devid/ldevid.priv"],
  );
  for (const k of AGENT_CONF_SUBSTITUTABLE) {
    const v = confValue(agent, k);
    assert.ok(v.startsWith("/") || /^\d+$/.test(v) || k === "server_address", `${k} = ${v} is not a path, port or address`);
  }
});

test("the substitution refuses anything but a listed key that appears once, and a value that would break the file", () => {
  assert.throws(() => renderSpireConf(server, { trust_domain: "other.test" }, SERVER_CONF_SUBSTITUTABLE), /trust_domain is not a path, port or address/);
  assert.throws(() => renderSpireConf(server, { database_type: "postgres" }, SERVER_CONF_SUBSTITUTABLE), /database_type is not/);
  assert.throws(() => renderSpireConf(server, { socket_path: '/x" \n log_level = "DEBUG' }, SERVER_CONF_SUBSTITUTABLE), /quote, backslash or newline/);
  assert.throws(() => renderSpireConf("server {\n}\n", { data_dir: "/x" }, SERVER_CONF_SUBSTITUTABLE), /appears 0 times/);
  assert.throws(() => renderSpireConf('a {\n data_dir = "/a"\n}\nb {\n data_dir = "/b"\n}\n', { data_dir: "/x" }, SERVER_CONF_SUBSTITUTABLE), /appears 2 times/);
});

test("changedValues fails on any change that is not a quoted value", () => {
  assert.throws(() => changedValues(server, server.replace('log_level = "INFO"', 'log_level = "INFO"\n')), /lines/);
  assert.throws(() => changedValues(server, server.replace('database_type = "sqlite3"', 'database_type = "postgres" ')), /differs in more than a quoted value/);
  assert.throws(() => changedValues(server, server.replace("KeyManager \"disk\"", "KeyManager \"memory\"")), /differs in more than a quoted value/);
  assert.deepEqual([...changedValues(server, server.replace('log_level = "INFO"', 'log_level = "DEBUG"'))], [["log_level", { shipped: "INFO", ran: "DEBUG" }]]);
});
