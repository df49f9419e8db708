/**
 * Wiring from configuration to shared/: the PKCS#11 CA and its bundle state file, the SQLite state, NetBox as
 * inventory and journal, the policy engine, the Talos renderer, the attestation service, and the HTTPS (or, in
 * the lab, HTTP) listener; with `server.ha`, also the replicas' internal listener (mutual TLS only, the
 * internal API only: ha/internalListener.ts). `stop()` stops accepting on both, lets requests in flight finish
 * (bounded), closes the PKCS#11 session and the store.
 */
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { readFileSync } from "node:fs";
import { createSecureContext } from "node:tls";
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { loadCaStore, defaultPolicyDir, loadProfile, ProfileCache } from "@fleetd/platform/trust";
import { applyListenerLimits, listenerOptions } from "@fleetd/platform/http";
import { attestationAccount, ConfigError, JournalOnlyAdmission, type Admission, type Issuer, type BootstrapTokens } from "@fleetd/platform/fleet";
import { createNetBox, netboxReachable, NetBoxInventory, netboxPlatformFieldCheck, NetBoxOutboxDelivery } from "@fleetd/platform/netbox";
import {
  currentCa, type BundleState, parseIssuedCertificate, openPkcs11Signer, type Pkcs11Signer, SerialQueue,
  type CertificateSigner, bundlePem, certificatesFromPem,
} from "@fleetd/platform/pki";
import { PkiIssuer, PolicyMeasuredBoot, TalosRenderer, AttestationService, profileSelection, type RenewalSettings } from "@fleetd/platform/protocol/server";
import {
  TinkerbellAdmission, NoWorkflowGate, TinkerbellWorkflowGate, type WorkflowGate, Objects,
  tinkerbellEffectsFromConfig,
} from "@fleetd/platform/tinkerbell";
import { SqliteAttestationStore, KubeAttestationStore, type AttestationStore } from "@fleetd/platform/state";
import { KubeBootstrapTokens, KubeNodeQuarantine, loadKube, INTERNAL_URL_ANNOTATION, LeaderElector, runWhileLeader, type LeaderLoop } from "@fleetd/platform/kube";
import { createForwarder } from "./ha/forward.js";
import { internalRouter } from "./ha/internalApi.js";
import { createInternalListener, loadInternalTls } from "./ha/internalListener.js";
import { LeaderIssuer } from "./ha/leaderIssuer.js";
import { loadPeerSecret, PeerVerifier } from "./ha/peerAuth.js";
import { SharedBundleState } from "./ha/sharedBundle.js";
import { createApp } from "./app.js";
import { cachedProbe, drainServers, type Probe, type Readiness, readinessOf } from "@fleetd/platform/service";
import { startCsrGate, type CsrGate } from "./csrGate.js";
import { loadBundleStateFile, saveBundleStateFile } from "./bundleFile.js";
import type { ServerConfig } from "./config.js";
import { createMetrics } from "./metrics.js";
import { StoreLimiter } from "./rateLimit.js";
import { trustedProxies } from "./clientAddress.js";
import { stillStaged, sweepExpiredInstallCodes } from "./configFetch.js";
import { failpointsArmed } from "@fleetd/platform/outage";
import { OutboxWorker } from "@fleetd/platform/outbox";

export interface RunningServer {
  /** e.g. https://127.0.0.1:8443 */
  url: string;
  server: Server;
  /** HA: the internal listener (mutual TLS) and its URL, e.g. https://127.0.0.1:9443. */
  internal?: { url: string; server: Server };
  stop(): Promise<void>;
}

/** In-flight requests get this long after SIGTERM; then their connections are closed. */
const DRAIN_MS = 10_000;

function readTls(cfg: NonNullable<ServerConfig["server"]["tls"]>): { cert: Buffer; key: Buffer } {
  const read = (path: string, what: string): Buffer => {
    try {
      return readFileSync(path);
    } catch (e) {
      throw new ConfigError(`server.tls.${what}: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? "unreadable"}`);
    }
  };
  const tls = { cert: read(cfg.certFile, "certFile"), key: read(cfg.keyFile, "keyFile") };
  try {
    createSecureContext(tls);
  } catch (e) {
    // OpenSSL's reason (e.g. "key values mismatch"), never the key
    throw new ConfigError(`server.tls: ${cfg.certFile} and ${cfg.keyFile} do not make a TLS identity: ${(e as Error).message}`);
  }
  return tls;
}

/** The signer's key must be the issuing CA's, or every certificate would fail to chain. */
function checkSignerIsCurrentCa(signer: Pkcs11Signer, state: BundleState, path: string): void {
  const ca = currentCa(state, new Date());
  const info = parseIssuedCertificate(ca.certificatePem, `current CA in ${path}`);
  if (!Buffer.from(info.spki).equals(Buffer.from(signer.publicKey.spki))) {
    throw new ConfigError(`server.ca: the token key (${signer.description}) is not the key of the current CA "${info.subjectCn}" in ${path}`);
  }
}

/** Loops the lead wires in: the kubelet CSR gate goes here as `{ start() { gate = startCsrGate(deps) }, stop: () => gate.stop() }`. */
export interface ServerHooks {
  loops?: LeaderLoop[];
}

/** Expired sessions are deleted every minute; install codes that expired undelivered fail their node's provision. */
function sessionSweeper(store: AttestationStore, log: Logger): LeaderLoop {
  let timer: NodeJS.Timeout | undefined;
  return {
    start() {
      timer ??= setInterval(() => {
        store.expireSessions(Date.now()).catch((e: unknown) => log.error({ err: e }, "expiring sessions failed"));
        sweepExpiredInstallCodes(store, Date.now())
          .then((n) => n > 0 && log.warn({ expired: n }, "install codes expired undelivered; their provisions failed"))
          .catch((e: unknown) => log.error({ err: e }, "sweeping expired install codes failed"));
      }, 60_000);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
    },
  };
}

export async function startServer(cfg: ServerConfig, log: Logger, hooks: ServerHooks = {}): Promise<RunningServer> {
  const s = cfg.server;
  const now = () => new Date();
  // Everything that can be checked without side effects first.
  const tls = s.tls ? readTls(s.tls) : undefined;
  if (!tls) log.warn({ mode: s.mode }, "lab mode: serving plain HTTP; install codes cross the network in clear");
  const policyDir = s.policyDir ?? defaultPolicyDir();
  loadProfile(s.provisioningProfile, policyDir); // a missing or invalid profile stops the start, not the first machine
  const ekRoots = loadCaStore(s.ekRootsDir);
  if (ekRoots.certs.length === 0) log.warn({ dir: s.ekRootsDir }, "no manufacturer CA certificates: every EK that must chain will be refused");
  for (const k of ekRoots.skipped) log.warn({ file: k.source, reason: k.reason }, "EK roots: file skipped");
  let bundle = loadBundleStateFile(s.ca.bundleStateFile);
  // The management cluster's kubeconfig and the Templates' CA are read now, before the signer opens.
  const fx = tinkerbellEffectsFromConfig(cfg.site);

  const nb = createNetBox(cfg.site.netbox);
  const inventory = new NetBoxInventory(nb, { applyAccount: cfg.site.accounts.apply, attestationAccount: attestationAccount(cfg.site), roleSlugs: s.roleSlugs });
  /** HA: the issuance records shared through a Secret (ha/sharedBundle.ts); the file stays the list of CAs. */
  let sharedBundle: SharedBundleState | undefined;
  const pkiOver = (signer: CertificateSigner): Issuer =>
    new PkiIssuer({
      signer,
      state: () => bundle,
      save: async (next) => {
        await sharedBundle?.save(next); // HA: fails (nothing released) if another replica signs now
        saveBundleStateFile(s.ca.bundleStateFile, next);
        bundle = next;
      },
      lifetimeDays: s.ca.ldevidLifetimeDays,
      now,
    });

  let db: AttestationStore;
  let issuer: Issuer;
  let closeSigner: () => Promise<void>;
  let internal: Server | undefined;
  const electors: LeaderElector[] = [];
  let loopsElector: LeaderElector | undefined;
  /** The single replica's signer (HA: the leader's is behind the forwarder; readiness checks NetBox only). */
  let singleSigner: Pick<Pkcs11Signer, "available"> | undefined;
  if (!s.ha) {
    const signer = await openPkcs11Signer(s.ca.signer);
    singleSigner = signer;
    try {
      checkSignerIsCurrentCa(signer, bundle, s.ca.bundleStateFile);
      db = new SqliteAttestationStore(s.stateDb ?? "");
    } catch (e) {
      await signer.close();
      throw e;
    }
    log.info({ signer: signer.description, bundle: s.ca.bundleStateFile, stateDb: s.stateDb }, "CA signer open");
    const pki = pkiOver(signer);
    // One issuance at a time: each reads the bundle state, records itself and saves before the next starts.
    const issuing = new SerialQueue();
    issuer = { issue: (req) => issuing.run(() => pki.issue(req)) };
    closeSigner = () => signer.close();
  } else {
    const ha = s.ha;
    const secret = loadPeerSecret(ha.peerSecretFile);
    const peerTls = loadInternalTls(ha.internal.tls, new URL(ha.internalUrl).hostname);
    let kube;
    try {
      kube = loadKube(ha.kubeconfig);
    } catch (e) {
      throw new ConfigError(`server.ha.kubeconfig: ${ha.kubeconfig}: ${(e as Error).message}`);
    }
    db = new KubeAttestationStore({ kube, namespace: ha.namespace });
    const shared = new SharedBundleState(kube, ha.namespace, ha.identity);
    sharedBundle = shared;
    const lease = {
      kube,
      namespace: ha.namespace,
      identity: ha.identity,
      leaseDurationSeconds: ha.leaseDurationSeconds,
      renewDeadlineSeconds: ha.renewDeadlineSeconds,
      retryPeriodSeconds: ha.retryPeriodSeconds,
      log,
    };
    const signerElector = new LeaderElector({ ...lease, name: ha.signerLease, annotations: { [INTERNAL_URL_ANNOTATION]: ha.internalUrl } });
    loopsElector = new LeaderElector({ ...lease, name: ha.loopsLease });
    electors.push(signerElector, loopsElector);
    const leaderIssuer = new LeaderIssuer({
      elector: signerElector,
      async openSigner() {
        const signer = await openPkcs11Signer(s.ca.signer);
        try {
          // the file's CAs with the issuance records every previous leader shared
          bundle = await shared.load(loadBundleStateFile(s.ca.bundleStateFile));
          checkSignerIsCurrentCa(signer, bundle, s.ca.bundleStateFile);
        } catch (e) {
          await signer.close();
          throw e;
        }
        return signer;
      },
      issuerFor: pkiOver,
      forward: createForwarder({ elector: signerElector, secret, tls: peerTls }),
      journal: inventory,
      log,
    });
    leaderIssuer.attach();
    issuer = leaderIssuer;
    closeSigner = () => leaderIssuer.close();
    internal = createInternalListener({
      tls: peerTls,
      limits: ha.internal.listen.limits,
      router: internalRouter({ issuer: leaderIssuer, verifier: new PeerVerifier(secret, signerElector.identity, (token, expiresAt, at) => store.recordOnce(token, expiresAt, at)), secret, log }),
      log,
    });
    log.info({ namespace: ha.namespace, identity: ha.identity, signerLease: ha.signerLease, loopsLease: ha.loopsLease }, "HA: Kubernetes state; CA signer and loops on the lease holders");
  }
  const store = db;
  // Admission (intake confirmed → Hardware + the provision Workflow in Tinkerbell), when the site configuration
  // names the management cluster; otherwise a journal line asks the operator to request provision in NetBox.
  const admission: Admission = fx.effects
    ? new TinkerbellAdmission(fx.effects, inventory, netboxPlatformFieldCheck(nb, cfg.site.accounts.apply), log)
    : new JournalOnlyAdmission(inventory, fx.reason, log);
  if (!fx.effects) log.warn({ reason: fx.reason }, "no Tinkerbell effects: intake admission only journals");
  // The Workflow gate needs only the management cluster (Tinkerbell's objects), not the Template settings.
  const mgmt = cfg.site.kubernetes?.management;
  const workflows: WorkflowGate = fx.effects
    ? new TinkerbellWorkflowGate(fx.effects.objects)
    : mgmt
      ? new TinkerbellWorkflowGate(new Objects(loadKube(mgmt.kubeconfig), mgmt.namespace))
      : new NoWorkflowGate("no kubernetes.management in the site configuration: Tinkerbell's Workflows cannot be read");
  if (!mgmt) log.warn("no kubernetes.management: every attestation is refused (workflow.unavailable): nothing can show that a machine was asked to attest");
  // The workload cluster: each rendered config's bootstrap token gets its Secret there (a failure fails the
  // provision closed) and the CSR gate approves the kubelet's client certificate. Without one, nothing is
  // created in any cluster and the rendered nodes cannot join (said at start).
  const workload = cfg.site.kubernetes?.workload ? loadKube(cfg.site.kubernetes.workload.kubeconfig) : undefined;
  const bootstrapTokens: BootstrapTokens = workload
    ? new KubeBootstrapTokens(workload)
    : {
        async create(node, token) {
          log.warn({ node, tokenId: token.id }, "no workload cluster configured (kubernetes.workload): bootstrap token Secret not created");
        },
        delete: async () => false,
      };
  if (!workload) log.warn("no workload cluster configured (kubernetes.workload): no bootstrap token Secrets, no CSR gate; rendered nodes cannot join a cluster");
  // A single server owns its state: no request of an earlier process is still running, so claims it held go.
  if (!s.ha) {
    const released = await store.releaseAllClaims();
    if (released > 0) log.warn({ released }, "claims left by a previous process released (its requests did not finish; they can be retried)");
  }
  const armed = failpointsArmed();
  if (armed.length > 0) log.warn({ failpoints: armed }, "FLEETD_FAILPOINTS is set: this process stops itself at those points (tests only)");
  const metrics = createMetrics({
    pendingEks: async () => (await store.listPendingEks()).length,
    outbox: async () => {
      const items = await store.listOutbox();
      const oldest = items.reduce((m, i) => Math.min(m, i.createdAt), Date.now());
      return { items: items.length, oldestSeconds: items.length ? (Date.now() - oldest) / 1000 : 0 };
    },
  });
  // What the steps committed for NetBox and the workload cluster, delivered in order per device, across
  // outages and restarts (every replica runs one; claims keep them apart).
  const outbox = new OutboxWorker({
    store,
    delivery: new NetBoxOutboxDelivery({ nb, inventory, bootstrapTokens, store, ...(workload ? { quarantine: new KubeNodeQuarantine(workload) } : {}) }),
    log,
    onDelivery: (kind, outcome) => metrics.outboxDeliveries.inc({ kind, outcome }),
    staleMs: s.ttl.staleClaimSeconds * 1000,
  });
  // Renewal with runtime attestation: each node class's profile (site configuration `runtime.profiles`), loaded
  // now so a missing one is said at start; a class whose profile does not load is refused at its challenge.
  const runtimeProfiles: Record<string, string> = {};
  for (const [cls, profile] of Object.entries(cfg.site.runtime.profiles)) {
    try {
      loadProfile(profile, policyDir);
      runtimeProfiles[cls] = profile;
    } catch (e) {
      log.warn({ class: cls, profile, err: (e as Error).message }, "runtime profile does not load: nodes of this class cannot renew");
    }
  }
  // one cache of the profiles (read again only when a profile file changes) for the measured-boot judge and renewal
  const profileCache = new ProfileCache(policyDir);
  const renewal: RenewalSettings = {
    caBundle: () => certificatesFromPem(bundlePem(bundle, now()), "CA bundle"),
    profiles: runtimeProfiles,
    selection: (profile) => profileSelection(profileCache.load(profile)),
    onVerdict: (verdict, profile) => metrics.runtimeVerdicts.inc({ verdict, profile }),
    onQuarantine: (node, profile, reasons) => {
      metrics.quarantines.inc({ profile });
      log.warn({ node: node.name, deviceId: node.deviceId, profile, checks: reasons.map((r) => r.check) }, "worker quarantined: authenticated runtime quote missed its profile; Node cordoned, renewal refused until an operator attests it");
    },
    onAlert: (node, profile, reasons) => {
      metrics.quarantineAlerts.inc({ profile });
      log.error({ node: node.name, deviceId: node.deviceId, profile, checks: reasons.map((r) => r.check) }, "control plane failed runtime attestation: alert (not cordoned, not quarantined)");
    },
  };
  if (!workload) log.warn("no workload cluster configured (kubernetes.workload): quarantined workers are not cordoned");
  let lastUnauthLog = 0;
  const service = new AttestationService({
    renewal,
    store,
    inventory,
    journal: inventory,
    measuredBoot: new PolicyMeasuredBoot(s.siteAuthoritiesDir, profileCache),
    issuer,
    renderer: new TalosRenderer(cfg.talos, s.talos.bootstrapTokenTtlSeconds * 1000, now),
    bootstrapTokens,
    admission,
    workflows,
    ekRoots,
    settings: {
      sessionTtlMs: s.ttl.sessionSeconds * 1000,
      installCodeTtlMs: s.ttl.installCodeSeconds * 1000,
      provisioningProfile: s.provisioningProfile,
      gates: cfg.gates,
      allowExpiredEkCertificates: s.allowExpiredEkCertificates,
      maxPendingEks: s.maxPendingEks,
      renewBeforeMs: s.renewBeforeDays * 86_400_000,
      unauthenticatedJournalWindowMs: 10 * 60_000,
      claimStaleMs: s.ttl.staleClaimSeconds * 1000,
    },
    outbox,
    onUnauthenticatedRefusal: (step, reasons) => {
      metrics.unauthenticatedRefusals.inc({ step });
      const t = Date.now();
      if (t - lastUnauthLog < 10_000) return; // one log line per 10 s at most; the counter has the rest
      lastUnauthLog = t;
      log.warn({ step, checks: reasons.map((r) => r.check) }, "attestation refused before credential activation (unauthenticated)");
    },
    onOutage: (step, outage) => {
      metrics.outages.inc({ step, reason: outage.reason });
      log.warn({ step, reason: outage.reason, detail: outage.detail }, "dependency unavailable: answered 503, nothing spent");
    },
    now,
    random: (n) => new Uint8Array(randomBytes(n)),
  });
  // Readiness (the service kit's /readyz): NetBox reachable, the state store answering, the CA signer (one
  // replica) or a known leader of the signer's Lease (HA). Probes that reach a server are cached for 5 s.
  const probes: Record<string, Probe> = {
    netbox: cachedProbe(5_000, () => netboxReachable(nb, 3_000)),
    state: cachedProbe(5_000, async () => {
      await store.getSession("readyz-probe");
      return { ok: true } as const;
    }),
  };
  const signerProbe = singleSigner;
  if (signerProbe) probes["signer"] = () => signerProbe.available();
  const signerElector = electors[0];
  if (signerElector) probes["leader"] = async () => signerElector.leaderStatus();
  const ready: () => Promise<Readiness> = readinessOf(probes);
  const app = createApp({
    service,
    store,
    limiter: new StoreLimiter(
      store,
      { max: s.rateLimit.maxFailures, windowMs: s.rateLimit.windowSeconds * 1000 },
      { max: s.rateLimit.attestRequests, windowMs: s.rateLimit.attestWindowSeconds * 1000 },
    ),
    trustedProxies: trustedProxies(s.trustedProxies),
    log,
    metrics,
    outbox,
    stillWanted: (node) => stillStaged(inventory, node),
    now: () => Date.now(),
    staleClaimMs: s.ttl.staleClaimSeconds * 1000,
    bodyLimit: `${s.bodyLimitBytes}b`,
    steps: s.steps,
    ready,
  });
  // Connection caps and short timeouts, per source too (one policy for every fleetd listener).
  const limits = listenerOptions(s.listen.limits);
  const server: Server = tls ? createHttpsServer({ ...tls, minVersion: "TLSv1.2", ...limits }, app) : createHttpServer(limits, app);
  applyListenerLimits(server, s.listen.limits);
  const listen = (srv: Server, where: { host: string; port: number }, field: string) =>
    new Promise<void>((resolve, reject) => {
      srv.once("error", reject);
      srv.listen(where.port, where.host, () => {
        srv.off("error", reject);
        resolve();
      });
    }).catch((e: unknown) => {
      throw new ConfigError(`${field}cannot listen on ${where.host}:${where.port}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    });
  const urlOf = (srv: Server, where: { host: string; port: number }, scheme: string) => {
    const addr = srv.address();
    const port = addr && typeof addr === "object" ? addr.port : where.port;
    return `${scheme}://${where.host.includes(":") ? `[${where.host}]` : where.host}:${port}`;
  };
  try {
    await listen(server, s.listen, "");
    // The internal listener is up before this replica campaigns (the Lease publishes internalUrl).
    if (internal && s.ha) await listen(internal, s.ha.internal.listen, "server.ha.internal.listen: ");
  } catch (e) {
    if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
    await closeSigner();
    await store.close();
    throw e;
  }
  const url = urlOf(server, s.listen, tls ? "https" : "http");
  log.info({ url, mode: s.mode }, "talos-config-server listening");
  const internalUrl = internal && s.ha ? urlOf(internal, s.ha.internal.listen, "https") : undefined;
  if (internalUrl) log.info({ url: internalUrl, published: s.ha?.internalUrl }, "internal listener (replicas only, mutual TLS) listening");

  // The kubelet bootstrap CSR gate (workload cluster): one of the server's loops, so with HA it runs only on
  // the loops Lease's holder and two replicas never judge the same CSR at once.
  let gate: CsrGate | undefined;
  const csrGateLoop: LeaderLoop | undefined =
    workload && s.csrGate.run
      ? {
          start() {
            gate = startCsrGate({ kube: workload, store, journal: inventory, log, registry: metrics.registry, now, intervalMs: s.csrGate.intervalSeconds * 1000, tokenGraceMs: s.csrGate.tokenGraceSeconds * 1000 });
          },
          async stop() {
            const g = gate;
            gate = undefined;
            await g?.stop();
          },
        }
      : undefined;
  // The server's loops: with HA only on the loops Lease's holder, else here.
  const loops: LeaderLoop[] = [sessionSweeper(store, log), ...(csrGateLoop ? [csrGateLoop] : []), ...(hooks.loops ?? [])];
  const detach: (() => Promise<void>)[] = [];
  if (loopsElector) for (const l of loops) detach.push(runWhileLeader(loopsElector, l));
  else for (const l of loops) await l.start();
  for (const e of electors) e.start();
  outbox.start();

  let stopping: Promise<void> | undefined;
  const listeners = internal ? [server, internal] : [server];
  return {
    url,
    server,
    ...(internal && internalUrl ? { internal: { url: internalUrl, server: internal } } : {}),
    stop() {
      stopping ??= (async () => {
        // Both listeners stop accepting; requests in flight (a forwarded issuance too) get DRAIN_MS.
        await drainServers(listeners, DRAIN_MS);
        if (electors.length > 0) {
          for (const d of detach) await d();
          for (const e of electors) await e.stop(); // steps down: the signer closes, the Leases are released
        } else {
          for (const l of loops) await l.stop();
        }
        await outbox.stop(); // what is still queued stays in the store for the next start (or another replica)
        await closeSigner();
        await store.close();
        log.info(internal ? "talos-config-server stopped: listeners (public, internal) closed, PKCS#11 session closed, state closed" : "talos-config-server stopped: listener closed, PKCS#11 session closed, state closed");
      })();
      return stopping;
    },
  };
}
