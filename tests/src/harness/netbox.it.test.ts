/** Smoke test of the NetBox harness: a real NetBox answers /api/status/ with the v2 token, and only with it. */
import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";
import { startNetBox, type NetBoxInstance, lastStartTimings } from "./netbox.js";

let nb: NetBoxInstance;
before(async () => {
  nb = await startNetBox();
  process.stdout.write(`# NetBox ${nb.version} at ${nb.url}; install check ${lastStartTimings?.installMs} ms, start ${lastStartTimings?.startMs} ms\n`);
}, { timeout: 20 * 60_000 });
after(async () => {
  await nb?.stop();
});

test("NetBox 4.7 answers /api/status/ with the v2 token", async () => {
  assert.match(nb.authorization, /^Bearer nbt_[A-Za-z0-9]{12}\.[A-Za-z0-9]{40}$/);
  const r = await fetch(`${nb.url}/api/status/`, { headers: { authorization: nb.authorization } });
  assert.equal(r.status, 200);
  const body = (await r.json()) as Record<string, unknown>;
  assert.match(String(body["netbox-version"]), /^4\.7\./);
  const check = await fetch(`${nb.url}/api/authentication-check/`, { headers: { authorization: nb.authorization } });
  assert.equal(check.status, 200);
});

test("NetBox refuses a request without a token and with a wrong one", async () => {
  const none = await fetch(`${nb.url}/api/dcim/devices/`);
  assert.equal(none.status, 403);
  const wrong = await fetch(`${nb.url}/api/dcim/devices/`, { headers: { authorization: nb.authorization.slice(0, -1) + "x" } });
  assert.equal(wrong.status, 403);
});
