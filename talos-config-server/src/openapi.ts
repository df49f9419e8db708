/**
 * talos-config-server's two HTTP API documents, built from the zod schemas the server parses with and builds its
 * answers from (`@fleetd/platform/http` openApiDocument) plus the route table below: the public attestation and
 * config API (openapi.yaml, served at GET /openapi.yaml) and the replicas' internal API (openapi-internal.yaml,
 * on the internal listener only). `pnpm -s openapi` writes both files (openapiWrite.ts); openapi.test.ts fails
 * when a committed file differs from what this module produces, so the documents cannot drift from the code.
 */
import { z } from "zod";
import { openApiYaml, type ApiSpec, type ResponseSpec } from "@fleetd/platform/http";
import {
  CertifiedKey,
  ChallengeRequest,
  ChallengeResponse,
  Claims,
  Confirm,
  ConfirmResponseBody,
  Evidence,
  EvidenceIssued,
  EvidenceResponse,
  ModeSchema,
  PassNone,
  PcrValue,
  ReasonMessage,
  REFUSAL_ERRORS,
  RefusalBody,
  RenewChallengeRequest,
  RenewChallengeResponse,
  RenewConfirm,
  RenewConfirmResponse,
  RenewEvidence,
  RenewEvidenceResponse,
  PcrBankSelection,
  Tpm12ChallengeRequest,
  Tpm12ChallengeResponse,
  Tpm12Evidence,
  UnavailableRefusal,
  WrappedInstallCode,
} from "@fleetd/platform/protocol";
import { Health, Readiness } from "@fleetd/platform/service";
import { CONFIG_FETCH_ERRORS, ConfigFetchError, ConfigFetchQuery, InternalError } from "./configFetch.js";
import { PEER_SIGNATURE, PeerRequestHeaders, PeerResponseSignature } from "./ha/peerAuth.js";
import { IssuedBody, IssueErrorBody, ISSUE_PATH, IssueRequestBody, IssueResponseBody } from "./ha/wire.js";

/** The files, relative to the repository root. */
export const OPENAPI_FILE = "talos-config-server/openapi.yaml";
export const INTERNAL_OPENAPI_FILE = "talos-config-server/openapi-internal.yaml";
const GENERATED_BY = "`pnpm -s openapi` from talos-config-server/src/openapi.ts and the zod schemas it names";

/** A multi-line description: one string per line. */
const lines = (...ls: string[]) => ls.join("\n") + "\n";
const json = (s: z.ZodType) => ({ "application/json": s });

type RefusalError = (typeof REFUSAL_ERRORS)[number];
/** A refusal whose `error` is one of `errors` (the status says which). */
const refusalOf = (...errors: [RefusalError, ...RefusalError[]]) => RefusalBody.extend({ error: errors.length === 1 ? z.literal(errors[0]) : z.enum(errors) });
type FetchErrorName = (typeof CONFIG_FETCH_ERRORS)[number];
const fetchErrorOf = (...errors: [FetchErrorName, ...FetchErrorName[]]) => ConfigFetchError.extend({ error: errors.length === 1 ? z.literal(errors[0]) : z.enum(errors) });

/** A required parameter; its description is its schema's. */
const parameter = (name: string, where: "query" | "header", schema: z.ZodType) => {
  const description = z.globalRegistry.get(schema)?.description;
  return { name, in: where, required: true, ...(description ? { description } : {}), schema };
};

const retryAfter = (description: string) => ({ "Retry-After": { description, schema: z.number().int().min(1) } });

const refusal = (description: string, ...errors: [RefusalError, ...RefusalError[]]): ResponseSpec => ({ description, content: json(refusalOf(...errors)) });

/** The answers every protocol step may give, whatever it is about (named responses below). */
const ANY_STEP_ERRORS = {
  "413": "TooLarge",
  "415": "UnsupportedEncoding",
  "429": "RateLimited",
  "500": "Internal",
  "503": "DependencyUnavailable",
} as const;

/** The answers every protocol step after the challenge may give besides its 200. */
const STEP_ERRORS = {
  "400": "BadRequest",
  "403": "Refused",
  "404": "UnknownSession",
  "409": "Conflict",
  "410": "Gone",
  ...ANY_STEP_ERRORS,
} as const;

/** The public listener: the attestation protocol, the one-time Talos config, health, metrics and this document. */
export const PUBLIC_API: ApiSpec = {
  info: {
    title: "fleetd talos-config-server",
    version: "1.0.0",
    summary: "TPM 2.0 attestation of bare-metal machines (and the TPM 1.2 identity proof for intake and wipe), LDevID/LAK issuance, install codes and the one-time Talos config.",
    description: lines(
      "The attestation protocol v1 (challenge → evidence → confirm) that fleetd's tink-action runs from HookOS, and",
      "the one-time Talos configuration fetched by Talos with the install code the TPM unwrapped.",
      "",
      "* Every request body is a strict JSON object: unknown properties are refused (400 `request.shape`).",
      "* Binary fields a machine sends are standard base64 (RFC 4648 §4); the padding `=` is optional (the server",
      "  decodes both). Each has an upper bound in bytes; the string may be at most `ceil(bytes / 3) * 4 + 4`",
      "  characters. The server counts lengths in UTF-16 code units. Binary fields the server sends are canonical",
      "  padded base64.",
      "* Everything a machine says about itself is a claim until the TPM evidence vouches for it.",
      "* A refusal names every failed check and the evidence it concerns:",
      "  `{ error, reasons: [{ check, detail, pcr?, event? }] }` — the same reasons NetBox's journal shows.",
      "* No step signs anything before every check and every gate passed; a refused step leaves nothing issued.",
      "",
      "This document is generated from the server's own zod schemas (`pnpm -s openapi`) and served by the server",
      "itself at `GET /openapi.yaml`; the end-to-end tests validate every request and response the server really",
      "exchanges against it (tests/src/attestation/openapi.it.test.ts). The replicas' internal API (HA) is not",
      "served on this listener (404): it has a listener of its own, mutual TLS only, documented in",
      "openapi-internal.yaml.",
    ),
    license: { name: "Apache-2.0", identifier: "Apache-2.0" },
  },
  tags: [
    { name: "attestation", description: "The three protocol steps. One session per challenge; each step is single use." },
    { name: "renewal", description: "Runtime attestation of an installed node and LDevID renewal (node agent `tink-action renew`)." },
    { name: "talos", description: "The one-time Talos machine configuration." },
    { name: "operations", description: "Health, metrics and this document." },
  ],
  operations: [
    {
      method: "post",
      path: "/v1/attest/challenge",
      tags: ["attestation"],
      operationId: "challenge",
      summary: "Step 1 — present claims, EKs and a fresh AK; receive a nonce and one credential per approved EK.",
      description: lines(
        "The server computes each EK's binding (SHA-256 of the canonical SubjectPublicKeyInfo) and finds the node",
        "approving it. An EK no node approves is recorded as pending (listed by `fleetd pending`) and refused with",
        "`error: pending`. Every approved EK must be presented and, unless the node says `chain: false`, its",
        "certificate must chain to the manufacturer CA store. Serial and UUID claims must match the inventory",
        "(the UUID recorded at the node's first pass), every identity field must hold what its account wrote",
        "(NetBox change log), and the AK must be fresh (an AK Name seen before is refused). Until the credential",
        "is activated the caller has shown nothing but public EK material: refusals name no inventory value.",
      ),
      requestBody: ChallengeRequest,
      responses: {
        "200": { description: "A session with a single-use nonce and one MakeCredential blob per approved EK.", content: json(ChallengeResponse) },
        "400": "BadRequest",
        "403": refusal(
          lines(
            "`pending`: no node approves the presented EKs (recorded for an operator). `refused`: a check failed",
            "(EK missing or not chaining, claims not matching, AK attributes, AK reused, EKs of different nodes).",
          ),
          "pending",
          "refused",
        ),
        ...ANY_STEP_ERRORS,
      },
    },
    {
      method: "post",
      path: "/v1/attest/evidence",
      tags: ["attestation"],
      operationId: "evidence",
      summary: "Step 2 — activated secrets, the session-bound quote, the event log, the certified LDevID and LAK.",
      description: lines(
        "The session's nonce is spent at the first evidence, whatever the outcome. Checks: credential",
        'activation per approved EK, the quote (`extraData = SHA-256("fleetd/quote/v1" ‖ nonce ‖ sessionId ‖',
        'claimsHash)`), both TPM2_Certify (`"fleetd/certify/ldevid/v1"`, `"fleetd/certify/lak/v1"`), key',
        "attributes, the event log replayed against the quoted PCRs and judged by the provisioning profile; then",
        "every gate on a fresh read of NetBox by device ID (status, desired_action, EK set, every attributed",
        "field, the recorded UUID, the switch port — a node with no cable recorded gets nothing released unless",
        "its nodes-file entry waives it). Only then are certificates issued, and only where due: never in wipe",
        "mode or to a `decommissioning`/`offline` device; in attest mode only when the LDevID is due for renewal.",
        "No verdict is written until activation verified.",
      ),
      requestBody: Evidence,
      responses: {
        "200": { description: "Evidence and every gate passed; the LDevID and LAK certificates and the CA bundle.", content: json(EvidenceResponse) },
        ...STEP_ERRORS,
      },
    },
    {
      method: "post",
      path: "/v1/attest/tpm12/challenge",
      tags: ["attestation"],
      operationId: "tpm12Challenge",
      summary: "TPM 1.2 step 1 — claims, the EK's TPM_PUBKEY (and certificate), a fresh AIK; receive a nonce and the privacy-CA credential.",
      description: lines(
        'The TPM 1.2 variant, for nodes whose nodes-file `tpm` is "1.2" only, and for modes `intake` and `wipe` only',
        "(any other mode is refused, `tpm12.mode`): a TPM 1.2 machine is never issued anything — no LDevID, LAK,",
        "install code or Talos config. The EK binding is computed from the TPM_PUBKEY (SHA-256 of the canonical",
        "SubjectPublicKeyInfo, as for TPM 2.0); the node must approve exactly that EK and, unless `chain: false`,",
        "its certificate must certify the same key and chain to the manufacturer CA store. The AIK's identityBinding",
        "must verify (TPM_IDENTITY_CONTENTS with fleetd's label), and the AIK must be fresh. The credential is a",
        "TPM_ASYM_CA_CONTENTS {session key = a 32-byte secret, SHA-1 of the AIK's TPM_PUBKEY} encrypted to the EK",
        'with RSAES-OAEP SHA-1, label "TCPA": only TPM_ActivateIdentity in that EK\'s TPM, with that AIK loaded,',
        "recovers the secret. Refusals are journalled like the TPM 2.0 ones.",
      ),
      requestBody: Tpm12ChallengeRequest,
      responses: {
        "200": { description: "A session with a single-use nonce and the credential for the approved EK.", content: json(Tpm12ChallengeResponse) },
        "400": "BadRequest",
        "403": refusal(
          lines(
            "`pending`: no node approves the EK (recorded for an operator). `refused`: a check failed (the node is",
            "not recorded with a TPM 1.2, a mode other than intake or wipe, EK not chaining, claims not matching,",
            "identityBinding, AIK reused, the Workflow gate).",
          ),
          "pending",
          "refused",
        ),
        ...ANY_STEP_ERRORS,
      },
    },
    {
      method: "post",
      path: "/v1/attest/tpm12/evidence",
      tags: ["attestation"],
      operationId: "tpm12Evidence",
      summary: "TPM 1.2 step 2 — the recovered secret, a TPM_Quote bound to the session, the SHA-1 event log.",
      description: lines(
        "The session's nonce is spent at the first evidence, whatever the outcome (a TPM 2.0 session is refused here,",
        "`session.tpm`, and a TPM 1.2 session at `/v1/attest/evidence`). Checks: the secret (constant-time), the",
        "AIK's signature over TPM_QUOTE_INFO rebuilt from the quoted TPM_PCR_COMPOSITE and `externalData` = the",
        'first 20 bytes of SHA-256("fleetd/tpm12/quote/v1" ‖ nonce ‖ sessionId ‖ claimsHash), the event log replayed',
        "against the quoted SHA-1 PCRs and judged by the `hookos-tpm12` profile; then the gates on a fresh read of",
        "NetBox (as for TPM 2.0, and the node still recorded with a TPM 1.2) and the Workflow gate. A pass records",
        "the MACs and the boot MAC as proven (intake) and releases nothing; there is no confirm.",
      ),
      requestBody: Tpm12Evidence,
      responses: {
        "200": { description: "Evidence and every gate passed; nothing is issued.", content: json(PassNone) },
        ...STEP_ERRORS,
      },
    },
    {
      method: "post",
      path: "/v1/attest/confirm",
      tags: ["attestation"],
      operationId: "confirm",
      summary: "Step 4 — sign the confirm digest with the LDevID just issued; provision receives the wrapped install code.",
      description: lines(
        "The signature is TPM2_Sign by the new LDevID over",
        '`SHA-256("fleetd/confirm/v1" ‖ sessionId ‖ SHA-256(LDevID cert) ‖ SHA-256(LAK cert))`. Single use.',
        "`intake` triggers admission; `provision` returns the install code — 32 random bytes wrapped by",
        "MakeCredential to the first approved EK for Name(AK); the Talos code is the lowercase hex of the",
        "unwrapped bytes. The server keeps only SHA-256 of it.",
      ),
      requestBody: Confirm,
      responses: {
        "200": { description: "Confirmed. `installCode` is present exactly when `mode` is `provision`.", content: json(ConfirmResponseBody) },
        ...STEP_ERRORS,
      },
    },
    {
      method: "post",
      path: "/v1/renew/challenge",
      tags: ["renewal"],
      operationId: "renewChallenge",
      summary: "Renewal step 1 — present the current LDevID and LAK certificates; receive a nonce and the PCRs to quote.",
      description: lines(
        "Possession of the current LDevID is proven by a signed challenge (TPM2_Sign by the LDevID key at the",
        "evidence step), not by TLS client authentication: a site terminates TLS where it likes, and the node",
        "agent's TLS stack would need a TPM provider. Both certificates must chain to fleetd's CA bundle, be valid",
        "now, be exactly what fleetd issued, and be the node's current generation (the latest LDevID that is not",
        "void; an unconfirmed renewal is void) with the LAK of the same generation. The node is the one the issued",
        "record names, re-read from NetBox: `decommissioning` or `offline`, a class without a runtime profile, an",
        "identity field not written by its account, or a quarantined worker → refused. Until possession is",
        "proven, refusals are journalled at most once per window per device.",
      ),
      requestBody: RenewChallengeRequest,
      responses: {
        "200": { description: "A session with a single-use nonce (5 minutes) and the PCRs (per bank) the node's class profile needs.", content: json(RenewChallengeResponse) },
        "400": "BadRequest",
        "403": refusal("A certificate does not chain, is not fleetd's record, is not the current generation; or the node may not renew (status, class, quarantine).", "refused"),
        "404": refusal("Renewal is not enabled on this server (`renew.disabled`).", "refused"),
        ...ANY_STEP_ERRORS,
      },
    },
    {
      method: "post",
      path: "/v1/renew/evidence",
      tags: ["renewal"],
      operationId: "renewEvidence",
      summary: "Renewal step 2 — the LAK quote, the event log and the LDevID's possession signature: the runtime verdict.",
      description: lines(
        'Checked first: `signature`, TPM2_Sign by the current LDevID over SHA-256("fleetd/renew/possession/v1" ‖ nonce ‖',
        "sessionId ‖ SHA-256(quote.message)); without it nothing changes (no verdict is recorded). Then the quote by",
        'the LAK (restricted signing key; `extraData = SHA-256("fleetd/renew/quote/v1" ‖ nonce ‖ sessionId)`) over',
        "at least the PCRs the challenge named, the event log replayed against them, and the node class's profile",
        "(site configuration `runtime.profiles`; default talos → talos, ubuntu → ubuntu): the runtime verdict,",
        "recorded in the state store and in NetBox (`runtime_verdict`, `runtime_attested_at`, `runtime_passed_at`).",
        "A pass lifts fleetd's cordon of the node; with `purpose: renew` and the LDevID past two thirds of its",
        "lifetime it carries the next generation's certificates (CN `<node>.g<n+1>`) for the same TPM keys, which",
        "become current only at the confirm. A failure is a 403 naming the failed checks and events: a worker is",
        "quarantined (renewal refused until an operator's passing `attest`, its Node cordoned), a control plane is",
        "alerted on (journal, `fleetd_quarantine_alerts_total`, an error log line) and neither cordoned nor latched.",
        "Nothing is ever signed on a failed quote. The nonce is spent at the first evidence, whatever the outcome.",
      ),
      requestBody: RenewEvidence,
      responses: {
        "200": { description: "The runtime verdict passed; `issued: new` carries the next generation's certificates and the CA bundle.", content: json(RenewEvidenceResponse) },
        ...STEP_ERRORS,
      },
    },
    {
      method: "post",
      path: "/v1/renew/confirm",
      tags: ["renewal"],
      operationId: "renewConfirm",
      summary: "Renewal step 3 — the LDevID signs the new certificates; they become the node's current generation.",
      description: lines(
        'TPM2_Sign by the LDevID over SHA-256("fleetd/renew/confirm/v1" ‖ sessionId ‖ SHA-256(new LDevID DER) ‖',
        "SHA-256(new LAK DER)). Single use. Only now is the new generation current (state store, NetBox",
        "`ldevid_serial`, `ldevid_cn`, `ldevid_expiry`); until then the old one stays current, and an issuance that is",
        "never confirmed (a lost answer) stays void and the node keeps renewing with its old certificate.",
      ),
      requestBody: RenewConfirm,
      responses: {
        "200": { description: "Confirmed: the new generation is current.", content: json(RenewConfirmResponse) },
        ...STEP_ERRORS,
      },
    },
    {
      method: "get",
      path: "/talos/config",
      tags: ["talos"],
      operationId: "talosConfig",
      summary: "The node's one-time Talos machine configuration (Talos `talos.config=…?uuid=${uuid}&code=${code}`).",
      description: lines(
        "**At fetch time the install code is a bearer token**: whoever presents it (with the node's UUID, which is",
        "public) receives the configuration, which holds the node's bootstrap token and LDevID seed. Serve this",
        "over HTTPS only (plain HTTP only in `mode: lab`).",
        "",
        "The configuration is looked up by SHA-256 of the code's 32 bytes, claimed before a byte is sent, and",
        "deleted once the response completed (a second fetch is 404); an aborted response releases the claim.",
        "Never 204 or an empty 200. The literal `${code}` (Talos found no install code in META key 0x0b) is a",
        "400 that counts against nothing. Every other attempt is charged to the client address (never the UUID)",
        "before the lookup, in the state all replicas share, and refunded when the code was right; past the limit",
        "the address gets 429. The device must still be `staged` in NetBox: otherwise (decommissioned after the",
        "confirm, say) its install codes are void and the answer is 410. The code never appears in a log line.",
      ),
      parameters: (["uuid", "code"] as const).map((name) => parameter(name, "query", ConfigFetchQuery.shape[name])),
      responses: {
        "200": { description: "The Talos machine configuration (YAML), sent once.", content: { "application/yaml": z.string().min(1) } },
        "400": {
          description: "`no-code`: the URL holds the literal `${code}`. `bad-request`: uuid or code malformed (counts against the address).",
          content: json(fetchErrorOf("no-code", "bad-request")),
        },
        "404": { description: "No configuration for this code and UUID (wrong, expired or already fetched); counts against the address.", content: json(fetchErrorOf("unknown-code")) },
        "410": { description: "`gone`: the code was right, but the device is no longer `staged` in NetBox; its install codes are void.", content: json(fetchErrorOf("gone")) },
        "429": { description: "Too many wrong codes from this source address; try later.", content: json(fetchErrorOf("rate-limited")) },
        "500": {
          description:
            "`sealed-config`: the stored configuration does not open with the code presented (altered, or written by an older fleetd); `empty-config`: the stored configuration is empty; neither is served. Or an internal error.",
          content: json(InternalError),
        },
        "503": {
          description:
            "NetBox could not be read to check the device is still `staged`, or does not hold it yet (fleetd's own `staged` is still being delivered after an outage); the code was not spent (Talos retries).",
          headers: retryAfter("Seconds to wait before retrying."),
          content: json(UnavailableRefusal),
        },
      },
    },
    {
      method: "get",
      path: "/healthz",
      tags: ["operations"],
      operationId: "health",
      summary: "Liveness.",
      responses: { "200": { description: "The server is up.", content: json(Health) } },
    },
    {
      method: "get",
      path: "/readyz",
      tags: ["operations"],
      operationId: "ready",
      summary: "Readiness — NetBox answers, and (single replica) the CA token is present.",
      description: lines(
        "`netbox`: `GET /api/status/` answered 200 within 3 s; `signer` (without `ha`): the PKCS#11 token is",
        "present and the signer neither closed nor disabled by a refused PIN. Checked at most every 5 s.",
        "While not ready the attestation steps answer 503 `unavailable` when they reach the missing dependency.",
      ),
      responses: {
        "200": { description: "Every check passed.", content: json(Readiness) },
        "503": { description: "A check failed; each failed check carries a detail.", content: json(Readiness) },
      },
    },
    {
      method: "get",
      path: "/metrics",
      tags: ["operations"],
      operationId: "metrics",
      summary: "Prometheus metrics (text exposition format 0.0.4).",
      description: lines(
        "`fleetd_attestation_steps_total{step,outcome}` (outcome `ok` or the refusal's error),",
        "`fleetd_attestation_step_seconds{step}`, `fleetd_talos_config_fetches_total{outcome}`,",
        "`fleetd_runtime_verdicts_total{verdict,profile}`, `fleetd_quarantines_total{profile}`,",
        "`fleetd_quarantine_alerts_total{profile}` and, in the server process, `fleetd_attestation_pending_eks`.",
      ),
      responses: { "200": { description: "Metrics.", content: { "text/plain": z.string().min(1) } } },
    },
    {
      method: "get",
      path: "/openapi.yaml",
      tags: ["operations"],
      operationId: "openapi",
      summary: "This document.",
      responses: { "200": { description: "The OpenAPI 3.1 document.", content: { "application/yaml": z.string().min(1) } } },
    },
  ],
  components: {
    responses: {
      RateLimited: refusal(
        lines(
          "`rate-limited` (check `request.rate`): too many attestation requests from this client address (the budget is",
          "kept in the state every replica shares; behind `server.trustedProxies` the forwarded client address counts).",
        ),
        "rate-limited",
      ),
      BadRequest: refusal(
        lines(
          "The body is not valid JSON (`request.json`), could not be read (`request.body`), does not match the schema",
          "(`request.shape`, one reason per issue, at most 10), or holds a TPM structure that does not parse",
          "(`<field>.parse`).",
        ),
        "bad-request",
      ),
      Refused: refusal("A check or gate failed; nothing was issued. The reasons name each failed check.", "refused"),
      UnknownSession: refusal("No such session (expired, used, or never issued) — `session.unknown`.", "expired"),
      Conflict: refusal("The step was already taken for this session (`nonce.reused`, `confirm.replayed`, `confirm.state`).", "refused"),
      Gone: refusal("The session expired. Reserved; this version answers 404 or 409 instead.", "expired"),
      TooLarge: refusal("The body is larger than the server's limit (`request.size`; 2 MiB by default).", "bad-request"),
      UnsupportedEncoding: refusal("The body's charset or content encoding is not supported (`request.encoding`); send UTF-8 JSON.", "bad-request"),
      DependencyUnavailable: {
        description: lines(
          "A dependency is down: NetBox (`netbox-unavailable`: it did not answer or answered 5xx), the CA signer",
          "(`signer-unavailable`: the token is gone, or under HA no replica holds the `fleetd-ca-signer` Lease or",
          "the forward to it failed), or a Kubernetes API server (`kubernetes-unavailable`: Tinkerbell's objects,",
          "the workload cluster's token Secrets); or NetBox does not yet hold what fleetd recorded for this node",
          "(`netbox-writes-pending`: its queued writes — the outbox — are being delivered after an outage, and the",
          "gates never read a NetBox that is behind); or another request is working on the same session right now",
          "(`session-busy`); or the server is working on as many protocol requests as it takes at once and this one",
          "waited its longest for a turn (`server-busy`: its body was not read). Nothing was spent: the session is usable again until it expires, so send **the same",
          "request** again after `Retry-After` seconds. A step the server had already completed answers the same",
          "request again with its answer (a lost response is never a lost step). The node's journal says why when",
          "the CA signer could not sign.",
        ),
        headers: retryAfter("Seconds to wait before retrying the same request."),
        content: json(UnavailableRefusal),
      },
      Internal: { description: "An internal error; no stack trace, nothing issued.", content: json(InternalError) },
    },
    schemas: {
      Mode: ModeSchema,
      Claims,
      ChallengeRequest,
      ChallengeResponse,
      CertifiedKey,
      PcrValue,
      Evidence,
      EvidenceResponse,
      EvidenceIssued,
      PassNone,
      Tpm12ChallengeRequest,
      Tpm12ChallengeResponse,
      Tpm12Evidence,
      Confirm,
      ConfirmResponse: ConfirmResponseBody,
      RenewChallengeRequest,
      RenewChallengeResponse,
      PcrBankSelection,
      RenewEvidence,
      RenewEvidenceResponse,
      RenewConfirm,
      RenewConfirmResponse,
      WrappedInstallCode,
      Reason: ReasonMessage,
      Refusal: RefusalBody,
      Unavailable: UnavailableRefusal,
      Readiness,
      ConfigFetchError,
      InternalError,
    },
  },
};

/** The replicas' internal listener (`server.ha`): the forwarded issuance and nothing else. */
export const INTERNAL_API: ApiSpec = {
  info: {
    title: "fleetd talos-config-server — internal API (between HA replicas)",
    version: "1.0.0",
    summary: "A follower's forwarded issuance, signed by the replica that holds the CA signer Lease.",
    description: lines(
      "Served only with `server.ha`, and only on the replicas' own listener (`server.ha.internal.listen`, default",
      "port 9443) — never on the public listener of openapi.yaml, which answers 404 for these paths.",
      "",
      "* **Mutual TLS, and nothing else**: TLS 1.3; the handshake completes only with a client certificate that",
      "  chains to the peer CA (`server.ha.internal.tls.caFile`); a client without one, or with one from another",
      "  CA, is refused before any HTTP is read (nothing is issued). The follower verifies the leader's certificate",
      "  against the same CA and its name against the host of the URL the leader published.",
      "* **Then the peer MAC** (defence in depth): every request is MACed with the replicas' shared secret and",
      "  bound to its target replica; every answer is MACed over the request's nonce.",
      "* Never called by machines; use a CA for the replicas only (every certificate it issues may ask for",
      "  issuance).",
      "",
      "Generated from the server's own zod schemas (`pnpm -s openapi`). The end-to-end tests check the exchanges",
      "against this document (tests/src/ha/replicas.it.test.ts). This listener does not serve the document itself.",
    ),
    license: { name: "Apache-2.0", identifier: "Apache-2.0" },
  },
  tags: [
    {
      name: "internal",
      description: lines(
        "Between replicas of one HA deployment only (`server.ha`); never called by machines. Route it only on the",
        "replicas' internal network.",
      ),
    },
  ],
  operations: [
    {
      method: "post",
      path: ISSUE_PATH,
      tags: ["internal"],
      operationId: "internalIssue",
      summary: "HA — a follower's forwarded issuance, signed by the replica holding the `fleetd-ca-signer` Lease.",
      description: lines(
        "Only the leader of the `fleetd-ca-signer` Lease opens the CA token and signs; every other replica sends",
        "the issuance here, to the URL the leader publishes on the Lease (annotation `fleetd.io/internal-url`).",
        "The protocol's checks and gates all ran on the follower before; this endpoint only signs.",
        "",
        "Authentication, twice. First the TLS handshake of the internal listener (see the document's description):",
        "no client certificate from the peer CA, no HTTP at all. Then a secret shared by the replicas",
        "(`server.ha.peerSecretFile`, ≥ 32 bytes).",
        '`x-fleetd-peer-signature` = hex HMAC-SHA256(secret, "fleetd-peer-request-v2\\n" ‖ "POST\\n" ‖',
        '"/internal/v1/issue\\n" ‖ target ‖ "\\n" ‖ timestamp ‖ "\\n" ‖ nonce ‖ "\\n" ‖ hex SHA-256(body bytes)),',
        "where `target` (header `x-fleetd-peer-target`) is the receiving replica's identity: another replica",
        "refuses it. The timestamp must be within 30 s of the leader's clock and a nonce is accepted once by the",
        "whole fleet (recorded in the shared state). MACs are compared in constant time. The answer carries",
        "`x-fleetd-peer-signature` = hex HMAC-SHA256(secret,",
        '"fleetd-peer-response-v1\\n" ‖ nonce ‖ "\\n" ‖ status ‖ "\\n" ‖ hex SHA-256(answer bytes)); the follower',
        "uses nothing from an answer whose MAC does not verify.",
      ),
      parameters: Object.entries(PeerRequestHeaders.shape).map(([name, schema]) => parameter(name, "header", schema)),
      requestBody: IssueRequestBody,
      responses: {
        "200": {
          description: "Signed. The LDevID and LAK certificates and the CA bundle.",
          headers: { [PEER_SIGNATURE]: { required: true, schema: PeerResponseSignature } },
          content: json(IssueResponseBody),
        },
        "400": "InternalRefusal",
        "401": "InternalRefusal",
        "413": "InternalRefusal",
        "500": "InternalRefusal",
        "503": "InternalRefusal",
      },
    },
  ],
  components: {
    responses: {
      InternalRefusal: {
        description: lines(
          "`peer-auth` (401: MAC missing or wrong, signed for another replica, timestamp outside ±30 s, nonce replayed), `bad-request` (400/413),",
          "`not-leader` (503: this replica does not hold the Lease), `signer-unavailable` (503: the token cannot be",
          "opened), `internal` (500). Nothing was signed.",
        ),
        content: json(IssueErrorBody),
      },
    },
    schemas: {
      InternalIssueRequest: IssueRequestBody,
      InternalIssued: IssuedBody,
      InternalIssueResponse: IssueResponseBody,
      InternalIssueError: IssueErrorBody,
    },
  },
};

let served: string | undefined;
/** openapi.yaml, as served at GET /openapi.yaml (built once per process). */
export const publicOpenApiYaml = (): string => (served ??= openApiYaml(PUBLIC_API, GENERATED_BY));
/** openapi-internal.yaml. */
export const internalOpenApiYaml = (): string => openApiYaml(INTERNAL_API, GENERATED_BY);
