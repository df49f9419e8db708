/**
 * GET /talos/config?uuid=…&code=… — the one-time Talos config (attestation-protocol.md "Talos hand-off").
 * Looked up by SHA-256(code); claimed with a compare-and-swap before a byte is sent; deleted when the response
 * finished (handed whole to the kernel), the claim released if the connection closed first — while the config was
 * being written, or before, while NetBox was asked. Never 204 or an empty 200. The literal
 * `${code}` (Talos did not substitute it: no META key) is a 4xx that counts against nothing. Wrong codes count
 * against the client address (StoreLimiter: charged before the lookup, shared by every replica). The device must
 * still be `staged` in NetBox: a node decommissioned after its confirm gets nothing, and its codes are void. The code never appears in a log line: at fetch time it is a bearer token.
 * The stored config is sealed to the code (shared/verify/src/crypto/seal.ts) and opened here with the code presented.
 */
import { createHash, randomUUID } from "node:crypto";
import type { Request, Response } from "express";
import type { Logger } from "pino";
import type { AttestationStore, NodeRef } from "@fleetd/platform/state";
import { openConfig, SealError } from "@fleetd/verify/crypto";
import { uuidEqual } from "@fleetd/platform/protocol/server";
import type { Inventory } from "@fleetd/platform/fleet";
import { failpoint, Unavailable } from "@fleetd/platform/outage";
import { StepEffects } from "@fleetd/platform/outbox";
import { clientAddress, type TrustedProxies } from "./clientAddress.js";
import type { StoreLimiter } from "./rateLimit.js";
import type { Metrics } from "./metrics.js";
import { z } from "zod";

export interface ConfigFetchDeps {
  store: AttestationStore;
  limiter: StoreLimiter;
  trustedProxies?: TrustedProxies;
  log: Logger;
  metrics: Metrics;
  /**
   * The outbox: NetBox must hold what fleetd recorded for the node (its `staged` status above all) before the
   * fetch reads it (flush); told to deliver after a config was delivered (`active` and a journal entry queued).
   */
  outbox?: { kick(): void; flush(deviceId: number): Promise<boolean> };
  /**
   * Whether the node may still receive its config (a fresh NetBox read: the device exists and its status is
   * `staged`); otherwise its codes are void and the fetch is refused. A decommission after the confirm stops it.
   */
  stillWanted: (node: NodeRef) => Promise<{ ok: true } | { ok: false; reason: string }>;
  now: () => number;
  /** A claim older than this is considered abandoned (the process holding it died). */
  staleClaimMs: number;
}

/** The query of `GET /talos/config` (Talos `talos.config=…?uuid=${uuid}&code=${code}`). */
export const ConfigFetchQuery = z.object({
  uuid: z
    .string()
    .regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/)
    .meta({ description: "The node's SMBIOS UUID (either byte order of the first three fields matches)." }),
  code: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .meta({ description: "The install code, lowercase hex of the 32 bytes the TPM unwrapped. A bearer token." }),
});

/** The refusals of the config fetch: `{ error, detail }`. */
export const CONFIG_FETCH_ERRORS = ["no-code", "rate-limited", "bad-request", "unknown-code", "gone"] as const;
export const ConfigFetchError = z.strictObject({ error: z.enum(CONFIG_FETCH_ERRORS), detail: z.string().min(1) });
type FetchError = z.infer<typeof ConfigFetchError>;

/** A fetch that failed on the server's side (configFetch and app.ts): nothing served. */
export const InternalError = z.strictObject({ error: z.enum(["internal", "empty-config", "sealed-config"]), detail: z.string().min(1).optional() });

export function configFetchHandler(deps: ConfigFetchDeps) {
  return async (req: Request, res: Response): Promise<void> => {
    const address = clientAddress(req, deps.trustedProxies);
    const uuid = typeof req.query["uuid"] === "string" ? req.query["uuid"] : "";
    const code = typeof req.query["code"] === "string" ? req.query["code"] : "";
    const now = deps.now();
    const refuse = (status: number, error: FetchError["error"], detail: string) => {
      deps.metrics.configFetches.inc({ outcome: error });
      deps.log.warn({ address, uuid, outcome: error }, "talos config refused");
      res.status(status).type("application/json").send(JSON.stringify({ error, detail } satisfies FetchError));
    };
    if (code === "${code}") return refuse(400, "no-code", "the URL still holds the literal ${code}: Talos found no install code in META key 0x0b");
    // The failure is charged before anything is looked up (atomically, in the shared store) and refunded only
    // when the code was right: concurrent guesses cannot all pass a check made before any of them failed.
    if (!(await deps.limiter.chargeCode(address, now))) return refuse(429, "rate-limited", "too many wrong codes from this address; try later");
    if (!ConfigFetchQuery.safeParse({ uuid, code }).success) return refuse(400, "bad-request", "uuid must be a UUID and code 64 lowercase hex characters");

    // The code in the URL is the lowercase hex of the 32 bytes c the TPM unwrapped; the store holds SHA-256(c).
    const codeBytes = Buffer.from(code, "hex");
    const codeHash = createHash("sha256").update(codeBytes).digest("hex");
    const claimer = randomUUID();
    const record = await deps.store.claimInstallCode(codeHash, claimer, now, deps.staleClaimMs);
    if (!record) return refuse(404, "unknown-code", "no config for this code (wrong, expired, or already fetched)");
    if (!uuidEqual(record.uuid, uuid)) {
      await deps.store.releaseInstallCode(codeHash, claimer);
      return refuse(404, "unknown-code", "no config for this code (wrong, expired, or already fetched)");
    }
    // From the claim on, a connection that closes before the config's response finished releases it — also while
    // the server still waits for NetBox below: Talos's next try finds the code again at once, not after staleClaimMs.
    // Only the config's own complete response ('finish') delivers it; an answer that is not the config releases or
    // voids the claim itself first (`held` false).
    let held = true;
    let closed = false;
    let finished = false;
    const release = async (): Promise<void> => {
      held = false;
      await deps.store.releaseInstallCode(codeHash, claimer);
    };
    res.on("close", () => {
      closed = true;
      if (!held || finished) return;
      held = false;
      void deps.store.releaseInstallCode(codeHash, claimer).catch(() => undefined);
      deps.log.warn({ node: record.node, address, sending: res.headersSent }, res.headersSent ? "talos config response aborted; claim released" : "talos config request closed before the config was sent; claim released");
    });
    await deps.limiter.refundCode(address, now);
    let wanted: Awaited<ReturnType<ConfigFetchDeps["stillWanted"]>>;
    try {
      // the confirm's `staged` may still be on its way to NetBox (it was down): never judge a NetBox behind fleetd
      const caughtUp = deps.outbox ? await deps.outbox.flush(record.node.deviceId) : true;
      if (!caughtUp) throw new Unavailable("netbox-writes-pending", "NetBox does not yet hold every write fleetd recorded for this node", 2);
      wanted = await deps.stillWanted(record.node);
    } catch (e) {
      // NetBox down: the claim goes back, so Talos's next try (it retries for hours) finds the code again
      await release();
      throw e;
    }
    if (!wanted.ok) {
      held = false;
      await deps.store.voidInstallCodes(record.node.deviceId);
      deps.log.warn({ node: record.node, address, reason: wanted.reason }, "talos config refused: the node no longer expects it; its install codes are void");
      res.status(410).type("application/json").send(JSON.stringify({ error: "gone", detail: "this config was withdrawn" } satisfies FetchError));
      return;
    }
    let config: string;
    try {
      config = openConfig(codeBytes, record.config, { deviceId: record.node.deviceId, uuid: record.uuid });
    } catch (e) {
      if (!(e instanceof SealError)) {
        await release();
        throw e;
      }
      await release();
      deps.log.error({ node: record.node, reason: e.message }, "stored config does not open with its code; refusing to serve it");
      res.status(500).type("application/json").send(JSON.stringify({ error: "sealed-config", detail: "the stored config does not open; provision the node again" } satisfies z.infer<typeof InternalError>));
      return;
    }
    if (config.length === 0) {
      await release();
      deps.log.error({ node: record.node }, "stored config is empty; refusing to serve it");
      res.status(500).type("application/json").send(JSON.stringify({ error: "empty-config" } satisfies z.infer<typeof InternalError>));
      return;
    }
    // The client went away while NetBox was asked: nothing to send (the close above released the claim).
    if (closed) return;
    res.on("finish", () => {
      finished = true;
      void (async () => {
        // The code is deleted (its config blanked) together with what NetBox must hear — the device is active,
        // and a journal entry — so an outage or a restart after the response cannot leave the device staged.
        const effects = new StepEffects(`delivered:${codeHash}`);
        effects.status(record.node, "active", "Talos fetched its config");
        effects.journal(record.node, { kind: "success", summary: "Talos fetched its one-time config (deleted after the complete response); device is active" });
        if (await deps.store.commit({ delivered: { codeHash, claimer }, outbox: effects.items }, deps.now())) {
          failpoint("config.afterDelivered");
          deps.metrics.configFetches.inc({ outcome: "delivered" });
          deps.log.info({ node: record.node, address }, "talos config delivered; deleted");
          deps.outbox?.kick();
        }
      })().catch((e: unknown) => deps.log.error({ err: e, node: record.node }, "after-delivery step failed"));
    });
    res.status(200).type("application/yaml").send(config);
  };
}

/** `stillWanted` over the attestation inventory: the device exists and is `staged` (its provision confirmed). */
export async function stillStaged(inventory: Pick<Inventory, "reread">, node: NodeRef): Promise<{ ok: true } | { ok: false; reason: string }> {
  const now = await inventory.reread(node.deviceId);
  if (!now) return { ok: false, reason: `device ${node.deviceId} is gone from NetBox` };
  return now.status === "staged" ? { ok: true } : { ok: false, reason: `the device is ${now.status}, not staged` };
}

/**
 * Install codes that expired undelivered: each is removed (with its config) and, in the same transaction, its
 * node's provision is failed — status `failed` and a journal entry saying how to retry, queued for NetBox.
 * Returns how many.
 */
export async function sweepExpiredInstallCodes(store: Pick<AttestationStore, "takeExpiredInstallCodes">, now: number): Promise<number> {
  const expired = await store.takeExpiredInstallCodes(now, (r) => {
    const at = new Date(r.expiresAt).toISOString();
    const effects = new StepEffects(`expired:${r.codeHash}`);
    effects.status(r.node, "failed", `provision failed: the install code expired undelivered at ${at}`);
    effects.journal(r.node, {
      kind: "danger",
      summary: `provision failed: Talos did not fetch its config before the install code expired (${at}); the config was deleted and the device marked failed — set desired_action to provision to try again`,
    });
    return effects.items;
  });
  return expired.length;
}
