import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  Attribute, AlgorithmIdentifier, AttributeTypeAndValue, AttributeValue, Extension, Extensions, GeneralName, Name,
  RelativeDistinguishedName, SubjectAlternativeName, SubjectPublicKeyInfo, id_ce_subjectAltName,
} from "@peculiar/asn1-x509";
import { Attributes, CertificationRequest, CertificationRequestInfo } from "@peculiar/asn1-csr";
import { AsnConvert, OctetString } from "@peculiar/asn1-schema";
import fc from "fast-check";
import { bootstrapTokenSecret, rfc3339 } from "./bootstrapToken.js";
import { type CsrObject, gateScope, JournalBudget, judgeBootstrapCsr, judgementOrder, KUBELET_CLIENT_SIGNER } from "./csrGate.js";
import { CsrError, MAX_CSR_PEM_BYTES, parseCsr } from "./parseCsr.js";

const ec = () => generateKeyPairSync("ec", { namedCurve: "P-256" });

interface CsrSpec {
  subject?: [string, string][];
  dns?: string[];
  key?: { publicKey: KeyObject; privateKey: KeyObject };
  rsa?: boolean;
  tamper?: boolean;
}

/** A PKCS#10 request built from parts (the gate's parser is tested against openssl's below too). */
function makeCsr(s: CsrSpec = {}): string {
  const key = s.key ?? (s.rsa ? generateKeyPairSync("rsa", { modulusLength: 2048 }) : ec());
  const subject = s.subject ?? [["2.5.4.10", "system:nodes"], ["2.5.4.3", "system:node:n1"]];
  const name = new Name(subject.map(([oid, v]) => new RelativeDistinguishedName([new AttributeTypeAndValue({ type: oid, value: new AttributeValue({ utf8String: v }) })])));
  const attrs = new Attributes();
  if (s.dns) {
    const san = new SubjectAlternativeName(s.dns.map((d) => new GeneralName({ dNSName: d })));
    const exts = new Extensions([new Extension({ extnID: id_ce_subjectAltName, critical: false, extnValue: new OctetString(AsnConvert.serialize(san)) })]);
    attrs.push(new Attribute({ type: "1.2.840.113549.1.9.14", values: [AsnConvert.serialize(exts)] }));
  }
  const info = new CertificationRequestInfo({
    version: 0,
    subject: name,
    subjectPKInfo: AsnConvert.parse(key.publicKey.export({ type: "spki", format: "der" }), SubjectPublicKeyInfo),
    attributes: attrs,
  });
  const infoDer = Buffer.from(AsnConvert.serialize(info));
  const sig = sign("sha256", infoDer, key.privateKey);
  if (s.tamper) sig.writeUInt8((sig.readUInt8(sig.length - 1) ^ 1) & 0xff, sig.length - 1);
  const req = new CertificationRequest({
    certificationRequestInfo: info,
    signatureAlgorithm: new AlgorithmIdentifier({ algorithm: s.rsa ? "1.2.840.113549.1.1.11" : "1.2.840.10045.4.3.2", ...(s.rsa ? { parameters: null } : {}) }),
    signature: new Uint8Array(sig).buffer,
  });
  const b64 = Buffer.from(AsnConvert.serialize(req)).toString("base64").replace(/(.{64})/g, "$1\n").replace(/\n$/, "");
  return `-----BEGIN CERTIFICATE REQUEST-----\n${b64}\n-----END CERTIFICATE REQUEST-----\n`;
}

function csrObject(pem: string, over: { username?: string; usages?: string[]; signer?: string; conditions?: { type: string }[] } = {}): CsrObject {
  return {
    metadata: { name: "csr-1" },
    spec: {
      signerName: over.signer ?? KUBELET_CLIENT_SIGNER,
      request: Buffer.from(pem).toString("base64"),
      username: over.username ?? "system:bootstrap:abc123",
      usages: over.usages ?? ["digital signature", "client auth"],
    },
    ...(over.conditions ? { status: { conditions: over.conditions } } : {}),
  };
}

const NOW = new Date("2026-11-29T12:00:00Z");
const RENDERED = { node: "n1", expiresAt: NOW.getTime() + 3600_000 };

function judge(pem: string, over: Parameters<typeof csrObject>[1] = {}, rendered: typeof RENDERED | null = RENDERED) {
  const o = csrObject(pem, over);
  const scope = gateScope(o);
  assert.ok("tokenId" in scope, JSON.stringify(scope));
  return judgeBootstrapCsr(o, scope.tokenId, rendered ?? undefined, NOW);
}
const checks = (d: ReturnType<typeof judge>) => (d.action === "deny" ? d.reasons.map((r) => r.check).sort() : []);

test("the CSR a kubelet sends (EC P-256, O then CN, no extensions, [digital signature, client auth]) is approved for the token's node", () => {
  const d = judge(makeCsr());
  assert.deepEqual(d, { action: "approve", csr: "csr-1", tokenId: "abc123", node: "n1", reasons: [] });
});

test("an openssl-made request parses the same way and is approved", () => {
  const dir = mkdtempSync(join(tmpdir(), "fleetd-csr-"));
  const keyFile = join(dir, "k.pem");
  writeFileSync(keyFile, ec().privateKey.export({ type: "pkcs8", format: "pem" }));
  const req = spawnSync("openssl", ["req", "-new", "-key", keyFile, "-subj", "/O=system:nodes/CN=system:node:n1"], { encoding: "utf8" });
  rmSync(dir, { recursive: true, force: true });
  assert.equal(req.status, 0, req.stderr);
  const p = parseCsr(req.stdout);
  assert.deepEqual(p.commonNames, ["system:node:n1"]);
  assert.deepEqual(p.organizations, ["system:nodes"]);
  assert.equal(p.signatureValid, true);
  assert.equal(judge(req.stdout).action, "approve");
});

test("an RSA key may add key encipherment (as kubelet does for RSA keys); an EC key may not", () => {
  assert.equal(judge(makeCsr({ rsa: true }), { usages: ["digital signature", "key encipherment", "client auth"] }).action, "approve");
  assert.equal(judge(makeCsr({ rsa: true })).action, "approve");
  assert.deepEqual(checks(judge(makeCsr(), { usages: ["digital signature", "key encipherment", "client auth"] })), ["csr.usages"]);
});

test("each deviation is denied with its own reason", () => {
  const cases: [string, () => ReturnType<typeof judge>, string[]][] = [
    ["another node's name with this token", () => judge(makeCsr({ subject: [["2.5.4.10", "system:nodes"], ["2.5.4.3", "system:node:n2"]] })), ["csr.subject.cn"]],
    ["O wrong", () => judge(makeCsr({ subject: [["2.5.4.10", "system:masters"], ["2.5.4.3", "system:node:n1"]] })), ["csr.subject.o"]],
    ["two O", () => judge(makeCsr({ subject: [["2.5.4.10", "system:nodes"], ["2.5.4.10", "system:masters"], ["2.5.4.3", "system:node:n1"]] })), ["csr.subject.o"]],
    ["an OU", () => judge(makeCsr({ subject: [["2.5.4.10", "system:nodes"], ["2.5.4.11", "x"], ["2.5.4.3", "system:node:n1"]] })), ["csr.subject.other"]],
    ["SANs", () => judge(makeCsr({ dns: ["n1.example"] })), ["csr.san.dns"]],
    ["extra usage", () => judge(makeCsr(), { usages: ["digital signature", "client auth", "server auth"] }), ["csr.usages"]],
    ["missing usage", () => judge(makeCsr(), { usages: ["client auth"] }), ["csr.usages"]],
    ["duplicate usage", () => judge(makeCsr(), { usages: ["digital signature", "client auth", "client auth"] }), ["csr.usages"]],
    ["bad signature", () => judge(makeCsr({ tamper: true })), ["csr.signature"]],
    ["unknown token", () => judge(makeCsr(), {}, null), ["csr.token.unknown"]],
    ["expired token", () => judge(makeCsr(), {}, { node: "n1", expiresAt: NOW.getTime() - 1 }), ["csr.token.expired"]],
    ["garbage request", () => judge("not a csr"), ["csr.request.not-pem"]],
  ];
  for (const [what, run, want] of cases) {
    const d = run();
    assert.equal(d.action, "deny", what);
    assert.deepEqual(checks(d), want, what);
    if (d.action === "deny") for (const r of d.reasons) assert.ok(r.detail.length > 10, `${what}: the reason says why`);
  }
});

test("renewals (system:node:*), other signers, other requesters and settled CSRs are out of scope", () => {
  const pem = makeCsr();
  assert.match((gateScope(csrObject(pem, { username: "system:node:n1" })) as { why: string }).why, /not a bootstrap token/);
  assert.match((gateScope(csrObject(pem, { signer: "kubernetes.io/kube-apiserver-client" })) as { why: string }).why, /is not kubernetes.io\/kube-apiserver-client-kubelet/);
  assert.match((gateScope(csrObject(pem, { username: "admin" })) as { why: string }).why, /not a bootstrap token/);
  assert.match((gateScope(csrObject(pem, { conditions: [{ type: "Denied" }] })) as { why: string }).why, /already Denied/);
  assert.match((gateScope(csrObject(pem, { conditions: [{ type: "Approved" }] })) as { why: string }).why, /already Approved/);
});

test("CSR parsing: garbage, truncated, oversized, wrong block type all give a typed CsrError", () => {
  const good = makeCsr();
  const der = Buffer.from(good.split("\n").slice(1, -2).join(""), "base64");
  const pem = (b: Uint8Array, type = "CERTIFICATE REQUEST") => `-----BEGIN ${type}-----\n${Buffer.from(b).toString("base64")}\n-----END ${type}-----\n`;
  const code = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      assert.ok(e instanceof CsrError, `not a CsrError: ${String(e)}`);
      return e.code;
    }
    return "parsed";
  };
  assert.equal(code(() => parseCsr(pem(der.subarray(0, der.length - 5)))), "asn1");
  assert.equal(code(() => parseCsr(pem(Buffer.concat([der, Buffer.from([0])])))), "not-der");
  assert.equal(code(() => parseCsr(pem(der, "CERTIFICATE"))), "pem-type");
  assert.equal(code(() => parseCsr(good + good)), "pem-count");
  assert.equal(code(() => parseCsr("x".repeat(MAX_CSR_PEM_BYTES + 1))), "too-large");
  assert.equal(code(() => parseCsr("")), "not-pem");
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 600 }), (bytes) => {
      const c = code(() => parseCsr(pem(bytes)));
      assert.ok(["asn1", "not-der", "base64", "not-pem", "version", "key", "signature-algorithm"].includes(c), c);
    }),
    { numRuns: 300 },
  );
  fc.assert(
    fc.property(fc.integer({ min: 0, max: der.length - 1 }), fc.integer({ min: 0, max: 255 }), (at, v) => {
      const b = Buffer.from(der);
      b[at] = v;
      const c = code(() => parseCsr(pem(b)));
      // a flipped byte either still parses (and then the signature must catch a change) or is a typed error
      if (c === "parsed") {
        if (v !== der[at]) assert.equal(parseCsr(pem(b)).signatureValid && b.equals(der), false, `byte ${at} changed and the signature still verifies`);
      } else assert.equal(typeof c, "string");
    }),
    { numRuns: 300 },
  );
  fc.assert(
    fc.property(fc.integer({ min: 0, max: good.length }), (n) => {
      const c = code(() => parseCsr(good.slice(0, n)));
      assert.ok(n === good.length || c !== "parsed" || good.slice(0, n).includes("-----END CERTIFICATE REQUEST-----"), `prefix ${n} parsed`);
    }),
    { numRuns: 200 },
  );
});

test("the bootstrap token Secret: type, id, secret, RFC 3339 expiration, authentication only, fleetd's labels", () => {
  const s = bootstrapTokenSecret("n1", { id: "abc123", secret: "0123456789abcdef" }, new Date("2026-11-30T01:02:03.456Z"));
  assert.equal(s.metadata?.name, "bootstrap-token-abc123");
  assert.equal(s.metadata?.namespace, "kube-system");
  assert.equal(s.type, "bootstrap.kubernetes.io/token");
  assert.equal(s.stringData?.["expiration"], "2026-11-30T01:02:03Z");
  assert.equal(s.stringData?.["usage-bootstrap-authentication"], "true");
  assert.equal(s.stringData?.["usage-bootstrap-signing"], undefined);
  assert.match(s.stringData?.["description"] ?? "", /node n1/);
  assert.deepEqual(s.metadata?.labels, { "fleetd.io/owner": "fleetd", "fleetd.io/node": "n1" });
  assert.equal(rfc3339(new Date(0)), "1970-01-01T00:00:00Z");
  assert.throws(() => bootstrapTokenSecret("n1", { id: "ABC123", secret: "0123456789abcdef" }, new Date()), /not of the form/);
});

test("judgement order is creation order, never the name; CSRs of one token created in the same second are contested", () => {
  const pem = makeCsr();
  const at = (name: string, created: string, username = "system:bootstrap:abc123") => ({ ...csrObject(pem, { username }), metadata: { name, creationTimestamp: new Date(created) } });
  const kubelet = at("node-csr-zzzz", "2026-11-29T12:00:00Z");
  const squatter = at("aaaa-first-by-name", "2026-11-29T12:00:01Z");
  const { order, contested } = judgementOrder([squatter, kubelet]);
  assert.deepEqual(order.map((c) => c.metadata.name), ["node-csr-zzzz", "aaaa-first-by-name"], "created first is judged first, whatever the names");
  assert.equal(contested.size, 0);
  // The same second, the same token: both contested and denied; another token in that second is not.
  const twin = at("aaaa-same-second", "2026-11-29T12:00:00.900Z");
  const other = at("other-token", "2026-11-29T12:00:00Z", "system:bootstrap:zzz999");
  const r = judgementOrder([twin, kubelet, other]);
  assert.deepEqual(r.contested.get("node-csr-zzzz"), ["aaaa-same-second"]);
  assert.deepEqual(r.contested.get("aaaa-same-second"), ["node-csr-zzzz"]);
  assert.equal(r.contested.has("other-token"), false);
  const d = judgeBootstrapCsr(kubelet, "abc123", RENDERED, NOW, r.contested.get("node-csr-zzzz"));
  assert.equal(d.action, "deny");
  assert.deepEqual(checks(d), ["csr.token.contested"]);
  // Decided CSRs and renewals are not counted.
  const decided = { ...at("decided", "2026-11-29T12:00:00Z"), status: { conditions: [{ type: "Denied", status: "True" }] } };
  assert.equal(judgementOrder([decided, kubelet]).contested.size, 0);
});

test("the journal budget: the first denials per token are journalled, the last of them marked, then quiet until the window passes", () => {
  const b = new JournalBudget(3, 60_000);
  assert.deepEqual([0, 1, 2, 3, 4].map((i) => b.take("abc123", i)), ["journal", "journal", "last", "quiet", "quiet"]);
  assert.equal(b.take("zzz999", 5), "journal", "per token");
  assert.equal(b.take("abc123", 60_000), "journal", "a new window");
  const tiny = new JournalBudget(1, 60_000, 2);
  assert.equal(tiny.take("a", 0), "last");
  tiny.take("b", 0);
  tiny.take("c", 0); // "a" forgotten: at most 2 keys tracked
  assert.equal(tiny.take("a", 1), "last");
});
