/**
 * A one-time Talos config sealed to its install code (AES-256-GCM under a key derived from the code).
 *
 * The store keeps SHA-256(code) to find the row and this sealed form of the config. The code itself is never
 * stored: it exists in the TPM-wrapped credential the machine received and, at fetch time, in the machine's
 * request. So the state file, a backup of it, or the Kubernetes objects holding it under HA disclose neither the
 * bootstrap token nor the cluster secrets (trustd token, cluster secret; a control plane's CA keys) nor the TPM
 * key blobs of a config not yet fetched. The associated data binds the sealed config to its device and SMBIOS
 * UUID, so a sealed config moved to another row does not open.
 *
 * The key is HKDF-SHA256 over the 32-byte code with a fixed salt and info; it is independent of SHA-256(code),
 * which the store holds.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";

const PREFIX = "sealed:v1:";
const SALT = "fleetd/install-code-config";
const INFO = "v1 aes-256-gcm";
const IV_BYTES = 12;
const TAG_BYTES = 16;

export class SealError extends Error {
  override name = "SealError";
}

/** What the sealed config is bound to besides the code. */
export interface SealContext {
  deviceId: number;
  uuid: string;
}

function keyOf(code: Uint8Array): Buffer {
  if (code.length !== 32) throw new SealError(`an install code is 32 bytes, not ${code.length}`);
  return Buffer.from(hkdfSync("sha256", code, SALT, INFO, 32));
}

function aadOf(c: SealContext): Buffer {
  return Buffer.from(`fleetd install-code config v1\0device ${c.deviceId}\0uuid ${c.uuid.toLowerCase()}`, "utf8");
}

/** The config sealed to `code`, as text for the store's config column. */
export function sealConfig(code: Uint8Array, config: string, context: SealContext, iv: Uint8Array = randomBytes(IV_BYTES)): string {
  if (iv.length !== IV_BYTES) throw new SealError(`the IV is ${IV_BYTES} bytes, not ${iv.length}`);
  const cipher = createCipheriv("aes-256-gcm", keyOf(code), iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(aadOf(context));
  const body = Buffer.concat([cipher.update(config, "utf8"), cipher.final()]);
  return PREFIX + Buffer.concat([iv, body, cipher.getAuthTag()]).toString("base64");
}

/** The config `sealed` holds, or a SealError: not sealed, another code, another device or UUID, or altered. */
export function openConfig(code: Uint8Array, sealed: string, context: SealContext): string {
  if (!sealed.startsWith(PREFIX)) throw new SealError("the stored config is not sealed to its install code (written by an older fleetd?)");
  const raw = Buffer.from(sealed.slice(PREFIX.length), "base64");
  if (raw.length < IV_BYTES + TAG_BYTES) throw new SealError("the sealed config is truncated");
  const decipher = createDecipheriv("aes-256-gcm", keyOf(code), raw.subarray(0, IV_BYTES), { authTagLength: TAG_BYTES });
  decipher.setAAD(aadOf(context));
  decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
  try {
    return Buffer.concat([decipher.update(raw.subarray(IV_BYTES, raw.length - TAG_BYTES)), decipher.final()]).toString("utf8");
  } catch {
    throw new SealError("the sealed config does not open with this code for this device and UUID");
  }
}
