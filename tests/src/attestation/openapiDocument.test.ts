/**
 * The generated API documents without a server: Ajv (JSON Schema 2020-12, strict) compiles every schema of both,
 * and the document agrees with the zod schemas the server parses with on bodies at the base64 padding rule and a
 * few other edges. The real exchanges are judged in openapi.it.test.ts.
 */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { Confirm, RenewChallengeRequest, RenewEvidence, Tpm12Evidence } from "@fleetd/platform/protocol";
import { IssueRequestBody } from "@fleetd/talos-config-server/ha/wire";
import { INTERNAL_OPENAPI_FILE, OPENAPI_FILE, OpenApiValidator } from "./openapi.js";

test("both documents compile under strict Ajv and list the operations the route table names", () => {
  const pub = OpenApiValidator.fromFile(OPENAPI_FILE);
  assert.deepEqual(
    pub.operations().map((o) => `${o.method} ${o.path}`),
    ["post /v1/attest/challenge", "post /v1/attest/evidence", "post /v1/attest/tpm12/challenge", "post /v1/attest/tpm12/evidence", "post /v1/attest/confirm", "post /v1/renew/challenge", "post /v1/renew/evidence", "post /v1/renew/confirm", "get /talos/config", "get /healthz", "get /readyz", "get /metrics", "get /openapi.yaml"],
  );
  const internal = OpenApiValidator.fromFile(INTERNAL_OPENAPI_FILE);
  assert.deepEqual(internal.operations(), [{ method: "post", path: "/internal/v1/issue" }]);
});

test("base64 padding: the document accepts what the server's zod schemas accept, padded or not, and refuses the same", () => {
  const doc = OpenApiValidator.fromFile(OPENAPI_FILE);
  const confirm = (signature: unknown) => ({ sessionId: "a".repeat(32), signature });
  const tpm12 = (secret: unknown) => ({ sessionId: "s", secret, quote: { pcrComposite: "AAE", signature: "AAE=" }, eventLog: "" });
  for (const v of ["AAE=", "AAE", "AA==", "AA", "", "AAAA", "AA=A", "A===", "AAE-", 7, "A".repeat(1372), "A".repeat(1373)]) {
    const z1 = Confirm.safeParse(confirm(v)).success;
    assert.equal(doc.requestValueProblems("post", "/v1/attest/confirm", confirm(v)).length === 0, z1, `confirm signature ${JSON.stringify(v).slice(0, 20)}: zod says ${z1}`);
    const z2 = Tpm12Evidence.safeParse(tpm12(v)).success;
    assert.equal(doc.requestValueProblems("post", "/v1/attest/tpm12/evidence", tpm12(v)).length === 0, z2, `tpm12 secret ${JSON.stringify(v).slice(0, 20)}: zod says ${z2}`);
  }
  assert.equal(Confirm.safeParse(confirm("AAE")).success, true, "unpadded base64 is accepted by the server");
});

test("the internal document agrees with the internal request schema on edges", () => {
  const doc = OpenApiValidator.fromFile(INTERNAL_OPENAPI_FILE);
  const body = (o: Record<string, unknown>) => ({ node: "n1", generation: 1, ldevid: "00", lak: "00", ...o });
  for (const o of [{}, { generation: 0 }, { generation: 1.5 }, { ldevid: "0" }, { ldevid: "AB" }, { node: "" }, { serials: { ldevid: "01", lak: "02" } }, { serials: { ldevid: "01" } }, { extra: 1 }]) {
    const byZod = IssueRequestBody.safeParse(body(o)).success;
    assert.equal(doc.requestValueProblems("post", "/internal/v1/issue", body(o)).length === 0, byZod, `${JSON.stringify(o)}: zod says ${byZod}`);
  }
});

test("renewal bodies: the document accepts what the server's zod schemas accept and refuses the same", () => {
  const doc = OpenApiValidator.fromFile(OPENAPI_FILE);
  const cert = Buffer.alloc(700, 3).toString("base64");
  const challenges: unknown[] = [
    { ldevidCertificate: cert, lakCertificate: cert, purpose: "renew" },
    { ldevidCertificate: cert, lakCertificate: cert, purpose: "attest" },
    { ldevidCertificate: cert, lakCertificate: cert, purpose: "provision" },
    { ldevidCertificate: cert, lakCertificate: cert },
    { ldevidCertificate: "A".repeat(5500), lakCertificate: cert, purpose: "renew" },
    { ldevidCertificate: cert, lakCertificate: cert, purpose: "renew", extra: true },
    { ldevidCertificate: "!!", lakCertificate: cert, purpose: "renew" },
  ];
  for (const b of challenges) {
    const z = RenewChallengeRequest.safeParse(b).success;
    assert.equal(doc.requestValueProblems("post", "/v1/renew/challenge", b).length === 0, z, `${JSON.stringify(b).slice(0, 80)}: zod says ${z}`);
  }
  const ev = { sessionId: "a".repeat(32), quote: { message: "AAE=", signature: "AAE=", pcrs: [{ bank: "sha256", pcr: 7, value: "ab".repeat(32) }] }, eventLog: "AAE=", signature: "AAE=" };
  for (const b of [ev, { ...ev, signature: undefined }, { ...ev, quote: { ...ev.quote, pcrs: [{ bank: "sha256", pcr: 7, value: "ab".repeat(20) }] } }, { ...ev, secrets: [] }]) {
    const z = RenewEvidence.safeParse(b).success;
    assert.equal(doc.requestValueProblems("post", "/v1/renew/evidence", b).length === 0, z, `${JSON.stringify(b).slice(0, 80)}: zod says ${z}`);
  }
});
