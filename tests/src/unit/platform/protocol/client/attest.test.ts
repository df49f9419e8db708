/** What the client quotes: every bank its event log carries, since the server requires the two to agree (issue 10). */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { EV } from "@fleetd/verify/eventlog";
import { EventLogWriter } from "@fleetd/testkit/eventlogWriter";
import { type HashAlgId, TPM_ALG } from "@fleetd/verify/tcg";
import { DEFAULT_QUOTE_SELECTION, quoteSelectionFor } from "@fleetd/platform/protocol/client";

const ALL16 = Array.from({ length: 16 }, (_, i) => i);
const log = (banks: HashAlgId[], format: "crypto-agile" | "sha1" = "crypto-agile") => new EventLogWriter(format, banks).add(0, EV.S_CRTM_VERSION, new Uint8Array(2)).bytes();

test("the client quotes PCRs 0–15 of every bank the log carries, in algorithm order", () => {
  assert.deepEqual(quoteSelectionFor(log([TPM_ALG.SHA384, TPM_ALG.SHA256, TPM_ALG.SHA512])), [TPM_ALG.SHA256, TPM_ALG.SHA384, TPM_ALG.SHA512].map((hash) => ({ hash, pcrs: ALL16 })));
  assert.deepEqual(quoteSelectionFor(log([TPM_ALG.SHA1, TPM_ALG.SHA256])), [TPM_ALG.SHA1, TPM_ALG.SHA256].map((hash) => ({ hash, pcrs: ALL16 })));
  assert.deepEqual(quoteSelectionFor(log([], "sha1")), [{ hash: TPM_ALG.SHA1, pcrs: ALL16 }]);
});

test("a log that does not parse gets the default SHA-256 selection (the server refuses the log itself)", () => {
  assert.deepEqual(quoteSelectionFor(new Uint8Array([1, 2, 3])), DEFAULT_QUOTE_SELECTION);
});
