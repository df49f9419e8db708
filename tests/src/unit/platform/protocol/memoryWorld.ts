/**
 * The attestation world of tests/src/attestation/world.ts without a real platform, for unit tests of the
 * protocol engine (shared/platform/src/protocol/server): the AttestationService over the SQLite state store in
 * memory and the in-memory adapters of @fleetd/testkit/memoryAdapters (inventory, journal, outbox delivery,
 * software CA, bootstrap tokens, admission, Workflow gate), and machines whose TPM is @fleetd/testkit/softwareTpm
 * — a node:crypto model of a TPM, not swtpm — with the world's HookOS boot in its PCRs and event log.
 *
 * The machines are driven like machine.ts drives a real TPM: the same steps, each with the options that make a
 * machine misbehave in exactly one way. Requests go to the service in-process, as JSON (the same bodies the
 * HTTP server would parse); `configServer()` starts talos-config-server's app on loopback for the config fetch.
 */
import { createServer, type Server } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { hex } from "@fleetd/verify/crypto";
import type { TPMT_PUBLIC } from "@fleetd/verify/tpm";
import { PolicyMeasuredBoot, profileSelection, type AttestationService, type RenewalSettings } from "@fleetd/platform/protocol/server";
import { ProfileCache } from "@fleetd/platform/trust";
import { certificatesFromPem } from "@fleetd/platform/pki";
import { DEFAULT_RUNTIME_PROFILES } from "@fleetd/platform/fleet";
import { call, DEFAULT_QUOTE_SELECTION, postStep, RENEW_PATHS, selectionFromWire, tpm2b, type ConfirmWire, type EvidenceWire, type RenewEvidenceWire, type ServerTransport } from "@fleetd/platform/protocol/client";
import {
  certifyExtraData, claimsHash, confirmMessage, quoteExtraData, renewConfirmMessage, renewPossessionMessage, renewQuoteExtraData, type ChallengeResponse, type Claims, type ConfirmResponse, type EvidenceResponse,
  type RenewChallengeResponse, type RenewConfirmResponse, type RenewEvidenceResponse,
} from "@fleetd/platform/protocol";
import type { Node } from "@fleetd/platform/fleet";
import { OutboxWorker } from "@fleetd/platform/outbox";
import { akTemplate, lakTemplate, ldevidTemplate, type KeyAlg } from "@fleetd/platform/tpmclient";
import { bootScenario, makeLabKeys, writeSiteAuthorities, type LabKeys, type ScenarioOptions } from "@fleetd/testkit/bootScenarios";
import { siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { SoftwareTpm, softwareKey, softwareManufacturer, type SoftwareEk, type SoftwareKey } from "@fleetd/testkit/softwareTpm";
import {
  AcceptingWorkflowGate, MemoryAdmission, MemoryBootstrapTokens, MemoryInventory, MemoryJournal, MemoryOutboxDelivery, memoryIssuer,
} from "@fleetd/testkit/memoryAdapters";
import { createMetrics } from "@fleetd/talos-config-server/metrics";
import { CountingStore, testAttestationService, testConfigApp } from "../../../attestation/testServer.js";
import { TALOS_VERSION } from "../../../talos/goTools.js";
import { b64, unb64, type ChallengeOptions, type Evidence, type EvidenceOptions as CommonEvidenceOptions, type MachineOn, type Session } from "../../../attestation/machineTypes.js";

export const NODE = "worker-1";


/** A further machine, on the node it is named after (world.ts MachineSpec). */
export interface MachineSpec {
  boot?: ScenarioOptions;
  /** Who made its TPM: the world's EK CA, which the server trusts (default), or a CA of its own, which it does not. */
  manufacturer?: "world" | "foreign";
  /** The node approves its EKs with `chain: false` (default true). */
  chain?: boolean;
}

/** A machine of the world: its (software) TPM, what it claims and the log of its boot. */
export interface WorldMachine {
  node: string;
  tpm: SoftwareTpm;
  bindings: { rsa: string; ecc: string };
  claims: (over?: Partial<Claims>) => Claims;
  eventLog: Uint8Array;
}


export interface MemoryWorld {
  store: CountingStore;
  inventory: MemoryInventory;
  journal: MemoryJournal;
  admission: MemoryAdmission;
  bootstrapTokens: MemoryBootstrapTokens;
  service: AttestationService;
  /** The outbox worker (not started: steps flush their node's items themselves; `flush` delivers the rest). */
  outbox: OutboxWorker;
  transport: ServerTransport;
  machines: Record<string, WorldMachine>;
  deviceId(name: string): number;
  /** The texts of the journal entries on the node's device. */
  journalOf(name: string): string[];
  signatures(): number;
  installCodesIssued(): number;
  /** The lab keys the boots are signed with (for other boots, e.g. a Talos one). */
  keys: LabKeys;
  /** Names of the Nodes the outbox cordoned (kube.quarantine), as a workload cluster would hold them. */
  cordoned: Set<string>;
  /** Moves the server's clock (ms from now; the certificates' validity stays as issued). */
  advanceClock(ms: number): void;
  /** What the renewal callbacks reported: quarantines and control-plane alerts by node name. */
  quarantines: string[];
  alerts: string[];
  /** talos-config-server's app over the same service and store, on loopback (started on first use). */
  configServer(): Promise<{ baseUrl: string }>;
  stop(): Promise<void>;
}

export async function startMemoryWorld(opts: { machines?: Record<string, MachineSpec> } = {}): Promise<MemoryWorld> {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-memory-world-"));
  let offset = 0;
  const now = () => new Date(Date.now() + offset);
  const keys = await makeLabKeys();
  const site = writeSiteAuthorities(join(dir, "site"), keys);
  const maker = softwareManufacturer("fleetd world EK CA");

  const inventory = new MemoryInventory();
  const journal = new MemoryJournal(inventory);
  const bootstrapTokens = new MemoryBootstrapTokens();
  const admission = new MemoryAdmission();
  const store = new CountingStore(":memory:");
  const ca = await memoryIssuer({ now });

  // The machines and their nodes: worker-1 as in the example nodes file, the others copies with their own serial,
  // switch port and addresses (world.ts does the same in its nodes file).
  const specs: [string, MachineSpec][] = [[NODE, {}], ...Object.entries(opts.machines ?? {})];
  const machines: Record<string, WorldMachine> = {};
  specs.forEach(([name, spec], i) => {
    // A foreign manufacturer's CA has the world CA's name and a key of its own, as each swtpm's "swtpm-localca"
    // does: its EK certificates find a CA of that name in the store, and its signature does not verify.
    const tpm = new SoftwareTpm({ manufacturer: spec.manufacturer === "foreign" ? softwareManufacturer(maker.name) : maker });
    const boot = bootScenario("hookos", keys, spec.boot ?? {});
    for (const e of boot.extends()) tpm.extend(e.pcr, e.digests);
    const n = 40 + i - 1;
    const deviceId = i + 1;
    const chain = spec.chain !== false;
    const node: Node = {
      deviceId,
      name,
      serial: name === NODE ? "7XK2LM4" : `7XK2LM4-${n}`,
      class: "talos",
      role: "worker",
      tpm: "2.0",
      ekBindings: [
        { binding: tpm.eks.rsa.binding, alg: "rsa", chain },
        { binding: tpm.eks.ecc.binding, alg: "ecc", chain },
      ],
      status: "planned",
      desiredAction: null,
      macs: [],
      switchPort: { device: "tor-a1", port: name === NODE ? "ethernet1/1/2" : `ethernet1/1/${n}` },
      unattributed: [],
      switchPortWaived: false,
      address: name === NODE ? "10.20.0.21/24" : `10.20.0.${n}/24`,
      gateway: "10.20.0.1",
      installDisk: "/dev/nvme0n1",
    };
    inventory.put(node);
    const suffix = (i - 1).toString(16).padStart(2, "0");
    const mac = name === NODE ? "b0:7b:25:00:00:21" : `b0:7b:25:00:01:${suffix}`;
    machines[name] = {
      node: name,
      tpm,
      bindings: { rsa: tpm.eks.rsa.binding, ecc: tpm.eks.ecc.binding },
      claims: (over: Partial<Claims> = {}): Claims => ({
        serial: node.serial,
        uuid: name === NODE ? "4c4c4544-0058-4b10-8032-b7c04f4d3332" : `4c4c4544-0058-4b10-8032-b7c04f4d33${suffix}`,
        macs: [mac],
        lldp: { chassisId: "tor-a1", portId: node.switchPort?.port ?? "" },
        mode: "intake",
        ...over,
        workflow: over.workflow ?? `fleetd-${name}-${over.mode ?? "intake"}-memory`,
      }),
      eventLog: boot.bytes(),
    };
  });

  const log = pino({ level: "silent" });
  const cordoned = new Set<string>();
  const quarantines: string[] = [];
  const alerts: string[] = [];
  const outbox = new OutboxWorker({ store, delivery: new MemoryOutboxDelivery({ inventory, journal, bootstrapTokens, quarantine: cordoned }), log, staleMs: 60_000 });
  const profiles = new ProfileCache(); // as talos-config-server: read again only when a profile file changes
  const renewal: RenewalSettings = {
    caBundle: () => certificatesFromPem(ca.caPem),
    profiles: DEFAULT_RUNTIME_PROFILES,
    selection: (profile) => profileSelection(profiles.load(profile)),
    onQuarantine: (node) => void quarantines.push(node.name),
    onAlert: (node) => void alerts.push(node.name),
  };
  // Not started: no timers. Every step flushes its node's items itself (step.ts, service.ts), so what a step
  // committed is in the inventory and journal when its answer comes back.
  const service = testAttestationService(
    {
      store,
      inventory,
      journal,
      measuredBoot: new PolicyMeasuredBoot(site),
      issuer: ca.issuer,
      bootstrapTokens,
      admission,
      workflows: new AcceptingWorkflowGate(),
      ekRoots: maker.store(),
      outbox,
      now,
      renewal,
    },
    siteConfigFixture(TALOS_VERSION),
  );
  const transport: ServerTransport = {
    async post(path, body) {
      // as the HTTP server hands it over: parsed JSON
      const json: unknown = JSON.parse(JSON.stringify(body));
      const renew = path.startsWith("/v1/renew/");
      const out = renew
        ? path.endsWith("/challenge")
          ? await service.renewChallenge(json)
          : path.endsWith("/evidence")
            ? await service.renewEvidence(json)
            : await service.renewConfirm(json)
        : path.endsWith("/challenge")
          ? await service.challenge(json, "127.0.0.1")
          : path.endsWith("/evidence")
            ? await service.evidence(json)
            : await service.confirm(json);
      return out.ok ? { status: 200, body: out.body } : { status: out.status, body: out.body };
    },
  };

  let server: Server | undefined;
  let baseUrl = "";
  const deviceId = (name: string): number => {
    const [n] = inventory.byName(name);
    if (!n) throw new Error(`no node ${name}`);
    return n.deviceId;
  };
  return {
    store,
    inventory,
    journal,
    admission,
    bootstrapTokens,
    service,
    outbox,
    transport,
    machines,
    deviceId,
    journalOf: (name) => journal.of(deviceId(name)),
    keys,
    cordoned,
    advanceClock: (ms) => void (offset += ms),
    quarantines,
    alerts,
    signatures: ca.signatures,
    installCodesIssued: () => store.installCodes,
    async configServer() {
      if (server) return { baseUrl };
      const app = testConfigApp({ service, store, inventory, log, metrics: createMetrics(), outbox });
      const s = createServer(app);
      await new Promise<void>((res) => s.listen(0, "127.0.0.1", res));
      server = s;
      baseUrl = `http://127.0.0.1:${(s.address() as { port: number }).port}`;
      return { baseUrl };
    },
    async stop() {
      const s = server;
      if (s) await new Promise<void>((res) => s.close(() => res()));
      await outbox.stop();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// ---- the machine: machine.ts's steps on the software TPM ----

export type Machine = MachineOn<SoftwareTpm>;

export function machineOf(wm: WorldMachine, server: ServerTransport, alg: KeyAlg = "rsa"): Machine {
  return { tpm: wm.tpm, server, alg, eventLog: wm.eventLog };
}

/** A challenged session, as the machine remembers it. */
export type Challenged = Session<SoftwareEk, SoftwareKey>;

/** Step 1. Throws AttestationRefused when the server refuses. */
export async function challenge(m: Machine, claims: Claims, o: ChallengeOptions<SoftwareEk, SoftwareKey> = {}): Promise<Challenged> {
  const eks = [m.tpm.eks.rsa, m.tpm.eks.ecc];
  const present = o.present ?? eks;
  const ak = o.ak ?? softwareKey(akTemplate(m.alg));
  const body = {
    claims,
    eks: present.map((e) => ({ public: b64(tpm2b(e.publicBytes)), ...(e.certificate ? { certificate: b64(e.certificate) } : {}) })),
    akPublic: b64(tpm2b(ak.publicBytes)),
  };
  const response = await call<ChallengeResponse>(m.server, "challenge", body);
  return { claims, eks: [...eks, ...present.filter((p) => !eks.includes(p))], ak, response, nonce: unb64(response.nonce) };
}

/** An EK of this TPM from a profile template, presented without a certificate (e.g. "L-2": the P-256 EK). */
export function ekFromTemplate(m: Machine, templateId: SoftwareEk["templateId"]): SoftwareEk {
  return m.tpm.ekFromTemplate(templateId);
}

/** A key created and certified by the AK in this session. */
export interface CertifiedKey {
  key: SoftwareKey;
  wire: EvidenceWire["ldevid"];
}

export interface EvidenceOptions extends CommonEvidenceOptions<CertifiedKey> {
  /** Create the "LDevID" from another template (e.g. akTemplate: a restricted key). */
  ldevidTemplate?: (alg: KeyAlg) => TPMT_PUBLIC;
}

export type Evidenced = Evidence<CertifiedKey>;

function certifiedKey(m: Machine, ak: SoftwareKey, template: TPMT_PUBLIC, extraData: Uint8Array): CertifiedKey {
  const key = softwareKey(template);
  const c = m.tpm.certify(ak, key, extraData);
  return { key, wire: { public: b64(key.publicBytes), private: b64(key.private), certifyInfo: b64(c.attestBytes), signature: b64(c.signatureBytes) } };
}

/** Step 2, built: activation, quote, PCR values, the log, a certified LDevID and LAK. */
export function evidence(m: Machine, s: Challenged, o: EvidenceOptions = {}): Evidenced {
  const sessionId = s.response.sessionId;
  const secrets = s.response.credentials.map((cred) => {
    const ek = s.eks.find((e) => e.binding === cred.ekBinding);
    if (!ek) throw new Error(`the server asked for EK ${cred.ekBinding}, which this TPM did not present`);
    return b64(m.tpm.activateCredential(ek, s.ak.name, unb64(cred.idObject), unb64(cred.encryptedSecret)));
  });
  const selection = o.quoteSelection ?? DEFAULT_QUOTE_SELECTION;
  const q = m.tpm.quote(s.ak, selection, quoteExtraData(s.nonce, sessionId, claimsHash(o.quoteClaims ?? s.claims)));
  const quote = { message: b64(q.attestBytes), signature: b64(q.signatureBytes), pcrs: m.tpm.pcrWire(o.sendPcrs ?? selection) };
  const ldevid = o.ldevid ?? certifiedKey(m, s.ak, (o.ldevidTemplate ?? ldevidTemplate)(m.alg), certifyExtraData("ldevid", s.nonce, sessionId));
  const lak = certifiedKey(m, s.ak, lakTemplate(m.alg), certifyExtraData("lak", s.nonce, sessionId));
  const body: EvidenceWire = { sessionId, secrets, quote, eventLog: b64(o.eventLog ?? m.eventLog), ldevid: ldevid.wire, lak: lak.wire };
  return { body, ldevid, lak };
}

export function sendEvidence(m: Machine, body: EvidenceWire): Promise<EvidenceResponse> {
  return call<EvidenceResponse>(m.server, "evidence", body);
}

/** Step 3's body: the confirm message signed by `signer` (default: the LDevID the evidence certified). */
export function confirmBody(m: Machine, s: Challenged, ev: Evidenced, accepted: EvidenceResponse, signer: SoftwareKey = ev.ldevid.key): ConfirmWire {
  if (accepted.issued !== "new") throw new Error("the evidence was accepted without certificates: there is nothing to confirm");
  const signature = m.tpm.sign(signer, confirmMessage(s.response.sessionId, unb64(accepted.ldevidCertificate), unb64(accepted.lakCertificate)));
  return { sessionId: s.response.sessionId, signature: b64(signature) };
}

export function sendConfirm(m: Machine, body: ConfirmWire): Promise<ConfirmResponse> {
  return call<ConfirmResponse>(m.server, "confirm", body);
}

/** The install code of a provision confirm, unwrapped by the TPM (undefined when the reply carries none). */
export function unwrap(m: Machine, s: Challenged, conf: ConfirmResponse): string | undefined {
  if (!conf.installCode) return undefined;
  const first = s.eks.find((e) => e.binding === s.response.credentials[0]?.ekBinding);
  if (!first) throw new Error("no approved EK to unwrap the install code with");
  return hex(m.tpm.activateCredential(first, s.ak.name, unb64(conf.installCode.idObject), unb64(conf.installCode.encryptedSecret)));
}

/** A signing key shaped like an LDevID that no AK certified and no CA signed. */
export function uncertifiedKey(m: Machine): SoftwareKey {
  return softwareKey(ldevidTemplate(m.alg));
}

/** The whole honest run, step by step; returns the session, the evidence, and the install code if any. */
export async function honest(m: Machine, claims: Claims): Promise<{ session: Challenged; evidence: Evidenced; accepted: EvidenceResponse; confirm: ConfirmWire; code?: string }> {
  const session = await challenge(m, claims);
  const ev = evidence(m, session);
  const accepted = await sendEvidence(m, ev.body);
  const confirm = confirmBody(m, session, ev, accepted);
  const code = unwrap(m, session, await sendConfirm(m, confirm));
  return { session, evidence: ev, accepted, confirm, ...(code ? { code } : {}) };
}

// ---- renewal with runtime attestation (protocol/client/renew.ts's steps on the software TPM) ----

/** A node's held keys after a confirmed intake or provision: the certificates and the software keys. */
export interface Held {
  ldevid: { certificate: Uint8Array; key: SoftwareKey };
  lak: { certificate: Uint8Array; key: SoftwareKey };
}

/** What an honest run issued (the certificates and the keys the evidence certified). */
export function heldFrom(run: { evidence: Evidenced; accepted: EvidenceResponse }): Held {
  if (run.accepted.issued !== "new") throw new Error("nothing was issued");
  return {
    ldevid: { certificate: unb64(run.accepted.ldevidCertificate), key: run.evidence.ldevid.key },
    lak: { certificate: unb64(run.accepted.lakCertificate), key: run.evidence.lak.key },
  };
}

/** A TPM whose PCRs carry `profile`'s boot (a reboot into the installed OS). */
export function bootedTpm(w: Pick<MemoryWorld, "keys">, profile: "talos" | "ubuntu" | "hookos", o: ScenarioOptions = {}): { tpm: SoftwareTpm; eventLog: Uint8Array } {
  const tpm = new SoftwareTpm();
  const boot = bootScenario(profile, w.keys, o);
  for (const e of boot.extends()) tpm.extend(e.pcr, e.digests);
  return { tpm, eventLog: boot.bytes() };
}

export interface RenewOptions {
  /** Sign the possession digest with this key instead of the LDevID. */
  possessionKey?: SoftwareKey;
  /** Quote with this key instead of the LAK. */
  quoteKey?: SoftwareKey;
  /** Send this log instead of the boot's. */
  eventLog?: Uint8Array;
}

/** The renewal evidence body for a challenge, as the node agent builds it (renewEvidenceBody), on the software TPM. */
export function renewEvidenceOf(tpm: SoftwareTpm, held: Held, ch: RenewChallengeResponse, eventLog: Uint8Array, o: RenewOptions = {}): RenewEvidenceWire {
  const nonce = unb64(ch.nonce);
  const selection = selectionFromWire(ch.pcrSelection);
  const q = tpm.quote(o.quoteKey ?? held.lak.key, selection, renewQuoteExtraData(nonce, ch.sessionId));
  const signature = tpm.sign(o.possessionKey ?? held.ldevid.key, renewPossessionMessage(nonce, ch.sessionId, q.attestBytes));
  return { sessionId: ch.sessionId, quote: { message: b64(q.attestBytes), signature: b64(q.signatureBytes), pcrs: tpm.pcrWire(selection) }, eventLog: b64(o.eventLog ?? eventLog), signature: b64(signature) };
}

export function renewChallengeOf(server: ServerTransport, held: Held, purpose: "attest" | "renew" = "renew"): Promise<RenewChallengeResponse> {
  return postStep<RenewChallengeResponse>(server, RENEW_PATHS.challenge, "renew-challenge", { ldevidCertificate: b64(held.ldevid.certificate), lakCertificate: b64(held.lak.certificate), purpose });
}

/** challenge → evidence → confirm (when issued); the new certificates, if any. */
export async function renewOnce(server: ServerTransport, tpm: SoftwareTpm, held: Held, eventLog: Uint8Array, purpose: "attest" | "renew" = "renew", o: RenewOptions = {}): Promise<{ response: RenewEvidenceResponse; held: Held }> {
  const ch = await renewChallengeOf(server, held, purpose);
  const response = await postStep<RenewEvidenceResponse>(server, RENEW_PATHS.evidence, "renew-evidence", renewEvidenceOf(tpm, held, ch, eventLog, o));
  if (response.issued === "none") return { response, held };
  const ldevid = unb64(response.ldevidCertificate);
  const lak = unb64(response.lakCertificate);
  const signature = tpm.sign(held.ldevid.key, renewConfirmMessage(ch.sessionId, ldevid, lak));
  await postStep<RenewConfirmResponse>(server, RENEW_PATHS.confirm, "renew-confirm", { sessionId: ch.sessionId, signature: b64(signature) });
  return { response, held: { ldevid: { certificate: ldevid, key: held.ldevid.key }, lak: { certificate: lak, key: held.lak.key } } };
}
