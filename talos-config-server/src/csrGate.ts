/**
 * The kubelet bootstrap CSR gate's loop (the judgement is shared/platform/src/kube/csrGate.ts). A pass runs when the
 * watch (a client-node informer on CertificateSigningRequests) sees a CSR added or changed — a new CSR is decided
 * within the round trip, not after a poll — and every `intervalMs` as a resync (a missed event, a restarted
 * watch). Passes never overlap; events during a pass queue exactly one more. A pass: list the workload cluster's CSRs; for each kubelet client CSR from a bootstrap token with no Approved/Denied/
 * Failed condition yet, look up what fleetd rendered for the token, judge, and write an Approved or Denied
 * condition through the `approval` subresource (the object's resourceVersion makes it a compare-and-swap:
 * a CSR someone else settled meanwhile is not touched, and the next pass sees its condition and skips it).
 * Both outcomes are journalled with their reasons. After an approval the store's token record is deleted at
 * once (the token approves nothing more) and the token's Secret once the certificate is issued and
 * `tokenGraceMs` has passed (the kubelet reads its issued certificate with the bootstrap token); expired
 * fleetd tokens are deleted too. Everything else (renewals by system:node:*, other signers, other requesters,
 * Secrets not labelled fleetd's) is left alone.
 *
 * `startCsrGate(deps)` returns `{ stop, sync }`: run it only on the leader (leader election wraps start/stop).
 */
import * as k8s from "@kubernetes/client-node";
import type { Logger } from "pino";
import { Counter, Gauge, type Registry } from "prom-client";
import { formatReasons } from "@fleetd/verify/attest";
import {
  KubeBootstrapTokens, type Kube, BOOTSTRAP_USER_PREFIX, CsrObject, gateScope, JournalBudget, judgeBootstrapCsr,
  judgementOrder, type CsrDecision, type RenderedToken,
} from "@fleetd/platform/kube";
import { mdCode } from "@fleetd/verify/text";
import type { Journal } from "@fleetd/platform/fleet";
import type { AttestationStore, NodeRef } from "@fleetd/platform/state";

export const APPROVED_REASON = "FleetdApproved";
export const DENIED_REASON = "FleetdDenied";

export interface CsrGateDeps {
  /** The workload cluster, as fleetd's service account (RBAC: talos-config-server/manifests/csr-gate-rbac.yaml). */
  kube: Kube;
  store: Pick<AttestationStore, "nodeForBootstrapToken" | "getBootstrapToken" | "deleteBootstrapToken">;
  journal: Journal;
  log: Logger;
  /** Metrics are registered here when given. */
  registry?: Registry;
  now?: () => Date;
  /** Time between resync passes; default 60 s (new CSRs are decided on the watch's event, not by this). */
  intervalMs?: number;
  /** Watch CSRs and run a pass on each change; default true (false: passes only by interval and `sync()`). */
  watch?: boolean;
  /** Delay before a failed watch is started again; default 5 s. */
  watchRetryMs?: number;
  /** How long after its certificate is issued an approved token's Secret is kept; default 120 s. */
  tokenGraceMs?: number;
  /** Denials journalled per bootstrap token and window (the rest are logged and counted); default 5 per hour. */
  journalBudget?: { perWindow: number; windowMs: number };
}

export interface SyncResult {
  approved: string[];
  denied: string[];
  ignored: number;
  conflicts: number;
  tokensDeleted: string[];
}

export interface CsrGate {
  /** One pass now (passes never overlap). */
  sync(): Promise<SyncResult>;
  stop(): Promise<void>;
}

function gateMetrics(registry: Registry | undefined) {
  const registers = registry ? [registry] : [];
  return {
    decisions: new Counter({ name: "fleetd_csr_gate_decisions_total", help: "Kubelet bootstrap CSRs judged by the gate, by decision", labelNames: ["outcome"], registers }),
    errors: new Counter({ name: "fleetd_csr_gate_errors_total", help: "Gate passes or CSR updates that failed", registers }),
    tokensDeleted: new Counter({ name: "fleetd_csr_gate_tokens_deleted_total", help: "fleetd bootstrap token Secrets deleted (used or expired)", registers }),
    lastSync: new Gauge({ name: "fleetd_csr_gate_last_sync_timestamp_seconds", help: "Unix time of the last completed gate pass", registers }),
    watchEvents: new Counter({ name: "fleetd_csr_gate_watch_events_total", help: "CSR changes seen by the gate's watch, by event", labelNames: ["event"], registers }),
  };
}

function condition(d: Exclude<CsrDecision, { action: "ignore" }>, now: Date): k8s.V1CertificateSigningRequestCondition {
  const approved = d.action === "approve";
  const message = approved
    ? `fleetd: bootstrap token ${d.tokenId} was rendered for node ${d.node}; subject, SANs and usages are a kubelet client certificate's`
    : `fleetd: ${d.reasons.map((r) => `${r.check}: ${r.detail}`).join("; ")}`;
  return { type: approved ? "Approved" : "Denied", status: "True", reason: approved ? APPROVED_REASON : DENIED_REASON, message: message.slice(0, 4000), lastUpdateTime: now };
}

/** Approved by this gate, and when. */
function fleetdApproval(csr: k8s.V1CertificateSigningRequest): Date | undefined {
  const c = csr.status?.conditions?.find((x: k8s.V1CertificateSigningRequestCondition) => x.type === "Approved" && x.reason === APPROVED_REASON);
  if (!c) return undefined;
  return c.lastUpdateTime ? new Date(c.lastUpdateTime) : new Date(0);
}

export function startCsrGate(deps: CsrGateDeps): CsrGate {
  const now = deps.now ?? (() => new Date());
  const intervalMs = deps.intervalMs ?? 60_000;
  const graceMs = deps.tokenGraceMs ?? 120_000;
  const tokens = new KubeBootstrapTokens(deps.kube);
  const m = gateMetrics(deps.registry);
  const log = deps.log.child({ loop: "csr-gate" });
  const budget = new JournalBudget(deps.journalBudget?.perWindow, deps.journalBudget?.windowMs);

  /** The node (device ID and name) each token judged in this pass was rendered for: state and journal go by
   * device ID. Cleared at each pass's start: tokens are single use and expire, so nothing outlives a pass. */
  const refs = new Map<string, NodeRef>();

  async function rendered(tokenId: string): Promise<RenderedToken | undefined> {
    const node = await deps.store.nodeForBootstrapToken(tokenId);
    if (node === undefined) return undefined;
    const t = await deps.store.getBootstrapToken(node.deviceId);
    if (!t || t.tokenId !== tokenId) return undefined;
    refs.set(tokenId, node);
    return { node: node.name, expiresAt: t.expiresAt };
  }

  async function apply(raw: k8s.V1CertificateSigningRequest, d: Exclude<CsrDecision, { action: "ignore" }>, at: Date): Promise<"done" | "conflict"> {
    const body: k8s.V1CertificateSigningRequest = { ...raw, status: { ...raw.status, conditions: [...(raw.status?.conditions ?? []), condition(d, at)] } };
    try {
      await deps.kube.certificates.replaceCertificateSigningRequestApproval({ name: d.csr, body });
    } catch (e) {
      const code = (e as { code?: unknown }).code;
      if (code === 409 || code === 404) return "conflict"; // changed or gone meanwhile: the next pass sees it
      throw e;
    }
    return "done";
  }

  async function pass(): Promise<SyncResult> {
    const at = now();
    refs.clear();
    const r: SyncResult = { approved: [], denied: [], ignored: 0, conflicts: 0, tokensDeleted: [] };
    const list = await deps.kube.certificates.listCertificateSigningRequest();
    const usedTokens = new Map<string, Date>(); // fleetd-approved tokens whose certificate is out, and when
    // Creation order, never the name (shared/platform/src/kube/csrGate.ts): a CSR named to sort first gains nothing.
    const { order, contested } = judgementOrder(list.items);
    for (const raw of order) {
      const parsed = CsrObject.safeParse(raw);
      if (!parsed.success) {
        log.warn({ csr: raw.metadata?.name }, "CSR object does not have the expected shape; skipped");
        r.ignored++;
        continue;
      }
      const csr = parsed.data;
      const approvedAt = fleetdApproval(raw);
      if (approvedAt && csr.spec.username?.startsWith(BOOTSTRAP_USER_PREFIX) && (csr.status?.certificate || csr.status?.conditions?.some((c) => c.type === "Failed"))) {
        usedTokens.set(csr.spec.username.slice(BOOTSTRAP_USER_PREFIX.length), approvedAt);
      }
      const scope = gateScope(csr);
      if ("why" in scope) {
        r.ignored++;
        continue;
      }
      const d = judgeBootstrapCsr(csr, scope.tokenId, await rendered(scope.tokenId), at, contested.get(csr.metadata.name));
      if (d.action === "ignore") continue;
      try {
        if ((await apply(raw, d, at)) === "conflict") {
          r.conflicts++;
          continue;
        }
      } catch (e) {
        m.errors.inc();
        log.error({ csr: d.csr, status: (e as { code?: unknown }).code, err: e }, "writing the CSR's condition failed; retried next pass");
        continue;
      }
      if (d.action === "approve") {
        r.approved.push(d.csr);
        m.decisions.inc({ outcome: "approved" });
        const ref = refs.get(d.tokenId);
        if (ref) await deps.store.deleteBootstrapToken(ref.deviceId); // single use: the token approves nothing more
        log.info({ csr: d.csr, node: d.node, tokenId: d.tokenId }, "kubelet bootstrap CSR approved");
        await deps.journal.record(ref ?? d.node, { kind: "success", summary: `kubelet bootstrap CSR ${d.csr} approved: client certificate for system:node:${d.node} (bootstrap token ${d.tokenId}, now spent)` });
      } else {
        r.denied.push(d.csr);
        m.decisions.inc({ outcome: "denied" });
        log.warn({ csr: d.csr, node: d.node, tokenId: d.tokenId, reasons: d.reasons }, "kubelet bootstrap CSR denied");
        const b = budget.take(d.tokenId, at.getTime());
        if (b !== "quiet") {
          const more = b === "last" ? `; further denials for bootstrap token ${d.tokenId} are not journalled for ${Math.round(budget.windowMs / 60_000)} min (logged and counted in fleetd_csr_gate_decisions_total)` : "";
          await deps.journal.record(refs.get(d.tokenId) ?? d.node, {
            kind: "danger",
            // the reasons quote the request's subject: untrusted text
            summary: `kubelet bootstrap CSR ${d.csr} from ${csr.spec.username} denied: ${mdCode(formatReasons(d.reasons).replace(/\n/g, "; "), 1500)}${more}`,
            reasons: d.reasons,
          });
        }
      }
    }
    // Token Secrets: used ones after the grace period, expired ones at once. Only fleetd's (by label).
    for (const t of await tokens.list()) {
      const used = usedTokens.get(t.tokenId);
      const expired = t.expiresAt !== undefined && t.expiresAt.getTime() <= at.getTime();
      if (!expired && !(used && at.getTime() - used.getTime() >= graceMs)) continue;
      if (await tokens.delete(t.tokenId)) {
        r.tokensDeleted.push(t.tokenId);
        m.tokensDeleted.inc();
        log.info({ tokenId: t.tokenId, node: t.node, why: expired ? "expired" : "used" }, "bootstrap token Secret deleted");
        await deps.journal.record(t.node || undefined, { kind: "info", summary: `bootstrap token ${t.tokenId} deleted from the cluster (${expired ? "expired" : "used: the kubelet's client certificate was issued"})` });
      }
    }
    m.lastSync.set(Date.now() / 1000);
    return r;
  }

  let chain: Promise<unknown> = Promise.resolve();
  const sync = (): Promise<SyncResult> => {
    const p = chain.catch(() => undefined).then(pass);
    chain = p;
    return p;
  };
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;

  // The watch: a change queues one pass (at most one waits; it lists everything, so one is enough).
  let queued: Promise<SyncResult> | undefined;
  const kick = (event: string): void => {
    m.watchEvents.inc({ event });
    if (stopped || queued) return;
    const p = chain.catch(() => undefined).then(() => {
      queued = undefined;
      return stopped ? { approved: [], denied: [], ignored: 0, conflicts: 0, tokensDeleted: [] } : pass();
    });
    chain = p;
    queued = p;
    p.catch((e: unknown) => {
      m.errors.inc();
      log.error({ status: (e as { code?: unknown }).code, err: e }, "CSR gate pass (on a watch event) failed; the next event or resync retries");
    });
  };
  let informer: k8s.Informer<k8s.V1CertificateSigningRequest> | undefined;
  let watchTimer: NodeJS.Timeout | undefined;
  const startWatch = (): void => {
    if (stopped || !informer) return;
    informer.start().catch((e: unknown) => restartWatch("CSR watch could not start; retried", e));
  };
  /** One pending restart at most, whichever of start's failure and the informer's error reports the break. */
  const restartWatch = (msg: string, e: unknown): void => {
    log.warn({ err: (e as Error | undefined)?.message }, msg);
    if (stopped) return;
    if (watchTimer) clearTimeout(watchTimer);
    watchTimer = setTimeout(startWatch, deps.watchRetryMs ?? 5000);
  };
  if (deps.watch ?? true) {
    informer = k8s.makeInformer(deps.kube.config, "/apis/certificates.k8s.io/v1/certificatesigningrequests", () => deps.kube.certificates.listCertificateSigningRequest());
    informer.on(k8s.ADD, () => kick("add"));
    informer.on(k8s.UPDATE, () => kick("update"));
    // The informer stops on an error (the API server restarted, the connection dropped): start it again.
    informer.on(k8s.ERROR, (e: unknown) => restartWatch("CSR watch ended with an error; restarting it", e));
    startWatch();
  }
  const loop = (): void => {
    if (stopped) return;
    sync()
      .catch((e: unknown) => {
        m.errors.inc();
        log.error({ status: (e as { code?: unknown }).code, err: e }, "CSR gate pass failed; retried next interval");
      })
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, intervalMs);
      });
  };
  loop();
  return {
    sync,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      if (watchTimer) clearTimeout(watchTimer);
      await informer?.stop().catch(() => undefined);
      await chain.catch(() => undefined);
    },
  };
}
