import { strict as assert } from "node:assert";
import { test } from "node:test";
import { ParseError } from "@fleetd/verify/codec";
import { NetBoxError } from "../netbox/client.js";
import { Unavailable } from "../outage/outage.js";
import { CliUsageError } from "./common.js";
import { EXIT, EXIT_CODES_HELP, exitCodeOf } from "./exit.js";

test("EXIT: one code per meaning, 0 to 5; the help text lists each code with its name", () => {
  assert.deepEqual(Object.values(EXIT).sort(), [0, 1, 2, 3, 4, 5]);
  for (const [name, code] of Object.entries(EXIT)) assert.match(EXIT_CODES_HELP, new RegExp(`^  ${code}  ${name}: `, "m"), name);
});

test("exitCodeOf: usage errors 2, outages and the binary's unavailable classes 5 (before its usage classes), anything else 4", () => {
  assert.equal(exitCodeOf(new CliUsageError("--x is required")), EXIT.usage);
  assert.equal(exitCodeOf(new ParseError("truncated", "TPMS_ATTEST", 0, "need 4 bytes")), EXIT.internal, "not a usage class of this binary");
  assert.equal(exitCodeOf(new ParseError("truncated", "TPMS_ATTEST", 0, "need 4 bytes"), { usage: [ParseError] }), EXIT.usage);
  assert.equal(exitCodeOf(new Unavailable("netbox-unavailable", "GET /api/status/")), EXIT.unavailable);
  const down = new NetBoxError("netbox-unreachable", "GET /api/dcim/devices/", undefined, "ECONNREFUSED");
  assert.equal(exitCodeOf(down, { usage: [NetBoxError] }), EXIT.unavailable, "an outage is not a usage error even when its class is listed");
  assert.equal(exitCodeOf(new NetBoxError("netbox-http", "PATCH", 403, "forbidden"), { usage: [NetBoxError] }), EXIT.usage);
  assert.equal(exitCodeOf(new ParseError("truncated", "TPMS_ATTEST", 0, "need 4 bytes"), { unavailable: [ParseError] }), EXIT.unavailable);
  assert.equal(exitCodeOf(new TypeError("x is undefined")), EXIT.internal);
  assert.equal(exitCodeOf("a string"), EXIT.internal);
});
