import { strict as assert } from "node:assert";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { createNetBox, listAll, NetBoxError } from "./client.js";

// A NetBox stand-in at the connection level only: it drops the connection of the first `drops` requests without
// answering (what a server closing a kept-alive connection as the request goes out looks like to the client).
let server: Server;
let url: string;
let drops = 0;
let dropOnly: string | undefined;
const seen: string[] = [];
before(async () => {
  server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    if (drops > 0 && (dropOnly === undefined || req.url === dropOnly)) {
      drops--;
      req.socket.destroy();
      return;
    }
    req.resume();
    const page = req.url === "/api/dcim/devices/" ? { count: 2, next: `${url}/api/dcim/devices/?offset=1`, previous: null, results: [{ id: 1 }] }
      : req.url === "/api/dcim/devices/?offset=1" ? { count: 2, next: null, previous: `${url}/api/dcim/devices/`, results: [{ id: 2 }] }
      : { "netbox-version": "4.7.3" };
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(page));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((r) => server.close(() => r())));

test("a read whose connection drops is sent once more on a new connection", async () => {
  seen.length = 0;
  drops = 1;
  const nb = createNetBox({ url, token: "nbt_x.y" });
  const r = await nb.api.GET("/api/status/");
  assert.equal(r.response.status, 200);
  assert.deepEqual(seen, ["GET /api/status/", "GET /api/status/"]);
});

test("a read whose connection drops twice is netbox-unreachable (one retry, no more), naming the cause", async () => {
  seen.length = 0;
  drops = 2;
  const nb = createNetBox({ url, token: "nbt_x.y" });
  await assert.rejects(nb.api.GET("/api/status/"), (e: unknown) => e instanceof NetBoxError && e.code === "netbox-unreachable" && e.outage() !== undefined && /fetch failed: /.test(e.detail));
  assert.equal(seen.length, 2);
});

test("a write whose connection drops is never sent again: its outcome is unknown", async () => {
  seen.length = 0;
  drops = 1;
  const nb = createNetBox({ url, token: "nbt_x.y" });
  const post = nb.api.POST("/api/extras/journal-entries/", { body: { assigned_object_type: "dcim.device", assigned_object_id: 1, comments: "x" } as never });
  await assert.rejects(post, (e: unknown) => e instanceof NetBoxError && e.code === "netbox-unreachable");
  assert.deepEqual(seen, ["POST /api/extras/journal-entries/"]);
});

test("the deadline is not retried", async () => {
  const slow = createServer(() => undefined); // never answers
  await new Promise<void>((r) => slow.listen(0, "127.0.0.1", r));
  let n = 0;
  slow.on("request", () => n++);
  try {
    const nb = createNetBox({ url: `http://127.0.0.1:${(slow.address() as AddressInfo).port}`, token: "nbt_x.y", timeoutMs: 200 });
    await assert.rejects(nb.api.GET("/api/status/"), (e: unknown) => e instanceof NetBoxError && e.code === "netbox-unreachable");
    assert.equal(n, 1);
  } finally {
    slow.closeAllConnections();
    await new Promise<void>((r) => slow.close(() => r()));
  }
});

test("a list's next page whose connection drops is read once more; the whole list comes back", async () => {
  seen.length = 0;
  drops = 1;
  dropOnly = "/api/dcim/devices/?offset=1";
  try {
    const nb = createNetBox({ url, token: "nbt_x.y" });
    const all = await listAll(nb.api.GET("/api/dcim/devices/") as never, "GET /api/dcim/devices/", nb);
    assert.deepEqual(all, [{ id: 1 }, { id: 2 }]);
    assert.deepEqual(seen, ["GET /api/dcim/devices/", "GET /api/dcim/devices/?offset=1", "GET /api/dcim/devices/?offset=1"]);
  } finally {
    dropOnly = undefined;
  }
});
