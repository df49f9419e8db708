/**
 * NetBox webhook deliveries: signature, shape, freshness. A delivery is only a hint ("look at device N"):
 * the handler re-reads the device before acting, so nothing here is trusted beyond the device id and the
 * timestamp. Verification happens on the raw body bytes, before any JSON parsing.
 */
import { createHash, createHmac } from "node:crypto";
import { z } from "zod";
import { ctEqual } from "@fleetd/verify/crypto";
import { CodedError } from "../fleet/codedError.js";

export const WEBHOOK_REFUSALS = [
  "webhook-signature-missing",
  "webhook-signature-malformed",
  "webhook-signature-mismatch",
  "webhook-body-not-json",
  "webhook-body-shape",
  "webhook-body-stale",
  "webhook-body-future",
] as const;
export type WebhookRefusal = (typeof WEBHOOK_REFUSALS)[number];

export class WebhookError extends CodedError<WebhookRefusal> {
  override readonly name = "WebhookError";
}

/** NetBox: `X-Hook-Signature` = lowercase hex HMAC-SHA512(secret, exact body bytes). Constant-time compare. */
export function verifyHookSignature(rawBody: Uint8Array, header: string | string[] | undefined, secret: string): void {
  if (header === undefined || header === "") throw new WebhookError("webhook-signature-missing", "X-Hook-Signature header is missing");
  if (Array.isArray(header) || !/^[0-9a-fA-F]{128}$/.test(header)) {
    throw new WebhookError("webhook-signature-malformed", "X-Hook-Signature is not 128 hex digits (HMAC-SHA512)");
  }
  const expected = createHmac("sha512", Buffer.from(secret, "utf8")).update(rawBody).digest();
  if (!ctEqual(new Uint8Array(expected), new Uint8Array(Buffer.from(header, "hex")))) {
    throw new WebhookError("webhook-signature-mismatch", "X-Hook-Signature does not match the body");
  }
}

export function signHookBody(rawBody: Uint8Array, secret: string): string {
  return createHmac("sha512", Buffer.from(secret, "utf8")).update(rawBody).digest("hex");
}

/** Both payload generations: ≤4.6 `username`/`request_id`; 4.6+ `request{id,user,...}` (4.7: only that). */
const Payload = z
  .object({
    event: z.enum(["created", "updated", "deleted", "job_started", "job_ended"]),
    timestamp: z.string().max(64),
    object_type: z.string().max(100).optional(),
    model: z.string().max(100).optional(),
    username: z.string().max(150).nullish(),
    request_id: z.string().max(100).nullish(),
    request: z
      .object({ id: z.string().max(100).nullish(), user: z.string().max(150).nullish(), method: z.string().max(16).nullish(), path: z.string().max(2000).nullish() })
      .passthrough()
      .nullish(),
    data: z.object({ id: z.number().int().positive() }).passthrough(),
    snapshots: z.object({ prechange: z.unknown().nullish(), postchange: z.unknown().nullish() }).passthrough().nullish(),
  })
  .passthrough();

export interface DeviceHint {
  event: "created" | "updated" | "deleted" | "job_started" | "job_ended";
  /** "dcim.device", ... (from `object_type`, or `dcim.<model>` for ≤4.4 bodies) */
  objectType: string;
  objectId: number;
  timestamp: Date;
  /** Who made the change according to the body (unverified: used only to skip fleetd's own writes). */
  actor: string | null;
  requestId: string | null;
}

/** Parses a verified body; throws WebhookError with a path-naming message on the wrong shape. */
export function parseWebhookBody(rawBody: Uint8Array): DeviceHint {
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(rawBody).toString("utf8"));
  } catch (e) {
    throw new WebhookError("webhook-body-not-json", `body is not JSON: ${(e as Error).message}`);
  }
  const r = Payload.safeParse(json);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new WebhookError("webhook-body-shape", `body is not a NetBox event: ${i ? `${i.path.join(".") || "(root)"}: ${i.message}` : "invalid"}`);
  }
  const p = r.data;
  const ts = new Date(p.timestamp);
  if (Number.isNaN(ts.getTime())) throw new WebhookError("webhook-body-shape", `timestamp ${JSON.stringify(p.timestamp)} is not a date`);
  const objectType = p.object_type ?? (p.model ? `dcim.${p.model}` : undefined);
  if (!objectType) throw new WebhookError("webhook-body-shape", "body names no object_type (or model)");
  return {
    event: p.event,
    objectType,
    objectId: p.data.id,
    timestamp: ts,
    actor: p.request?.user ?? p.username ?? null,
    requestId: p.request?.id ?? p.request_id ?? null,
  };
}

/** Refuses bodies older than `maxAgeSeconds`, or dated more than a minute ahead of our clock. */
export function checkFreshness(hint: DeviceHint, now: Date, maxAgeSeconds: number): void {
  const age = (now.getTime() - hint.timestamp.getTime()) / 1000;
  if (age > maxAgeSeconds) throw new WebhookError("webhook-body-stale", `body is ${Math.round(age)} s old (limit ${maxAgeSeconds} s)`);
  if (age < -60) throw new WebhookError("webhook-body-future", `body is dated ${Math.round(-age)} s in the future`);
}

/** Redeliveries (an RQ retry, a replay) carry the identical body: its SHA-256 is the delivery's identity. */
export function deliveryId(rawBody: Uint8Array): string {
  return createHash("sha256").update(rawBody).digest("hex");
}
