import { strict as assert } from "node:assert";
import { test } from "node:test";
import { setsValue, type ObjectChangeRecord } from "./changelog.js";

const change = (v: unknown): ObjectChangeRecord =>
  ({ id: 1, time: "t", user_name: "u", request_id: "r", action: "update", prechange_data: {}, postchange_data: { custom_fields: { ldevid_expiry: v } } }) as ObjectChangeRecord;

test("setsValue: a datetime written one way and read back as NetBox renders it is the same value; another instant is not", () => {
  const path = "custom_fields.ldevid_expiry";
  // as written by fleetd (toISOString) → as NetBox's REST API reads it back
  assert.equal(setsValue(change("2026-12-23T04:05:30.979Z"), path, "2026-12-23T04:05:30.979000Z"), true);
  assert.equal(setsValue(change("2026-12-23T04:05:30.000Z"), path, "2026-12-23T04:05:30Z"), true);
  assert.equal(setsValue(change("2026-12-23T04:05:30Z"), path, "2026-12-23T04:05:30+00:00"), true);
  assert.equal(setsValue(change("2026-12-23T04:05:30.979Z"), path, "2026-12-23T04:05:30.980000Z"), false);
  assert.equal(setsValue(change("2026-12-23T04:05:30.979001Z"), path, "2026-12-23T04:05:30.979000Z"), false, "microseconds count");
  assert.equal(setsValue(change("2026-12-23T04:05:30Z"), path, "2026-12-23T05:05:30Z"), false);
  // not datetimes: exact as before
  assert.equal(setsValue(change("0abc"), path, "0ABC"), false);
  assert.equal(setsValue(change(null), path, undefined), true);
});
