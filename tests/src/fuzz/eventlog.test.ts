/** The event log fuzz targets with a small number of inputs, as part of the normal test run. */
import { test } from "node:test";
import { fuzzEventlog, fuzzUefi } from "./eventlog.js";

const RUNS = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 3000);

test(`event log parser, replay, interpretation and policy survive ${RUNS} random and mutated logs`, () => {
  fuzzEventlog(RUNS);
});

test(`UEFI signature lists, variable data and device paths survive ${RUNS} random and mutated inputs`, () => {
  fuzzUefi(RUNS);
});
