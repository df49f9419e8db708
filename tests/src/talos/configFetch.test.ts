/**
 * The one-time Talos config under load and under aborted responses (issue 12), through talos-config-server's own
 * app and the real SQLite state store (configFetchRig.ts), on loopback. No timing is asserted here: the latency is
 * tests/src/bench/talosConfig.ts's.
 *  - 200 concurrent fetches of 200 different configs, each from its own address: every one answers 200 with exactly
 *    its own config; a second fetch of each is 404; no install code is left in the store.
 *  - A client that drops the connection in the middle of the body (the config is large enough that the server is
 *    still writing it: the client saw fewer bytes than Content-Length and the server logged the aborted response)
 *    does not lose the config: the claim is released, the next fetch gets all of it, and the one after is 404 —
 *    served complete exactly once.
 *  - A client that drops the connection while the server still asks NetBox (is the node still staged?) gets its
 *    claim released at once (before: held until it went stale, 60 s of "already fetched" 404s).
 */
import { strict as assert } from "node:assert";
import { request, type IncomingMessage } from "node:http";
import { test } from "node:test";
import { clientAddress, configPath, get, startConfigRig, workerConfig } from "./configFetchRig.js";

const N = 200;

test("200 concurrent fetches of 200 configs: each served its own config once; a second fetch of each is 404", async () => {
  const rig = await startConfigRig({ configs: Array.from({ length: N }, (_, i) => workerConfig(i)) });
  try {
    const first = await Promise.all(rig.configs.map((c, i) => get(rig.port, configPath(c), clientAddress(i))));
    for (const [i, r] of first.entries()) {
      assert.equal(r.status, 200, `config ${i}: ${r.body.slice(0, 200)}`);
      assert.equal(r.body, rig.configs[i]!.config, `config ${i} is its own`);
    }
    assert.equal(new Set(first.map((r) => r.body)).size, N, "200 different configs");
    const second = await Promise.all(rig.configs.map((c, i) => get(rig.port, configPath(c), clientAddress(i))));
    for (const [i, r] of second.entries()) assert.equal(r.status, 404, `config ${i} a second time: ${r.body.slice(0, 200)}`);
    for (const c of rig.configs) assert.equal(await rig.store.hasInstallCodeFor(c.deviceId, Date.now()), false, `device ${c.deviceId}: its code is gone`);
  } finally {
    await rig.close();
  }
});

/** Reads the headers and the first body chunk, then destroys the socket; resolves with what it saw. */
function abortMidBody(port: number, path: string): Promise<{ status: number; length: number; received: number }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, agent: false }, (res: IncomingMessage) => {
      res.once("data", (chunk: Buffer) => {
        res.pause();
        const seen = { status: res.statusCode ?? 0, length: Number(res.headers["content-length"]), received: chunk.length };
        req.destroy();
        resolve(seen);
      });
      res.on("error", () => undefined); // the destroy above
    });
    req.on("error", (e) => (req.destroyed ? undefined : reject(e)));
    req.end();
  });
}

test("a client that drops the connection mid-body does not lose its config: the next fetch gets all of it, once", async () => {
  // 8 MiB: more than the loopback socket buffers hold while the client reads nothing, so the server is still writing
  const rig = await startConfigRig({ configs: [workerConfig(0, 8 << 20), workerConfig(1)] });
  try {
    const [big] = rig.configs;
    const released = rig.logged(/response aborted; claim released/);
    const cut = await abortMidBody(rig.port, configPath(big!));
    assert.equal(cut.status, 200);
    assert.equal(cut.length, Buffer.byteLength(big!.config), "Content-Length is the whole config");
    assert.ok(cut.received < cut.length, `the client stopped mid-body (${cut.received} of ${cut.length} bytes)`);
    const line = await released; // the server saw the connection close before the response finished
    assert.equal((line["node"] as { deviceId: number }).deviceId, big!.deviceId);

    const again = await get(rig.port, configPath(big!), clientAddress(0));
    assert.equal(again.status, 200, again.body.slice(0, 200));
    assert.equal(again.body, big!.config, "the whole config, after the aborted response");
    assert.equal((await get(rig.port, configPath(big!), clientAddress(0))).status, 404, "served complete exactly once");
    assert.equal(await rig.store.hasInstallCodeFor(big!.deviceId, Date.now()), false);
  } finally {
    await rig.close();
  }
});

test("a client that drops the connection while the server asks NetBox does not hold its config: the next fetch gets it, once", async () => {
  let entered!: () => void;
  let answer!: () => void;
  const asked = new Promise<void>((r) => (entered = r));
  const netbox = new Promise<void>((r) => (answer = r));
  let reads = 0;
  // the fetch's NetBox read (is the node still staged?): the first one waits until the client has gone
  const rig = await startConfigRig({
    configs: [workerConfig(0)],
    stillWanted: async () => {
      if (reads++ === 0) {
        entered();
        await netbox;
      }
      return { ok: true };
    },
  });
  try {
    const [c] = rig.configs;
    const released = rig.logged(/closed before the config was sent; claim released/);
    const closed = rig.nextClose();
    const req = request({ host: "127.0.0.1", port: rig.port, path: configPath(c!), agent: false });
    req.on("error", () => undefined); // destroyed below
    req.end();
    await asked;
    req.destroy();
    await closed; // the server saw the close while NetBox was still being asked
    answer();
    const again = await get(rig.port, configPath(c!), clientAddress(0));
    assert.equal(again.status, 200, `the claim was released, not left to go stale: ${again.body.slice(0, 200)}`);
    assert.equal(again.body, c!.config);
    assert.equal((await get(rig.port, configPath(c!), clientAddress(0))).status, 404, "served complete exactly once");
    assert.equal((await released)["sending"], false, "logged as closed before anything was sent");
  } finally {
    answer();
    await rig.close();
  }
});
