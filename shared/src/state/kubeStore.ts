/**
 * The Kubernetes backend of AttestationStore, for HA: every record is one Secret in one namespace (Secrets, not
 * a CRD: nothing to install, and install codes carry Talos configs with cluster secrets, which belong in
 * Secrets and their encryption at rest). A Secret holds at most 1 MiB; a record is a few KiB (a Talos config
 * tens of KiB), and `put` refuses anything over MAX_RECORD_BYTES with a clear error.
 *
 * Atomicity ("first one wins") comes from the API server alone:
 *   - create-if-absent: `create` answers 409 AlreadyExists to every writer but the first (AK Names, sessions,
 *     generations' first value, issued serials);
 *   - compare-and-swap: `replace` and `delete` carry the resourceVersion that was read; 409 Conflict means
 *     another writer changed the object in between, and the operation re-reads and re-decides (or loses).
 *
 * Objects: name `fleetd-<kind>-<sha256(key) hex>` (DNS-1123, no key material in names), labels
 * `app.kubernetes.io/managed-by: fleetd`, `fleetd.io/kind: <kind>` and, where a lookup needs it,
 * `fleetd.io/node: <NetBox device ID>` or `fleetd.io/bootstrap-token: <token id>`. The record itself is
 * JSON under `data.record`. RBAC: get, list, create, update, delete on secrets in the namespace.
 *
 * Known limits: `putInstallCode` creates the new code and then deletes the node's others (two provisions of
 * one node racing can leave none: fail closed, the machine provisions again); bootstrap token ids are unique
 * per node by a label check (token ids are 36^6 random, the check guards against a bug, not a race).
 */
import { createHash } from "node:crypto";
import type { V1Secret } from "@kubernetes/client-node";
import { z } from "zod";
import { isConflict, isNotFound, type Kube } from "../kube/client.js";
import type { AttestationStore, InstallCodeRecord, IssuedRecord, LimitCharge, NodeRef, PendingEk, SessionRecord, SessionState } from "./store.js";

export const MANAGED_BY = { "app.kubernetes.io/managed-by": "fleetd" } as const;
const KIND_LABEL = "fleetd.io/kind";
const NODE_LABEL = "fleetd.io/node";
const TOKEN_LABEL = "fleetd.io/bootstrap-token";
const SECRET_TYPE = "fleetd.io/attestation-state";
/** Well under a Secret's 1 MiB (the API server's limit includes metadata and base64 of the data). */
export const MAX_RECORD_BYTES = 512 * 1024;
/** CAS retries before an operation gives up with an error (each retry re-reads; contention is a handful of replicas). */
const MAX_ATTEMPTS = 32;

type Kind = "session" | "ak-name" | "pending-ek" | "install-code" | "issued" | "generation" | "bootstrap-token" | "limit" | "once";

export class KubeStoreError extends Error {
  constructor(
    readonly code: "too-large" | "exists" | "contention" | "corrupt" | "duplicate-token",
    message: string,
  ) {
    super(message);
    this.name = "KubeStoreError";
  }
}

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");
export const objectName = (kind: Kind, key: string): string => `fleetd-${kind}-${sha256(key)}`;
/** Per-node records are keyed and labelled by the NetBox device ID (a number: a valid label value as it is). */
const nodeLabel = (deviceId: number) => String(deviceId);
const nodeKey = (deviceId: number) => `device-${deviceId}`;
const Ref = z.object({ deviceId: z.number().int().positive(), name: z.string() });

// Records as stored: zod on the way back in (another writer, or an operator with kubectl, may have touched them).
const Session = z.object({
  id: z.string(),
  node: Ref,
  mode: z.enum(["intake", "provision", "attest", "wipe"]),
  nonce: z.string(),
  claimsHash: z.string(),
  akName: z.string(),
  akPublic: z.string(),
  secretHashes: z.array(z.string()),
  ekBindings: z.array(z.string()),
  data: z.record(z.string(), z.unknown()),
  state: z.enum(["challenged", "evidenced", "confirmed"]),
  createdAt: z.number(),
  expiresAt: z.number(),
});
const AkName = z.object({ akName: z.string(), deviceId: z.number(), seenAt: z.number() });
const Pending = z.object({
  binding: z.string(),
  serial: z.string(),
  macs: z.array(z.string()),
  sourceAddress: z.string(),
  firstSeen: z.number(),
  lastSeen: z.number(),
  count: z.number().int(),
});
const Code = z.object({
  codeHash: z.string(),
  node: Ref,
  uuid: z.string(),
  sourceAddress: z.string(),
  config: z.string(),
  expiresAt: z.number(),
  claimedBy: z.string().nullable(),
  claimedAt: z.number().nullable(),
});
const Issued = z.object({
  serial: z.string(),
  node: Ref,
  kind: z.enum(["ldevid", "lak"]),
  generation: z.number().int(),
  notAfter: z.number(),
  issuedAt: z.number(),
  der: z.string(),
  keyPublic: z.string(),
  voided: z.object({ at: z.number(), why: z.string() }).optional(),
});
const Generation = z.object({ deviceId: z.number(), last: z.number().int().min(1) });
const Token = z.object({ node: Ref, tokenId: z.string(), expiresAt: z.number() });
const Limit = z.object({ windowStart: z.number(), count: z.number().int() });
const Once = z.object({ expiresAt: z.number() });

interface Found<T> {
  record: T;
  resourceVersion: string;
}

export interface KubeStoreOptions {
  kube: Kube;
  namespace: string;
}

export class KubeAttestationStore implements AttestationStore {
  private readonly kube: Kube;
  private readonly namespace: string;

  constructor(o: KubeStoreOptions) {
    this.kube = o.kube;
    this.namespace = o.namespace;
  }

  // ---- the object layer ---------------------------------------------------------------------------------

  private body(kind: Kind, key: string, record: unknown, labels: Record<string, string>, resourceVersion?: string): V1Secret {
    const json = JSON.stringify(record);
    const bytes = Buffer.byteLength(json, "utf8");
    if (bytes > MAX_RECORD_BYTES) throw new KubeStoreError("too-large", `${kind} record of ${bytes} bytes exceeds ${MAX_RECORD_BYTES} (a Secret holds at most 1 MiB)`);
    return {
      apiVersion: "v1",
      kind: "Secret",
      type: SECRET_TYPE,
      metadata: {
        name: objectName(kind, key),
        namespace: this.namespace,
        labels: { ...MANAGED_BY, [KIND_LABEL]: kind, ...labels },
        ...(resourceVersion ? { resourceVersion } : {}),
      },
      data: { record: Buffer.from(json, "utf8").toString("base64") },
    };
  }

  private decode<T>(schema: z.ZodType<T>, s: V1Secret): Found<T> {
    const name = s.metadata?.name ?? "?";
    const raw = s.data?.["record"];
    const rv = s.metadata?.resourceVersion;
    if (raw === undefined || rv === undefined) throw new KubeStoreError("corrupt", `Secret ${this.namespace}/${name} has no record`);
    let json: unknown;
    try {
      json = JSON.parse(Buffer.from(raw, "base64").toString("utf8"));
    } catch {
      throw new KubeStoreError("corrupt", `Secret ${this.namespace}/${name}: record is not JSON`);
    }
    const r = schema.safeParse(json);
    if (!r.success) throw new KubeStoreError("corrupt", `Secret ${this.namespace}/${name}: ${r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
    return { record: r.data, resourceVersion: rv };
  }

  private async read<T>(kind: Kind, key: string, schema: z.ZodType<T>): Promise<Found<T> | undefined> {
    try {
      return this.decode(schema, await this.kube.core.readNamespacedSecret({ name: objectName(kind, key), namespace: this.namespace }));
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  /** Create-if-absent: false when the object exists (409 AlreadyExists). */
  private async create(kind: Kind, key: string, record: unknown, labels: Record<string, string> = {}): Promise<boolean> {
    try {
      await this.kube.core.createNamespacedSecret({ namespace: this.namespace, body: this.body(kind, key, record, labels) });
      return true;
    } catch (e) {
      if (isConflict(e)) return false;
      throw e;
    }
  }

  /** Compare-and-swap on resourceVersion: false when another writer got there first (409) or it is gone (404). */
  private async replace(kind: Kind, key: string, record: unknown, resourceVersion: string, labels: Record<string, string> = {}): Promise<boolean> {
    try {
      await this.kube.core.replaceNamespacedSecret({ name: objectName(kind, key), namespace: this.namespace, body: this.body(kind, key, record, labels, resourceVersion) });
      return true;
    } catch (e) {
      if (isConflict(e) || isNotFound(e)) return false;
      throw e;
    }
  }

  /** Delete; with a resourceVersion, only that version (false on 409 or 404). */
  private async remove(kind: Kind, key: string, resourceVersion?: string): Promise<boolean> {
    return this.removeByName(objectName(kind, key), resourceVersion);
  }

  private async removeByName(name: string, resourceVersion?: string): Promise<boolean> {
    try {
      await this.kube.core.deleteNamespacedSecret({
        name,
        namespace: this.namespace,
        ...(resourceVersion ? { body: { preconditions: { resourceVersion } } } : {}),
      });
      return true;
    } catch (e) {
      if (isConflict(e) || isNotFound(e)) return false;
      throw e;
    }
  }

  private async list<T>(kind: Kind, schema: z.ZodType<T>, extra: Record<string, string> = {}): Promise<(Found<T> & { name: string })[]> {
    const selector = Object.entries({ ...MANAGED_BY, [KIND_LABEL]: kind, ...extra })
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
    const out: (Found<T> & { name: string })[] = [];
    let cont: string | undefined;
    do {
      const page = await this.kube.core.listNamespacedSecret({ namespace: this.namespace, labelSelector: selector, limit: 500, ...(cont ? { _continue: cont } : {}) });
      for (const s of page.items) out.push({ ...this.decode(schema, s), name: s.metadata?.name ?? "" });
      cont = page.metadata?._continue || undefined;
    } while (cont);
    return out;
  }

  /** Re-read and re-decide until a CAS lands; `step` returns the result, or `retry` after a lost CAS. */
  private async casLoop<R>(what: string, step: () => Promise<{ done: R } | "retry">): Promise<R> {
    for (let i = 0; i < MAX_ATTEMPTS; i++) {
      const r = await step();
      if (r !== "retry") return r.done;
      await new Promise((res) => setTimeout(res, Math.floor(Math.random() * (5 + i * 5))));
    }
    throw new KubeStoreError("contention", `${what}: gave up after ${MAX_ATTEMPTS} conflicting updates`);
  }

  // ---- sessions -----------------------------------------------------------------------------------------

  async createSession(s: SessionRecord): Promise<void> {
    if (!(await this.create("session", s.id, s))) throw new KubeStoreError("exists", `session ${s.id} exists`);
  }
  async getSession(id: string): Promise<SessionRecord | undefined> {
    return (await this.read("session", id, Session))?.record;
  }
  transitionSession(id: string, from: SessionState, to: SessionState, data: Record<string, unknown>, now: number): Promise<boolean> {
    return this.casLoop(`session ${id}`, async () => {
      const cur = await this.read("session", id, Session);
      if (!cur || cur.record.state !== from || !(cur.record.expiresAt > now)) return { done: false };
      if (await this.replace("session", id, { ...cur.record, state: to, data }, cur.resourceVersion)) return { done: true };
      return "retry"; // someone wrote it: re-read, and lose if it moved on
    });
  }
  async deleteSession(id: string): Promise<void> {
    await this.remove("session", id);
  }
  async expireSessions(now: number): Promise<number> {
    let n = 0;
    for (const s of await this.list("session", Session)) {
      if (s.record.expiresAt <= now && (await this.removeByName(s.name, s.resourceVersion))) n++;
    }
    for (const o of await this.list("once", Once)) if (o.record.expiresAt <= now) await this.removeByName(o.name, o.resourceVersion);
    return n;
  }

  // ---- AK Names -----------------------------------------------------------------------------------------

  recordAkName(akName: string, deviceId: number, now: number): Promise<boolean> {
    return this.create("ak-name", akName, { akName, deviceId, seenAt: now });
  }

  // ---- pending EKs --------------------------------------------------------------------------------------

  /** The cap is checked by a list before a new binding is created: replicas racing may overshoot it by a few. */
  recordPendingEk(p: Omit<PendingEk, "firstSeen" | "lastSeen" | "count">, now: number, max: number): Promise<boolean> {
    return this.casLoop(`pending EK ${p.binding}`, async () => {
      const cur = await this.read("pending-ek", p.binding, Pending);
      const fields = { binding: p.binding, serial: p.serial, macs: p.macs, sourceAddress: p.sourceAddress, lastSeen: now };
      if (!cur) {
        if ((await this.list("pending-ek", Pending)).length >= max) return { done: false };
        return (await this.create("pending-ek", p.binding, { ...fields, firstSeen: now, count: 1 })) ? { done: true } : "retry";
      }
      const next = { ...fields, firstSeen: cur.record.firstSeen, count: cur.record.count + 1 };
      return (await this.replace("pending-ek", p.binding, next, cur.resourceVersion)) ? { done: true } : "retry";
    });
  }
  async listPendingEks(): Promise<PendingEk[]> {
    return (await this.list("pending-ek", Pending)).map((f) => f.record).sort((a, b) => a.firstSeen - b.firstSeen);
  }
  async deletePendingEk(binding: string): Promise<void> {
    await this.remove("pending-ek", binding);
  }

  // ---- install codes ------------------------------------------------------------------------------------

  async putInstallCode(r: Omit<InstallCodeRecord, "claimedBy" | "claimedAt">): Promise<void> {
    const labels = { [NODE_LABEL]: nodeLabel(r.node.deviceId) };
    const name = objectName("install-code", r.codeHash);
    const record: InstallCodeRecord = { ...r, claimedBy: null, claimedAt: null };
    if (!(await this.create("install-code", r.codeHash, record, labels))) {
      // the same code again (SQLite's delete-then-insert): replace it
      await this.casLoop(`install code for ${r.node.name}`, async () => {
        const cur = await this.read("install-code", r.codeHash, Code);
        if (!cur) return (await this.create("install-code", r.codeHash, record, labels)) ? { done: undefined } : "retry";
        if (cur.record.node.deviceId !== r.node.deviceId) throw new KubeStoreError("exists", `install code exists for another node`);
        return (await this.replace("install-code", r.codeHash, record, cur.resourceVersion, labels)) ? { done: undefined } : "retry";
      });
    }
    // One live code per node: a new provision replaces the previous code.
    for (const other of await this.list("install-code", Code, labels)) {
      if (other.name !== name && other.record.node.deviceId === r.node.deviceId) await this.removeByName(other.name);
    }
  }
  claimInstallCode(codeHash: string, claimer: string, now: number, staleMs: number): Promise<InstallCodeRecord | undefined> {
    return this.casLoop(`install code claim`, async () => {
      const cur = await this.read("install-code", codeHash, Code);
      if (!cur) return { done: undefined };
      const c = cur.record;
      if (!(c.expiresAt > now) || (c.claimedBy !== null && !(c.claimedAt !== null && c.claimedAt <= now - staleMs))) return { done: undefined };
      const next: InstallCodeRecord = { ...c, claimedBy: claimer, claimedAt: now };
      // a lost CAS is a lost race: another claimer (or a release) changed it; never retry into a claim here
      return (await this.replace("install-code", codeHash, next, cur.resourceVersion, { [NODE_LABEL]: nodeLabel(c.node.deviceId) })) ? { done: next } : { done: undefined };
    });
  }
  releaseInstallCode(codeHash: string, claimer: string): Promise<void> {
    return this.casLoop(`install code release`, async () => {
      const cur = await this.read("install-code", codeHash, Code);
      if (!cur || cur.record.claimedBy !== claimer) return { done: undefined };
      const next = { ...cur.record, claimedBy: null, claimedAt: null };
      return (await this.replace("install-code", codeHash, next, cur.resourceVersion, { [NODE_LABEL]: nodeLabel(cur.record.node.deviceId) })) ? { done: undefined } : "retry";
    });
  }
  finishInstallCode(codeHash: string, claimer: string): Promise<boolean> {
    return this.casLoop(`install code finish`, async () => {
      const cur = await this.read("install-code", codeHash, Code);
      if (!cur || cur.record.claimedBy !== claimer) return { done: false };
      return (await this.remove("install-code", codeHash, cur.resourceVersion)) ? { done: true } : "retry";
    });
  }
  async hasInstallCodeFor(deviceId: number, now: number): Promise<boolean> {
    return (await this.list("install-code", Code, { [NODE_LABEL]: nodeLabel(deviceId) })).some((c) => c.record.node.deviceId === deviceId && c.record.expiresAt > now);
  }
  /** Deleting the Secret removes the config (etcd compacts old revisions; encryption at rest is the cluster's). */
  async voidInstallCodes(deviceId: number): Promise<number> {
    let n = 0;
    for (const c of await this.list("install-code", Code, { [NODE_LABEL]: nodeLabel(deviceId) })) if (c.record.node.deviceId === deviceId && (await this.removeByName(c.name))) n++;
    return n;
  }
  async takeExpiredInstallCodes(now: number): Promise<InstallCodeRecord[]> {
    const out: InstallCodeRecord[] = [];
    for (const c of await this.list("install-code", Code)) {
      if (c.record.expiresAt <= now && (await this.removeByName(c.name, c.resourceVersion))) out.push({ ...c.record, config: "" });
    }
    return out;
  }

  // ---- issued certificates and generations --------------------------------------------------------------

  async recordIssued(c: IssuedRecord): Promise<void> {
    if (!(await this.create("issued", c.serial, c, { [NODE_LABEL]: nodeLabel(c.node.deviceId) }))) throw new KubeStoreError("exists", `serial ${c.serial} is already recorded`);
  }
  nextGeneration(deviceId: number): Promise<number> {
    const key = nodeKey(deviceId);
    const labels = { [NODE_LABEL]: nodeLabel(deviceId) };
    return this.casLoop(`generation of device ${deviceId}`, async () => {
      const cur = await this.read("generation", key, Generation);
      if (!cur) return (await this.create("generation", key, { deviceId, last: 1 }, labels)) ? { done: 1 } : "retry";
      const last = cur.record.last + 1;
      return (await this.replace("generation", key, { deviceId, last }, cur.resourceVersion, labels)) ? { done: last } : "retry";
    });
  }
  async voidIssued(serials: string[], at: number, why: string): Promise<void> {
    for (const serial of serials) {
      await this.casLoop(`voiding serial ${serial}`, async () => {
        const cur = await this.read("issued", serial, Issued);
        if (!cur || cur.record.voided) return { done: undefined };
        const labels = { [NODE_LABEL]: nodeLabel(cur.record.node.deviceId) };
        return (await this.replace("issued", serial, { ...cur.record, voided: { at, why } }, cur.resourceVersion, labels)) ? { done: undefined } : "retry";
      });
    }
  }
  async listIssued(deviceId: number): Promise<IssuedRecord[]> {
    return (await this.list("issued", Issued, { [NODE_LABEL]: nodeLabel(deviceId) }))
      .map((f) => f.record)
      .filter((r) => r.node.deviceId === deviceId)
      .sort((a, b) => a.issuedAt - b.issuedAt || a.generation - b.generation);
  }

  // ---- bootstrap tokens ---------------------------------------------------------------------------------

  async setBootstrapToken(node: NodeRef, tokenId: string, expiresAt: number): Promise<void> {
    if (!/^[a-z0-9]{6}$/.test(tokenId)) throw new KubeStoreError("corrupt", `bootstrap token id "${tokenId}" is not [a-z0-9]{6}`);
    const holders = await this.list("bootstrap-token", Token, { [TOKEN_LABEL]: tokenId });
    if (holders.some((h) => h.record.node.deviceId !== node.deviceId)) throw new KubeStoreError("duplicate-token", `bootstrap token ${tokenId} is already rendered for another node`);
    const key = nodeKey(node.deviceId);
    const labels = { [NODE_LABEL]: nodeLabel(node.deviceId), [TOKEN_LABEL]: tokenId };
    const record = { node, tokenId, expiresAt };
    await this.casLoop(`bootstrap token of ${node.name}`, async () => {
      const cur = await this.read("bootstrap-token", key, Token);
      if (!cur) return (await this.create("bootstrap-token", key, record, labels)) ? { done: undefined } : "retry";
      return (await this.replace("bootstrap-token", key, record, cur.resourceVersion, labels)) ? { done: undefined } : "retry";
    });
  }
  async getBootstrapToken(deviceId: number): Promise<{ tokenId: string; expiresAt: number } | undefined> {
    const r = (await this.read("bootstrap-token", nodeKey(deviceId), Token))?.record;
    return r ? { tokenId: r.tokenId, expiresAt: r.expiresAt } : undefined;
  }
  async nodeForBootstrapToken(tokenId: string): Promise<NodeRef | undefined> {
    if (!/^[a-z0-9]{6}$/.test(tokenId)) return undefined; // never a label selector built from garbage
    return (await this.list("bootstrap-token", Token, { [TOKEN_LABEL]: tokenId })).find((h) => h.record.tokenId === tokenId)?.record.node;
  }
  async deleteBootstrapToken(deviceId: number): Promise<void> {
    await this.remove("bootstrap-token", nodeKey(deviceId));
  }

  // ---- failure budgets and single-use tokens ------------------------------------------------------------

  chargeLimit(key: string, now: number, windowMs: number, max: number): Promise<LimitCharge> {
    return this.casLoop(`limit ${key}`, async () => {
      const cur = await this.read("limit", key, Limit);
      if (!cur) return (await this.create("limit", key, { windowStart: now, count: 1 })) ? { done: { allowed: 1 <= max, count: 1 } } : "retry";
      const fresh = now - cur.record.windowStart >= windowMs;
      const next = fresh ? { windowStart: now, count: 1 } : { windowStart: cur.record.windowStart, count: cur.record.count + 1 };
      return (await this.replace("limit", key, next, cur.resourceVersion)) ? { done: { allowed: next.count <= max, count: next.count } } : "retry";
    });
  }
  refundLimit(key: string, now: number, windowMs: number): Promise<void> {
    return this.casLoop(`limit ${key}`, async () => {
      const cur = await this.read("limit", key, Limit);
      if (!cur || cur.record.count === 0 || now - cur.record.windowStart >= windowMs) return { done: undefined };
      return (await this.replace("limit", key, { ...cur.record, count: cur.record.count - 1 }, cur.resourceVersion)) ? { done: undefined } : "retry";
    });
  }
  recordOnce(token: string, expiresAt: number, now: number): Promise<boolean> {
    return this.casLoop(`single-use token`, async () => {
      if (await this.create("once", token, { expiresAt })) return { done: true };
      const cur = await this.read("once", token, Once);
      if (!cur) return "retry";
      if (cur.record.expiresAt > now) return { done: false };
      return (await this.remove("once", token, cur.resourceVersion)) ? "retry" : "retry";
    });
  }

  async close(): Promise<void> {
    // nothing held open: every call is a request
  }
}
