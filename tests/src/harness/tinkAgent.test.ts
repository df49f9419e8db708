/**
 * The real-agent harness's pure parts: its arguments, its log parsing, and the Docker stream framing it strips
 * from action output (as tink-agent v0.25.0's docker runtime logs it: each read of the attach stream is one slog
 * JSON line's msg, bytes that are not UTF-8 turned into U+FFFD).
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { actionOutputOf, parseAgentLog, stripDockerStreamHeaders, tinkAgentArgs } from "./tinkAgent.js";

/** A Docker stream frame as the agent's JSON log carries it. */
function frame(stream: 1 | 2, payload: string): string {
  const n = Buffer.byteLength(payload);
  const len = [n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff];
  // Go's JSON encoder writes bytes that are not valid UTF-8 as U+FFFD, one per byte.
  const lenChars = len.map((b) => (b < 0x80 ? String.fromCharCode(b) : "\ufffd")).join("");
  return `${String.fromCharCode(stream)}\u0000\u0000\u0000${lenChars}${payload}`;
}

test("stripDockerStreamHeaders removes stdout and stderr frame headers, short and long payloads", () => {
  assert.equal(stripDockerStreamHeaders(frame(1, "hello\n") + frame(2, "oops\n")), "hello\noops\n");
  const long = "x".repeat(200) + "\n"; // a length byte >= 0x80
  assert.equal(stripDockerStreamHeaders(frame(1, long)), long);
  const longer = "y".repeat(5000); // a two-byte length
  assert.equal(stripDockerStreamHeaders(frame(2, longer)), longer);
  assert.equal(stripDockerStreamHeaders("no framing at all"), "no framing at all");
});

test("actionOutputOf joins a container's chunks cut anywhere (even inside a header) and skips the runtime's own messages", () => {
  const stream = frame(1, '{"ok":true}\n') + frame(2, "write-meta: done\n");
  const cut = 14; // inside the second frame's header
  const log = [
    JSON.stringify({ level: 0, msg: "starting Agent", version: "v0.25.0" }),
    JSON.stringify({ level: 0, msg: stream.slice(0, cut), container_name: "tinkerbell_write-meta_1" }),
    JSON.stringify({ level: 0, msg: stream.slice(cut), container_name: "tinkerbell_write-meta_1" }),
    JSON.stringify({ level: 0, msg: "Couldn't remove container", container_name: "tinkerbell_write-meta_1", error: "gone" }),
    JSON.stringify({ level: 0, msg: frame(1, "other\n"), container_name: "tinkerbell_wipe_2" }),
    "panic: not JSON",
  ].join("\n");
  const lines = parseAgentLog(log);
  assert.equal(lines.length, 5);
  assert.equal(lines[0]?.version, "v0.25.0");
  const out = actionOutputOf(lines);
  assert.deepEqual([...out], [["tinkerbell_write-meta_1", '{"ok":true}\nwrite-meta: done\n'], ["tinkerbell_wipe_2", "other\n"]]);
});

test("tinkAgentArgs: the agent's real flags; a bad agent ID or server address is refused before starting", () => {
  assert.deepEqual(tinkAgentArgs({ id: "02:00:5e:10:00:31", grpcServer: "127.0.0.1:42113", runtime: { kind: "docker", socket: "/run/lab/podman.sock" } }), [
    "--id", "02:00:5e:10:00:31", "--transport", "grpc", "--grpc-server", "127.0.0.1:42113",
    "--runtime", "docker", "--docker-socket", "/run/lab/podman.sock",
    "--attribute-detection=true", "--backoff-max-interval", "1s", "--log-level", "0",
  ]);
  assert.throws(() => tinkAgentArgs({ id: "02:00:5E:10:00:31", grpcServer: "127.0.0.1:1", runtime: { kind: "docker", socket: "/s" } }), /lowercase MAC/);
  assert.throws(() => tinkAgentArgs({ id: "02:00:5e:10:00:31", grpcServer: "http://127.0.0.1:1", runtime: { kind: "docker", socket: "/s" } }), /host:port/);
});
