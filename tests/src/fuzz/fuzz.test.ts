/** The fuzz targets with a small number of inputs, as part of the normal test run. */
import { test } from "node:test";
import { fuzzTpm } from "./tpm.js";
import { fuzzX509 } from "./x509.js";

const RUNS = Number(process.env["FLEETD_FUZZ_RUNS"] ?? 5000);

test(`TPM structure decoders survive ${RUNS} random and mutated inputs`, () => {
  fuzzTpm(RUNS);
});

test(`x509 readers (certificates, requests, PEM, summaries) survive ${RUNS} random and mutated inputs`, () => {
  fuzzX509(RUNS);
});
