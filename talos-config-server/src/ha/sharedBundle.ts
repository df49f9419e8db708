/**
 * HA: the CA bundle state's issuance records shared by the replicas, in the Secret `fleetd-ca-bundle-state`.
 * The bundle state file stays the operator's list of CAs (rollover edits it); when a replica becomes the
 * signer it merges — the file's CAs, each with the later `lastIssuance`/`lastNotAfter` of the file and the
 * Secret — and writes the result back. After each issuance the new state is written with the resourceVersion
 * this replica last wrote: a replica that lost the Lease without noticing cannot write (409), so its
 * issuance fails before anything is released (a fencing token), and the new leader signs instead.
 * RBAC: get, create, update on secrets in the namespace (as the state store).
 */
import { isConflict, isNotFound, type Kube } from "@fleetd/platform/kube";
import { type BundleState, parseBundleState, serializeBundleState } from "@fleetd/platform/pki";
import { CaUnavailable } from "./leaderIssuer.js";
import { OWNER_LABELS } from "@fleetd/platform/fleet";

type V1Secret = Parameters<Kube["core"]["createNamespacedSecret"]>[0]["body"];

export const BUNDLE_SECRET = "fleetd-ca-bundle-state";

const later = (a: Date | null, b: Date | null): Date | null => (a === null ? b : b === null ? a : a > b ? a : b);

/** The file's CAs, each with the later issuance records of the two. */
export function mergeBundleRecords(file: BundleState, shared: BundleState | undefined): BundleState {
  if (!shared) return file;
  return {
    cas: file.cas.map((ca) => {
      const s = shared.cas.find((x) => x.fingerprint === ca.fingerprint);
      return s ? { ...ca, lastIssuance: later(ca.lastIssuance, s.lastIssuance), lastNotAfter: later(ca.lastNotAfter, s.lastNotAfter) } : ca;
    }),
  };
}

export class SharedBundleState {
  private resourceVersion: string | undefined;
  /** Written at load: the Secret changes (and its resourceVersion moves on) even when the records do not. */
  private since = "";

  constructor(
    private readonly kube: Kube,
    private readonly namespace: string,
    /** This replica (the Lease identity), recorded as the signer on the Secret. */
    private readonly identity: string,
    private readonly name = BUNDLE_SECRET,
  ) {}

  private body(state: BundleState, resourceVersion?: string): V1Secret {
    return {
      apiVersion: "v1",
      kind: "Secret",
      type: "fleetd.io/ca-bundle-state",
      metadata: {
        name: this.name,
        namespace: this.namespace,
        labels: { ...OWNER_LABELS },
        annotations: { "fleetd.io/signer": this.identity, "fleetd.io/signer-since": this.since },
        ...(resourceVersion ? { resourceVersion } : {}),
      },
      data: { state: Buffer.from(serializeBundleState(state), "utf8").toString("base64") },
    };
  }

  /** On becoming the signer: merge the file with the shared records, write the result, return it. */
  async load(file: BundleState): Promise<BundleState> {
    this.since = `${new Date().toISOString()} ${Math.random().toString(36).slice(2, 10)}`;
    for (let attempt = 0; attempt < 8; attempt++) {
      let current: V1Secret | undefined;
      try {
        current = await this.kube.core.readNamespacedSecret({ name: this.name, namespace: this.namespace });
      } catch (e) {
        if (!isNotFound(e)) throw e;
      }
      const text = current?.data?.["state"];
      const shared = text ? parseBundleState(Buffer.from(text, "base64").toString("utf8"), `Secret ${this.namespace}/${this.name}`) : undefined;
      const merged = mergeBundleRecords(file, shared);
      try {
        const written = current
          ? await this.kube.core.replaceNamespacedSecret({ name: this.name, namespace: this.namespace, body: this.body(merged, current.metadata?.resourceVersion) })
          : await this.kube.core.createNamespacedSecret({ namespace: this.namespace, body: this.body(merged) });
        this.resourceVersion = written.metadata?.resourceVersion;
        return merged;
      } catch (e) {
        if (!isConflict(e)) throw e;
      }
    }
    throw new CaUnavailable("signer-unavailable", `Secret ${this.namespace}/${this.name} keeps changing under this replica`);
  }

  /** After an issuance, before release: only the version this replica last wrote may be replaced. */
  async save(next: BundleState): Promise<void> {
    if (!this.resourceVersion) throw new CaUnavailable("not-leader", "the shared CA bundle state was not loaded by this replica");
    try {
      const written = await this.kube.core.replaceNamespacedSecret({ name: this.name, namespace: this.namespace, body: this.body(next, this.resourceVersion) });
      this.resourceVersion = written.metadata?.resourceVersion;
    } catch (e) {
      if (isConflict(e)) {
        this.resourceVersion = undefined;
        throw new CaUnavailable("not-leader", "another replica wrote the shared CA bundle state: this one no longer leads; nothing released");
      }
      throw e;
    }
  }
}
