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
 * The object layer (Secrets, names, labels, CAS) is kubeRecords.ts, shared with kubeHandlerStore.ts.
 * Objects: name `fleetd-<kind>-<sha256(key) hex>` (DNS-1123, no key material in names), labels
 * `fleetd.io/owner: fleetd`, `fleetd.io/kind: <kind>` and, where a lookup needs it,
 * `fleetd.io/node: <NetBox device ID>` or `fleetd.io/bootstrap-token: <token id>`. The record itself is
 * JSON under `data.record`. RBAC: get, list, create, update, delete on secrets in the namespace.
 *
 * Known limits: `putInstallCode` creates the new code and then deletes the node's others (two provisions of
 * one node racing can leave none: fail closed, the machine provisions again); bootstrap token ids are unique
 * per node by a label check (token ids are 36^6 random, the check guards against a bug, not a race).
 */
import { z } from "zod";
import type { Kube } from "../kube/client.js";
import { CLAIMABLE_FIELDS, KubeStoreError, objectName, SecretRecords, type Found } from "./kubeRecords.js";
import { applyRuntimeUpdate, type AttestationStore, type InstallCodeRecord, type IssuedRecord, type LimitCharge, type NodeRef, type OutboxEntry, type OutboxItem, type PendingEk, type RuntimeRecord, type SessionClaim, type SessionRecord, type SessionState, type StepRecord } from "./store.js";

const NODE_LABEL = "fleetd.io/node";
const TOKEN_LABEL = "fleetd.io/bootstrap-token";
const SECRET_TYPE = "fleetd.io/attestation-state";

type Kind = "session" | "ak-name" | "pending-ek" | "install-code" | "issued" | "generation" | "bootstrap-token" | "limit" | "once" | "outbox" | "runtime";
/** On a session or install code whose commit is written but not yet applied to its parts (recover() finds them). */
const APPLYING_LABEL = "fleetd.io/applying";

/** Per-node records are keyed and labelled by the NetBox device ID (a number: a valid label value as it is). */
const nodeLabel = (deviceId: number) => String(deviceId);
const nodeKey = (deviceId: number) => `device-${deviceId}`;
const Ref = z.object({ deviceId: z.number().int().positive(), name: z.string() });
const OutboxRecord = z.object({
  key: z.string(),
  deviceId: z.number().int().nullable(),
  effect: z.record(z.string(), z.unknown()),
  seq: z.number(),
  createdAt: z.number(),
  ...CLAIMABLE_FIELDS,
});
type OutboxRecord = z.infer<typeof OutboxRecord>;

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
  claimedBy: z.string().nullable().optional(),
  claimedAt: z.number().nullable().optional(),
});
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
  /** Delivered or expired: being finished (its outbox items written, then deleted); no longer claimable. */
  finishedAt: z.number().optional(),
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
/** `key` (the budget's name, so request locks `lock:…` can be found) is absent in records of older fleetd. */
const Limit = z.object({ key: z.string().optional(), windowStart: z.number(), count: z.number().int() });
const Once = z.object({ expiresAt: z.number() });

const Runtime = z.object({
  node: Ref,
  verdict: z.object({ verdict: z.enum(["pass", "fail"]), at: z.number() }).optional(),
  lastPassAt: z.number().nullable(),
  quarantine: z.object({ at: z.number(), why: z.string() }).nullable(),
  cordoned: z.boolean(),
});
const RuntimeUpdateRecord = z.object({
  node: Ref,
  verdict: z.object({ verdict: z.enum(["pass", "fail"]), at: z.number() }).optional(),
  quarantine: z.union([z.object({ latch: z.object({ at: z.number(), why: z.string() }) }), z.literal("release")]).optional(),
  cordoned: z.boolean().optional(),
});

/** What a commit (or an install code's finish) releases besides its anchor, applied idempotently after it. */
const Parts = z.object({
  runtime: RuntimeUpdateRecord.optional(),
  issued: z.array(Issued).optional(),
  installCode: Code.omit({ claimedBy: true, claimedAt: true, finishedAt: true }).optional(),
  bootstrapToken: z.object({ node: Ref, tokenId: z.string(), expiresAt: z.number() }).optional(),
  outbox: z.array(OutboxRecord).optional(),
  cancel: z.array(z.string()).optional(),
});
type Parts = z.infer<typeof Parts>;
/** A session or install code as stored, with the parts of a commit not yet applied. */
const SessionStored = Session.extend({ applying: Parts.optional() });
const CodeStored = Code.extend({ applying: Parts.optional() });

const toEntry = (r: OutboxRecord): OutboxEntry => ({
  key: r.key,
  deviceId: r.deviceId,
  effect: r.effect,
  notBefore: r.notBefore,
  seq: r.seq,
  createdAt: r.createdAt,
  attempts: r.attempts,
  lastError: r.lastError,
});

export interface KubeStoreOptions {
  kube: Kube;
  namespace: string;
}

export class KubeAttestationStore implements AttestationStore {
  private readonly records: SecretRecords;

  constructor(o: KubeStoreOptions) {
    this.records = new SecretRecords(o.kube, o.namespace, SECRET_TYPE);
  }

  // ---- the object layer (kubeRecords.ts) ----------------------------------------------------------------

  private read<T>(kind: Kind, key: string, schema: z.ZodType<T>): Promise<Found<T> | undefined> {
    return this.records.read(kind, key, schema);
  }
  private create(kind: Kind, key: string, record: unknown, labels: Record<string, string> = {}): Promise<boolean> {
    return this.records.create(kind, key, record, labels);
  }
  private replace(kind: Kind, key: string, record: unknown, resourceVersion: string, labels: Record<string, string> = {}): Promise<boolean> {
    return this.records.replace(kind, key, record, resourceVersion, labels);
  }
  private remove(kind: Kind, key: string, resourceVersion?: string): Promise<boolean> {
    return this.records.remove(kind, key, resourceVersion);
  }
  private removeByName(name: string, resourceVersion?: string): Promise<boolean> {
    return this.records.removeByName(name, resourceVersion);
  }
  private list<T>(kind: Kind, schema: z.ZodType<T>, extra: Record<string, string> = {}): Promise<(Found<T> & { name: string })[]> {
    return this.records.list(kind, schema, extra);
  }
  private casLoop<R>(what: string, step: () => Promise<{ done: R } | "retry">): Promise<R> {
    return this.records.casLoop(what, step);
  }

  // ---- sessions -----------------------------------------------------------------------------------------

  private sessionLabels(r: { applying?: Parts | undefined }): Record<string, string> {
    return r.applying ? { [APPLYING_LABEL]: "true" } : {};
  }

  async createSession(s: SessionRecord): Promise<void> {
    if (!(await this.create("session", s.id, s))) throw new KubeStoreError("exists", `session ${s.id} exists`);
  }
  async getSession(id: string): Promise<SessionRecord | undefined> {
    const r = (await this.read("session", id, SessionStored))?.record;
    if (!r) return undefined;
    const { applying: _a, ...session } = r;
    return session;
  }
  async sessionByAkName(akName: string): Promise<SessionRecord | undefined> {
    const found = (await this.list("session", SessionStored)).map((s) => s.record).filter((r) => r.akName === akName).sort((a, b) => a.createdAt - b.createdAt)[0];
    if (!found) return undefined;
    const { applying: _a, ...session } = found;
    return session;
  }
  transitionSession(id: string, from: SessionState, to: SessionState, data: Record<string, unknown>, now: number): Promise<boolean> {
    return this.casLoop(`session ${id}`, async () => {
      const cur = await this.read("session", id, SessionStored);
      if (!cur || cur.record.state !== from || !(cur.record.expiresAt > now)) return { done: false };
      const next = { ...cur.record, state: to, data };
      if (await this.replace("session", id, next, cur.resourceVersion, this.sessionLabels(next))) return { done: true };
      return "retry"; // someone wrote it: re-read, and lose if it moved on
    });
  }
  claimSession(id: string, from: SessionState, claimer: string, now: number, staleMs: number): Promise<SessionClaim> {
    return this.casLoop<SessionClaim>(`session ${id}`, async () => {
      const cur = await this.read("session", id, SessionStored);
      if (!cur) return { done: { ok: false, why: "unknown" } };
      const { applying: _a, ...session } = cur.record;
      if (!(session.expiresAt > now)) return { done: { ok: false, why: "expired", session } };
      if (session.state !== from) return { done: { ok: false, why: "state", session } };
      if (session.claimedBy && !(session.claimedAt != null && session.claimedAt <= now - staleMs)) return { done: { ok: false, why: "busy", session } };
      const next = { ...cur.record, claimedBy: claimer, claimedAt: now };
      if (await this.replace("session", id, next, cur.resourceVersion, this.sessionLabels(next))) return { done: { ok: true, session: { ...session, claimedBy: claimer, claimedAt: now } } };
      return "retry"; // re-read: another request may hold it now
    });
  }
  releaseSession(id: string, claimer: string): Promise<void> {
    return this.casLoop(`session ${id}`, async () => {
      const cur = await this.read("session", id, SessionStored);
      if (!cur || cur.record.claimedBy !== claimer) return { done: undefined };
      const next = { ...cur.record, claimedBy: null, claimedAt: null };
      return (await this.replace("session", id, next, cur.resourceVersion, this.sessionLabels(next))) ? { done: undefined } : "retry";
    });
  }
  async releaseAllClaims(): Promise<number> {
    let n = 0;
    for (const s of await this.list("session", SessionStored)) {
      if (!s.record.claimedBy) continue;
      const next = { ...s.record, claimedBy: null, claimedAt: null };
      if (await this.replace("session", s.record.id, next, s.resourceVersion, this.sessionLabels(next))) n++;
    }
    // request locks are failure budgets named `lock:…`: their objects are named by a hash, so each is read back
    for (const l of await this.list("limit", Limit)) {
      if (l.record.key?.startsWith("lock:") && l.record.count > 0 && (await this.removeByName(l.name, l.resourceVersion))) n++;
    }
    for (const o of await this.list("outbox", OutboxRecord)) {
      if (!o.record.claimedBy) continue;
      const next = { ...o.record, claimedBy: null, claimedAt: null, attempts: o.record.attempts + 1 };
      if (await this.replace("outbox", o.record.key, next, o.resourceVersion, this.outboxLabels(o.record))) n++;
    }
    return n;
  }
  async deleteSession(id: string): Promise<void> {
    await this.remove("session", id);
  }
  async expireSessions(now: number): Promise<number> {
    let n = 0;
    for (const s of await this.list("session", SessionStored)) {
      // a session whose commit is still being applied stays until recover() has applied it
      if (s.record.expiresAt <= now && !s.record.applying && (await this.removeByName(s.name, s.resourceVersion))) n++;
    }
    for (const o of await this.list("once", Once)) if (o.record.expiresAt <= now) await this.removeByName(o.name, o.resourceVersion);
    return n;
  }

  // ---- commits: one object written atomically (the anchor: the session, or the install code delivered), then
  // its parts applied idempotently; recover() finishes what a dead process left labelled `fleetd.io/applying`.

  private parts(step: StepRecord, now: number): Parts {
    return {
      ...(step.issued?.length ? { issued: step.issued } : {}),
      ...(step.runtime ? { runtime: step.runtime } : {}),
      ...(step.installCode ? { installCode: step.installCode } : {}),
      ...(step.bootstrapToken ? { bootstrapToken: step.bootstrapToken } : {}),
      ...(step.outbox?.length ? { outbox: step.outbox.map((i, n) => this.outboxRecord(i, now, n)) } : {}),
      ...(step.cancel?.length ? { cancel: step.cancel } : {}),
    };
  }

  async commit(step: StepRecord, now: number): Promise<boolean> {
    const parts = this.parts(step, now);
    if (step.session) {
      const { id, claimer, to, data } = step.session;
      const rv = await this.casLoop(`commit of session ${id}`, async () => {
        const cur = await this.read("session", id, SessionStored);
        if (!cur || cur.record.claimedBy !== claimer) return { done: undefined };
        const next = { ...cur.record, state: to, data, claimedBy: null, claimedAt: null, applying: parts };
        return (await this.replace("session", id, next, cur.resourceVersion, this.sessionLabels(next))) ? { done: true } : "retry";
      });
      if (!rv) return false;
      await this.applyParts(parts);
      await this.sessionApplied(id);
    }
    if (step.delivered) {
      const { codeHash, claimer } = step.delivered;
      const done = await this.finishCode(codeHash, (c) => c.claimedBy === claimer, parts, now);
      if (!done && !step.session) return false;
    }
    if (!step.session && !step.delivered) await this.applyParts(parts);
    return true;
  }

  /** An install code leaves: blanked and marked finished with its parts, the parts applied, then deleted. */
  private async finishCode(codeHash: string, may: (c: InstallCodeRecord) => boolean, parts: Parts, now: number): Promise<boolean> {
    const marked = await this.casLoop(`finishing an install code`, async () => {
      const cur = await this.read("install-code", codeHash, CodeStored);
      if (!cur || cur.record.finishedAt !== undefined || !may(cur.record)) return { done: false };
      const next = { ...cur.record, config: "", finishedAt: now, applying: parts };
      return (await this.replace("install-code", codeHash, next, cur.resourceVersion, this.codeLabels(next))) ? { done: true } : "retry";
    });
    if (!marked) return false;
    await this.applyParts(parts);
    await this.remove("install-code", codeHash);
    return true;
  }

  private async applyParts(p: Parts): Promise<void> {
    for (const c of p.issued ?? []) {
      await this.casLoop(`issued ${c.serial}`, async () => {
        const labels = { [NODE_LABEL]: nodeLabel(c.node.deviceId) };
        const cur = await this.read("issued", c.serial, Issued);
        if (!cur) return (await this.create("issued", c.serial, c, labels)) ? { done: undefined } : "retry";
        return (await this.replace("issued", c.serial, c, cur.resourceVersion, labels)) ? { done: undefined } : "retry";
      });
    }
    const u = p.runtime;
    if (u) {
      const key = nodeKey(u.node.deviceId);
      const labels = { [NODE_LABEL]: nodeLabel(u.node.deviceId) };
      await this.casLoop(`runtime of device ${u.node.deviceId}`, async () => {
        const cur = await this.read("runtime", key, Runtime);
        const next = applyRuntimeUpdate(cur?.record, u);
        if (!cur) return (await this.create("runtime", key, next, labels)) ? { done: undefined } : "retry";
        return (await this.replace("runtime", key, next, cur.resourceVersion, labels)) ? { done: undefined } : "retry";
      });
    }
    if (p.installCode) await this.putInstallCode(p.installCode);
    if (p.bootstrapToken) await this.setBootstrapToken(p.bootstrapToken.node, p.bootstrapToken.tokenId, p.bootstrapToken.expiresAt);
    for (const o of p.outbox ?? []) await this.create("outbox", o.key, o, this.outboxLabels(o));
    for (const key of p.cancel ?? []) await this.remove("outbox", key);
  }

  private sessionApplied(id: string): Promise<void> {
    return this.casLoop(`session ${id} applied`, async () => {
      const cur = await this.read("session", id, SessionStored);
      if (!cur?.record.applying) return { done: undefined };
      const { applying: _a, ...next } = cur.record;
      return (await this.replace("session", id, next, cur.resourceVersion)) ? { done: undefined } : "retry";
    });
  }

  async recover(): Promise<void> {
    for (const s of await this.list("session", SessionStored, { [APPLYING_LABEL]: "true" })) {
      if (!s.record.applying) continue;
      await this.applyParts(s.record.applying);
      await this.sessionApplied(s.record.id);
    }
    for (const c of await this.list("install-code", CodeStored, { [APPLYING_LABEL]: "true" })) {
      if (c.record.applying) await this.applyParts(c.record.applying);
      await this.removeByName(c.name);
    }
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

  private codeLabels(r: { node: NodeRef; applying?: Parts | undefined }): Record<string, string> {
    return { [NODE_LABEL]: nodeLabel(r.node.deviceId), ...(r.applying ? { [APPLYING_LABEL]: "true" } : {}) };
  }

  async putInstallCode(r: Omit<InstallCodeRecord, "claimedBy" | "claimedAt">): Promise<void> {
    const labels = { [NODE_LABEL]: nodeLabel(r.node.deviceId) };
    const name = objectName("install-code", r.codeHash);
    const record: InstallCodeRecord = { ...r, claimedBy: null, claimedAt: null };
    if (!(await this.create("install-code", r.codeHash, record, labels))) {
      // the same code again (SQLite's delete-then-insert, or a commit applied twice): replace it
      await this.casLoop(`install code for ${r.node.name}`, async () => {
        const cur = await this.read("install-code", r.codeHash, CodeStored);
        if (!cur) return (await this.create("install-code", r.codeHash, record, labels)) ? { done: undefined } : "retry";
        if (cur.record.node.deviceId !== r.node.deviceId) throw new KubeStoreError("exists", `install code exists for another node`);
        if (cur.record.finishedAt !== undefined) return { done: undefined }; // delivered meanwhile: never brought back
        return (await this.replace("install-code", r.codeHash, record, cur.resourceVersion, labels)) ? { done: undefined } : "retry";
      });
    }
    // One live code per node: a new provision replaces the previous code.
    for (const other of await this.list("install-code", CodeStored, labels)) {
      if (other.name !== name && other.record.node.deviceId === r.node.deviceId && other.record.finishedAt === undefined) await this.removeByName(other.name);
    }
  }
  claimInstallCode(codeHash: string, claimer: string, now: number, staleMs: number): Promise<InstallCodeRecord | undefined> {
    return this.casLoop(`install code claim`, async () => {
      const cur = await this.read("install-code", codeHash, CodeStored);
      if (!cur) return { done: undefined };
      const c = cur.record;
      if (c.finishedAt !== undefined || !(c.expiresAt > now) || (c.claimedBy !== null && !(c.claimedAt !== null && c.claimedAt <= now - staleMs))) return { done: undefined };
      const next = { ...c, claimedBy: claimer, claimedAt: now };
      // a lost CAS is a lost race: another claimer (or a release) changed it; never retry into a claim here
      if (!(await this.replace("install-code", codeHash, next, cur.resourceVersion, this.codeLabels(next)))) return { done: undefined };
      const { applying: _a, finishedAt: _f, ...record } = next;
      return { done: record };
    });
  }
  releaseInstallCode(codeHash: string, claimer: string): Promise<void> {
    return this.casLoop(`install code release`, async () => {
      const cur = await this.read("install-code", codeHash, CodeStored);
      if (!cur || cur.record.claimedBy !== claimer || cur.record.finishedAt !== undefined) return { done: undefined };
      const next = { ...cur.record, claimedBy: null, claimedAt: null };
      return (await this.replace("install-code", codeHash, next, cur.resourceVersion, this.codeLabels(next))) ? { done: undefined } : "retry";
    });
  }
  finishInstallCode(codeHash: string, claimer: string): Promise<boolean> {
    return this.finishCode(codeHash, (c) => c.claimedBy === claimer, {}, Date.now());
  }
  async hasInstallCodeFor(deviceId: number, now: number): Promise<boolean> {
    return (await this.list("install-code", CodeStored, { [NODE_LABEL]: nodeLabel(deviceId) })).some(
      (c) => c.record.node.deviceId === deviceId && c.record.expiresAt > now && c.record.finishedAt === undefined,
    );
  }
  /** Deleting the Secret removes the config (etcd compacts old revisions; encryption at rest is the cluster's). */
  async voidInstallCodes(deviceId: number): Promise<number> {
    let n = 0;
    for (const c of await this.list("install-code", CodeStored, { [NODE_LABEL]: nodeLabel(deviceId) })) {
      if (c.record.node.deviceId === deviceId && c.record.finishedAt === undefined && (await this.removeByName(c.name))) n++;
    }
    return n;
  }
  async takeExpiredInstallCodes(now: number, effects?: (r: InstallCodeRecord) => OutboxItem[]): Promise<InstallCodeRecord[]> {
    const out: InstallCodeRecord[] = [];
    for (const c of await this.list("install-code", CodeStored)) {
      if (c.record.expiresAt > now || c.record.finishedAt !== undefined) continue;
      const { applying: _a, finishedAt: _f, ...record } = c.record;
      const parts: Parts = { outbox: (effects?.(record) ?? []).map((i, n) => this.outboxRecord(i, now, n)) };
      if (await this.finishCode(record.codeHash, (x) => x.expiresAt <= now, parts, now)) out.push({ ...record, config: "" });
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
  async issuedBySerial(serial: string): Promise<IssuedRecord | undefined> {
    return (await this.read("issued", serial, Issued))?.record;
  }
  async getRuntime(deviceId: number): Promise<RuntimeRecord | undefined> {
    return (await this.read("runtime", nodeKey(deviceId), Runtime))?.record;
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
      if (!cur) return (await this.create("limit", key, { key, windowStart: now, count: 1 })) ? { done: { allowed: 1 <= max, count: 1 } } : "retry";
      const fresh = now - cur.record.windowStart >= windowMs;
      const next = fresh ? { key, windowStart: now, count: 1 } : { key, windowStart: cur.record.windowStart, count: cur.record.count + 1 };
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

  // ---- the outbox -----------------------------------------------------------------------------------------

  private outboxRecord(i: OutboxItem, now: number, index: number): OutboxRecord {
    // queue order: the commit's time, then its position in the commit (at most 1000 items a commit)
    return { ...i, seq: now * 1000 + Math.min(index, 999), createdAt: now, attempts: 0, lastError: null, claimedBy: null, claimedAt: null };
  }
  private outboxLabels(o: { deviceId: number | null }): Record<string, string> {
    return o.deviceId !== null ? { [NODE_LABEL]: nodeLabel(o.deviceId) } : {};
  }
  async enqueue(items: OutboxItem[], now: number): Promise<void> {
    for (const [n, i] of items.entries()) {
      const o = this.outboxRecord(i, now, n);
      await this.create("outbox", o.key, o, this.outboxLabels(o));
    }
  }
  async claimOutbox(now: number, claimer: string, staleMs: number, limit: number, deviceId?: number, due = now): Promise<OutboxEntry[]> {
    const all = (await this.list("outbox", OutboxRecord, deviceId === undefined ? {} : { [NODE_LABEL]: nodeLabel(deviceId) })).sort((a, b) => a.record.seq - b.record.seq || a.record.key.localeCompare(b.record.key));
    const heads = new Set<number>();
    const out: OutboxEntry[] = [];
    for (const o of all) {
      const r = o.record;
      if (r.deviceId !== null) {
        if (heads.has(r.deviceId)) continue; // not this device's oldest
        heads.add(r.deviceId);
      }
      if (out.length >= limit || r.notBefore > due || (r.claimedBy !== null && !(r.claimedAt !== null && r.claimedAt <= now - staleMs))) continue;
      // an item whose previous claim went stale may have been delivered by its dead claimer: count that attempt
      const next = { ...r, claimedBy: claimer, claimedAt: now, attempts: r.attempts + (r.claimedBy !== null ? 1 : 0) };
      if (await this.replace("outbox", r.key, next, o.resourceVersion, this.outboxLabels(r))) out.push(toEntry(next));
    }
    return out;
  }
  async claimOutboxRun(now: number, claimer: string, staleMs: number, deviceId: number, limit: number, due = now): Promise<OutboxEntry[]> {
    const all = (await this.list("outbox", OutboxRecord, { [NODE_LABEL]: nodeLabel(deviceId) })).sort((a, b) => a.record.seq - b.record.seq || a.record.key.localeCompare(b.record.key));
    const out: OutboxEntry[] = [];
    for (const o of all) {
      const r = o.record;
      if (out.length >= limit || r.notBefore > due || (r.claimedBy !== null && !(r.claimedAt !== null && r.claimedAt <= now - staleMs))) break;
      // as claimOutbox: a stale claim's item may have been delivered by its dead claimer
      const next = { ...r, claimedBy: claimer, claimedAt: now, attempts: r.attempts + (r.claimedBy !== null ? 1 : 0) };
      // a lost race (another replica claimed or completed it meanwhile) ends the run: it stays a prefix
      if (!(await this.replace("outbox", r.key, next, o.resourceVersion, this.outboxLabels(r)))) break;
      out.push(toEntry(next));
    }
    return out;
  }
  completeOutbox(key: string, claimer: string): Promise<void> {
    return this.casLoop(`outbox ${key}`, async () => {
      const cur = await this.read("outbox", key, OutboxRecord);
      if (!cur || cur.record.claimedBy !== claimer) return { done: undefined };
      return (await this.remove("outbox", key, cur.resourceVersion)) ? { done: undefined } : "retry";
    });
  }
  deferOutbox(key: string, claimer: string, notBefore: number, error: string): Promise<void> {
    return this.casLoop(`outbox ${key}`, async () => {
      const cur = await this.read("outbox", key, OutboxRecord);
      if (!cur || cur.record.claimedBy !== claimer) return { done: undefined };
      const next = { ...cur.record, attempts: cur.record.attempts + 1, lastError: error.slice(0, 2000), notBefore, claimedBy: null, claimedAt: null };
      return (await this.replace("outbox", key, next, cur.resourceVersion, this.outboxLabels(next))) ? { done: undefined } : "retry";
    });
  }
  async listOutbox(deviceId?: number): Promise<OutboxEntry[]> {
    return (await this.list("outbox", OutboxRecord, deviceId === undefined ? {} : { [NODE_LABEL]: nodeLabel(deviceId) })).map((o) => toEntry(o.record)).sort((a, b) => a.seq - b.seq || a.key.localeCompare(b.key));
  }

  async close(): Promise<void> {
    // nothing held open: every call is a request
  }
}
