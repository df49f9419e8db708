/** The single-leader issuer without a cluster: a fake Lease, a fake token, a fake forward. */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import type { Issuer, JournalEntry } from "@fleetd/platform/fleet";
import { CaUnavailable, LeaderIssuer, type OpenSigner } from "./leaderIssuer.js";
import type { IssueRequest, IssueResult } from "./wire.js";

const silent = { info: () => undefined, warn: () => undefined, error: () => undefined };
const req = { node: "n1", generation: 1 } as unknown as IssueRequest;
const result = (by: string): IssueResult => ({ ldevid: { der: new Uint8Array([1]), serialHex: by, notAfter: new Date() }, lak: { der: new Uint8Array([2]), serialHex: by, notAfter: new Date() }, bundlePem: by });

function rig(opts: { forward?: (r: IssueRequest) => Promise<IssueResult>; signDelay?: Promise<void> } = {}) {
  let leading = false;
  const listeners: { started(): void | Promise<void>; stopped(): void | Promise<void> }[] = [];
  const events: string[] = [];
  const journal: { node: string | undefined; entry: JournalEntry }[] = [];
  const elector = {
    identity: "me",
    isLeader: () => leading,
    subscribe(l: { started(): void | Promise<void>; stopped(): void | Promise<void> }) {
      listeners.push(l);
      return async () => undefined;
    },
  };
  const issuer = new LeaderIssuer({
    elector,
    async openSigner(): Promise<OpenSigner> {
      events.push("open");
      return { description: "fake", publicKey: {} as OpenSigner["publicKey"], signatureAlgorithm: {} as OpenSigner["signatureAlgorithm"], sign: async () => new Uint8Array(), close: async () => void events.push("close") };
    },
    issuerFor: (): Issuer => ({
      async issue() {
        events.push("sign-start");
        await opts.signDelay;
        events.push("sign-end");
        return result("local");
      },
    }),
    forward: opts.forward ?? (async () => result("forwarded")),
    journal: { record: async (node, entry) => void journal.push({ node: typeof node === "object" ? node.name : node, entry }) },
    log: silent,
  });
  issuer.attach();
  return {
    issuer,
    events,
    journal,
    async lead(v: boolean) {
      leading = v;
      for (const l of listeners) await (v ? l.started() : l.stopped());
    },
  };
}

test("a follower forwards; a failed forward fails closed with the reason, journalled on the node", async () => {
  const ok = rig();
  assert.equal((await ok.issuer.issue(req)).bundlePem, "forwarded");
  assert.deepEqual(ok.events, [], "a follower never opens the token");
  const bad = rig({ forward: async () => Promise.reject(new CaUnavailable("no-leader", "no replica holds the CA signer lease")) });
  await assert.rejects(bad.issuer.issue(req), (e: unknown) => e instanceof CaUnavailable && e.code === "no-leader");
  assert.equal(bad.journal.length, 1);
  assert.equal(bad.journal[0]?.node, "n1");
  assert.equal(bad.journal[0]?.entry.reasons?.[0]?.check, "ca.signer");
  const odd = rig({ forward: async () => Promise.reject(new Error("boom")) });
  await assert.rejects(odd.issuer.issue(req), (e: unknown) => e instanceof CaUnavailable && e.code === "signer-unavailable" && /boom/.test(e.message));
});

test("the leader opens the token once, signs locally, and closes it only after the issuance in flight", async () => {
  let release = (): void => undefined;
  const gate = new Promise<void>((r) => (release = r));
  const r = rig({ signDelay: gate });
  await r.lead(true);
  assert.equal(r.issuer.signerOpen, true);
  const inflight = r.issuer.issue(req);
  await new Promise((res) => setImmediate(res));
  const stepping = r.lead(false); // leadership lost while signing
  await new Promise((res) => setImmediate(res));
  assert.deepEqual(r.events, ["open", "sign-start"], "not closed under a signature");
  release();
  assert.equal((await inflight).bundlePem, "local");
  await stepping;
  assert.deepEqual(r.events, ["open", "sign-start", "sign-end", "close"]);
  assert.equal(r.issuer.signerOpen, false);
  // no longer leading: forwarded, the token stays closed
  assert.equal((await r.issuer.issue(req)).bundlePem, "forwarded");
  await assert.rejects(r.issuer.issueLocal(req), (e: unknown) => e instanceof CaUnavailable && e.code === "not-leader");
  assert.deepEqual(r.events, ["open", "sign-start", "sign-end", "close"]);
});
