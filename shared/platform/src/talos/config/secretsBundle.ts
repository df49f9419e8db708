/**
 * The cluster secrets a Talos control plane runs on, from the site's Talos secrets bundle: the `secrets.yaml`
 * that `talosctl gen secrets` writes (talos:`pkg/machinery/config/generate/secrets/secrets.go` `Bundle`, YAML
 * keys lowercased by go-yaml). The site configuration names the file (`controlPlane.secretsBundleFile`); its
 * contents are never copied into another configuration file and never appear in an error or a log: a refusal
 * names the file and the field (`certs.etcd.key: not a PEM private key`), not what it held.
 *
 * Checked here as Talos's `Bundle.Validate` does (every field present, keys and certificates parse, exactly one
 * of secretbox and aescbc), and stricter: unknown keys are refused, each CA key must be the key of its
 * certificate, and the file must be a regular file no one but its owner can read or write (0600 or 0400).
 */
import { createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";
import { openSync, closeSync, fstatSync, readSync, constants as fsConstants } from "node:fs";
import { parseDocument } from "yaml";
import { z } from "zod";
import { CertificateError, type PemBlock, pemBlocksOnly } from "@fleetd/verify/x509";
import { ConfigInputError } from "./errors.js";
import { CLUSTER_SECRET_PATTERN, isCaCertificate, pemCertificates, TOKEN_PATTERN, type TalosSiteConfig } from "./schemas.js";

/** A secrets bundle is a few KiB; anything much larger is not one. */
const MAX_BUNDLE_BYTES = 256 * 1024;

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
const fromB64 = (s: string) => Buffer.from(s, "base64").toString("utf8");

/** PEM labels Talos writes or reads for private keys, and how the DER inside is encoded. */
const KEY_LABELS: Record<string, "pkcs8" | "sec1" | "pkcs1"> = {
  "PRIVATE KEY": "pkcs8",
  "ED25519 PRIVATE KEY": "pkcs8", // siderolabs/crypto's label for PKCS#8 Ed25519 (the Talos API CA)
  "EC PRIVATE KEY": "sec1",
  "RSA PRIVATE KEY": "pkcs1",
};

/** One PEM private key (and nothing else), or undefined. */
export function privateKeyOf(pem: string): KeyObject | undefined {
  let blocks: PemBlock[];
  try {
    blocks = pemBlocksOnly(pem);
  } catch (e) {
    if (e instanceof CertificateError) return undefined;
    throw e;
  }
  const [block, ...more] = blocks;
  const type = block ? KEY_LABELS[block.label] : undefined;
  if (!block || !type || more.length > 0) return undefined;
  try {
    return createPrivateKey({ key: Buffer.from(block.der), format: "der", type });
  } catch {
    return undefined;
  }
}

const spki = (k: KeyObject) => k.export({ type: "spki", format: "der" });

/** base64 of PEM text, as every certificate and key in the bundle (and in a machine config) is stored. */
const b64Pem = z.string().regex(BASE64, "not base64 (of PEM)");

const b64CaCert = b64Pem.refine((s) => {
  const certs = pemCertificates(fromB64(s));
  return certs !== undefined && certs.length === 1 && isCaCertificate(certs[0]!);
}, "not base64 of exactly one PEM CA certificate");

const b64Key = b64Pem.refine((s) => privateKeyOf(fromB64(s)) !== undefined, "not base64 of one PEM private key");

/** A CA's certificate and the key that issues with it (talos: x509.PEMEncodedCertificateAndKey). */
const caPair = z
  .object({ crt: b64CaCert, key: b64Key })
  .strict()
  .superRefine((p, ctx) => {
    const cert = pemCertificates(fromB64(p.crt))?.[0];
    const key = privateKeyOf(fromB64(p.key));
    if (!cert || !key) return; // reported above
    let certKey: KeyObject;
    try {
      certKey = createPublicKey({ key: Buffer.from(cert.spki.der), format: "der", type: "spki" });
    } catch {
      ctx.addIssue({ code: "custom", path: ["crt"], message: "has a public key the crypto library cannot use" });
      return;
    }
    if (!spki(createPublicKey(key)).equals(spki(certKey))) {
      ctx.addIssue({ code: "custom", path: ["key"], message: "is not the key of this crt" });
    }
  });

/** 32 random bytes, base64 (Talos's secretbox and aescbc secrets). */
const encryptionSecret = z
  .string()
  .regex(BASE64, "not base64")
  .refine((s) => Buffer.from(s, "base64").length === 32, "not base64 of 32 bytes");

const token = z.string().regex(TOKEN_PATTERN, "not a token [a-z0-9]{6}.[a-z0-9]{16}");

export const TalosSecretsBundle = z
  .object({
    cluster: z.object({ id: z.string().regex(CLUSTER_SECRET_PATTERN, "not a cluster id"), secret: z.string().regex(CLUSTER_SECRET_PATTERN, "not a cluster secret") }).strict(),
    secrets: z
      .object({
        /** Talos's cluster-wide token. fleetd serves a per-node bootstrap token instead; required as Talos requires it. */
        bootstraptoken: token,
        secretboxencryptionsecret: encryptionSecret.optional(),
        aescbcencryptionsecret: encryptionSecret.optional(),
      })
      .strict()
      .superRefine((s, ctx) => {
        const n = Number(s.secretboxencryptionsecret !== undefined) + Number(s.aescbcencryptionsecret !== undefined);
        if (n !== 1) {
          ctx.addIssue({ code: "custom", path: [], message: `${n === 0 ? "one" : "only one"} of secretboxencryptionsecret, aescbcencryptionsecret is required` });
        }
      }),
    trustdinfo: z.object({ token }).strict(),
    certs: z
      .object({
        etcd: caPair,
        k8s: caPair,
        k8saggregator: caPair,
        k8sserviceaccount: z.object({ key: b64Key }).strict(),
        os: caPair,
      })
      .strict(),
  })
  .strict();
export type TalosSecretsBundle = z.infer<typeof TalosSecretsBundle>;

function refuse(file: string, path: string, message: string): never {
  throw new ConfigInputError("site-secrets-invalid", [{ path, message }], `secrets bundle ${file}`);
}

/**
 * Reads and checks the secrets bundle at `file` (an absolute path; a Kubernetes Secret mounted as a file, which
 * is a symlink into the volume, is followed). Refuses a file that is not regular, that its group or others may
 * read or write, or that is larger than a bundle can be.
 */
export function readSecretsBundle(file: string): TalosSecretsBundle {
  let fd: number;
  try {
    fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NOCTTY | fsConstants.O_NONBLOCK);
  } catch (e) {
    refuse(file, "", `cannot be read (${(e as NodeJS.ErrnoException).code ?? "error"})`);
  }
  let text: string;
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) refuse(file, "", "is not a regular file");
    if ((st.mode & 0o077) !== 0) {
      refuse(file, "", `has mode ${(st.mode & 0o777).toString(8).padStart(4, "0")}: it holds the cluster's CA keys, make it 0600 (or 0400), readable by the server's user only`);
    }
    if (st.size > MAX_BUNDLE_BYTES) refuse(file, "", `is ${st.size} bytes, larger than a secrets bundle (${MAX_BUNDLE_BYTES})`);
    const buf = Buffer.alloc(MAX_BUNDLE_BYTES + 1);
    let n = 0;
    for (let r; n < buf.length && (r = readSync(fd, buf, n, buf.length - n, null)) > 0; ) n += r;
    if (n > MAX_BUNDLE_BYTES) refuse(file, "", `is larger than a secrets bundle (${MAX_BUNDLE_BYTES} bytes)`);
    text = buf.subarray(0, n).toString("utf8");
    buf.fill(0);
  } finally {
    closeSync(fd);
  }
  return parseSecretsBundle(text, file);
}

/** Parses a secrets bundle's YAML text; `file` only names it in refusals. */
export function parseSecretsBundle(text: string, file: string): TalosSecretsBundle {
  // The YAML parser's messages quote the offending source line: report only the error's code and position.
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  const err = doc.errors[0];
  if (err) {
    const at = err.linePos?.[0];
    refuse(file, "", `is not valid YAML (${err.code}${at ? ` at line ${at.line}, column ${at.col}` : ""})`);
  }
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 0 }); // a bundle has no aliases
  } catch {
    refuse(file, "", "is not a plain YAML mapping (aliases or tags Talos does not write)");
  }
  const r = TalosSecretsBundle.safeParse(raw);
  if (!r.success) throw ConfigInputError.from("site-secrets-invalid", r.error, `secrets bundle ${file}`);
  return r.data;
}

const sameCert = (b64Pem: string, pem: string): boolean => {
  const a = pemCertificates(fromB64(b64Pem))?.[0];
  const b = pemCertificates(pem)?.[0];
  return a !== undefined && b !== undefined && Buffer.from(a.der).equals(b.der);
};

/**
 * The site's control-plane secrets: the bundle `controlPlane.secretsBundleFile` names, read and checked, and
 * checked to be the site's cluster's — the values workers get from the site configuration (cluster id and
 * secret, trustd token, the Talos API and Kubernetes CA certificates) must be the bundle's, or control planes
 * and workers would not form one cluster. Refuses a site without a control-plane section.
 */
export function siteSecretsBundle(site: TalosSiteConfig): TalosSecretsBundle {
  const file = site.controlPlane?.secretsBundleFile;
  if (file === undefined) {
    throw new ConfigInputError("site-config-invalid", [{ path: "controlPlane", message: "required for control planes: secretsBundleFile (the Talos secrets bundle) and images" }]);
  }
  const bundle = readSecretsBundle(file);
  const c = site.cluster;
  const pairs: [boolean, string, string][] = [
    [bundle.cluster.id === c.id, "cluster.id", "cluster.id"],
    [bundle.cluster.secret === c.secret, "cluster.secret", "cluster.secret"],
    [bundle.trustdinfo.token === c.trustdToken, "trustdinfo.token", "cluster.trustdToken"],
    [sameCert(bundle.certs.os.crt, c.osCaCert), "certs.os.crt", "cluster.osCaCert"],
    [sameCert(bundle.certs.k8s.crt, c.kubernetesCaCert), "certs.k8s.crt", "cluster.kubernetesCaCert"],
  ];
  const issues = pairs
    .filter(([same]) => !same)
    .map(([, path, siteField]) => ({ path, message: `differs from the site configuration's ${siteField} (another cluster's bundle?)` }));
  if (issues.length > 0) throw new ConfigInputError("site-secrets-invalid", issues, `secrets bundle ${file}`);
  return bundle;
}
