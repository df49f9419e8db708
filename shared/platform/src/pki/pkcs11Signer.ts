/**
 * The CA signer over PKCS#11 (YubiKey PIV through ykcs11 / opensc-pkcs11 in production, SoftHSM2 in tests).
 *
 *  - ECDSA keys: CKM_ECDSA over a SHA-256 (P-256) or SHA-384 (P-384) digest computed here; the token's
 *    r || s is DER-encoded for X.509.
 *  - RSA keys: CKM_SHA256_RSA_PKCS, or CKM_RSA_PKCS over a DigestInfo built here when the token lacks it.
 *  - One signature at a time per PKCS#11 library (one device): callers queue; the token call itself is
 *    asynchronous (C_SignAsync), so waiting for a YubiKey touch does not block the event loop.
 *  - Keys with CKA_ALWAYS_AUTHENTICATE (PIV slot 9c) get a context-specific login before each signature.
 *  - Every signature is checked against the public key before it is returned, so a token whose public-key
 *    object belongs to another key pair is found at the first signature, not by a relying party.
 *  - A refused PIN disables the signer: no retry can burn the YubiKey's three PIN tries.
 *  - A lost session (device unplugged) fails the current signature; the next one reopens and logs in again.
 */
import { createHash, createPublicKey, verify as cryptoVerify } from "node:crypto";
import type { PKCS11 } from "pkcs11js";
import { EC_CURVES, SIGNATURE_ALGORITHMS, signatureAlgorithmForKey, type PublicKeyInfo, type SignatureAlgorithm } from "./algorithms.js";
import { ecdsaSignatureToDer } from "./ecdsaSignature.js";
import { PkiError } from "./errors.js";
import { Pkcs11SignerConfig, type Pkcs11SignerSettings } from "./pkcs11Config.js";
import { findTokenKey, describeKey, type TokenKey } from "./pkcs11Key.js";
import { acquirePkcs11Module, pkcs11Code, pkcs11js, pkcs11Reason, type Pkcs11Module } from "./pkcs11Module.js";
import { closeSession, describeToken, findSlot, login, openSession, type Handle } from "./pkcs11Session.js";
import type { CertificateSigner } from "./signer.js";

export interface Pkcs11SignerOptions {
  /** Called inside the signing queue around each token operation (instrumentation; tests count overlap). */
  observe?: { signStart(): void; signEnd(): void };
}

export interface Pkcs11Signer extends CertificateSigner {
  /** "token "fleetd-ca", key label "ca" (ECC P-256)" — for logs; never contains the PIN. */
  readonly description: string;
  readonly mechanism: "CKM_ECDSA" | "CKM_SHA256_RSA_PKCS" | "CKM_RSA_PKCS";
  /** For readiness: the token is present and the signer neither closed nor disabled (no login, no signature). */
  available(): Promise<{ ok: true } | { ok: false; detail: string }>;
  close(): Promise<void>;
}

/** DigestInfo prefix for SHA-256 (RFC 8017 §9.2 note 1). */
const SHA256_DIGEST_INFO = Buffer.from("3031300d060960864801650304020105000420", "hex");

/** PKCS#11 return values after which the session is gone and must be reopened. */
function sessionLost(code: number | undefined): boolean {
  const p = pkcs11js();
  return (
    code === p.CKR_SESSION_HANDLE_INVALID ||
    code === p.CKR_SESSION_CLOSED ||
    code === p.CKR_DEVICE_REMOVED ||
    code === p.CKR_DEVICE_ERROR ||
    code === p.CKR_TOKEN_NOT_PRESENT ||
    code === p.CKR_USER_NOT_LOGGED_IN
  );
}

interface Open {
  session: Handle;
  key: TokenKey;
}

export async function openPkcs11Signer(config: Pkcs11SignerConfig, options: Pkcs11SignerOptions = {}): Promise<Pkcs11Signer> {
  const parsed = Pkcs11SignerConfig.safeParse(config);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new PkiError("invalid-config", `PKCS#11 signer configuration: ${issue ? `${issue.path.join(".") || "(root)"}: ${issue.message}` : "invalid"}`);
  }
  const settings = parsed.data;
  const mod = acquirePkcs11Module(settings.module);
  const what = `${describeToken(settings.token)}, key ${describeKey(settings.key)}`;
  try {
    const first = await mod.queue.run(async () => openAndLogin(mod.api, settings, what));
    let mechanism: Pkcs11Signer["mechanism"];
    try {
      mechanism = chooseMechanism(mod.api, settings, first.key.publicKey, what);
    } catch (e) {
      closeSession(mod.api, first.session);
      throw e;
    }
    return new TokenSigner(mod, settings, what, first, mechanism, options);
  } catch (e) {
    mod.release();
    throw e;
  }
}

function openAndLogin(api: PKCS11, settings: Pkcs11SignerSettings, what: string): Open {
  const slot = findSlot(api, settings.token);
  const session = openSession(api, slot, describeToken(settings.token));
  try {
    login(api, session, settings.pin, false, what);
    return { session, key: findTokenKey(api, session, settings.key, what) };
  } catch (e) {
    closeSession(api, session);
    throw e;
  }
}

function chooseMechanism(api: PKCS11, settings: Pkcs11SignerSettings, key: PublicKeyInfo, what: string): Pkcs11Signer["mechanism"] {
  const p = pkcs11js();
  const slot = findSlot(api, settings.token);
  const listed = new Set(api.C_GetMechanismList(slot));
  if (key.kind === "ec") {
    if (!listed.has(p.CKM_ECDSA)) throw new PkiError("mechanism-unsupported", `${what}: the token does not offer CKM_ECDSA`);
    return "CKM_ECDSA";
  }
  const want = settings.rsaMechanism;
  if ((want === "auto" || want === "CKM_SHA256_RSA_PKCS") && listed.has(p.CKM_SHA256_RSA_PKCS)) return "CKM_SHA256_RSA_PKCS";
  if ((want === "auto" || want === "CKM_RSA_PKCS") && listed.has(p.CKM_RSA_PKCS)) return "CKM_RSA_PKCS";
  throw new PkiError("mechanism-unsupported", `${what}: the token does not offer ${want === "auto" ? "CKM_SHA256_RSA_PKCS or CKM_RSA_PKCS" : want}`);
}

class TokenSigner implements Pkcs11Signer {
  readonly publicKey: PublicKeyInfo;
  readonly signatureAlgorithm: SignatureAlgorithm;
  readonly description: string;
  private open: Open | undefined;
  private closed = false;
  private disabled: PkiError | undefined;

  constructor(
    private readonly mod: Pkcs11Module,
    private readonly settings: Pkcs11SignerSettings,
    private readonly what: string,
    first: Open,
    readonly mechanism: Pkcs11Signer["mechanism"],
    private readonly options: Pkcs11SignerOptions,
  ) {
    this.open = first;
    this.publicKey = first.key.publicKey;
    this.signatureAlgorithm = signatureAlgorithmForKey(first.key.publicKey);
    const k = first.key.publicKey;
    this.description = `${what} (${k.kind === "ec" ? `ECC ${k.curve}` : `RSA-${k.bits}`}, ${mechanism})`;
  }

  sign(data: Uint8Array): Promise<Uint8Array> {
    if (this.closed) return Promise.reject(new PkiError("signer-closed", `${this.what}: the signer is closed`));
    return this.mod.queue.run(async () => {
      this.options.observe?.signStart();
      try {
        return await this.signNow(data);
      } finally {
        this.options.observe?.signEnd();
      }
    });
  }

  available(): Promise<{ ok: true } | { ok: false; detail: string }> {
    if (this.closed) return Promise.resolve({ ok: false, detail: `${this.what}: the signer is closed` });
    if (this.disabled) return Promise.resolve({ ok: false, detail: `${this.what}: disabled after a refused PIN` });
    return this.mod.queue.run(async () => {
      try {
        findSlot(this.mod.api, this.settings.token);
        return { ok: true } as const;
      } catch (e) {
        return { ok: false, detail: e instanceof Error ? e.message : String(e) } as const;
      }
    });
  }

  private async signNow(data: Uint8Array): Promise<Uint8Array> {
    if (this.closed) throw new PkiError("signer-closed", `${this.what}: the signer is closed`);
    if (this.disabled) throw new PkiError("signer-disabled", `${this.what}: disabled after an earlier refusal: ${this.disabled.message}`);
    const p = pkcs11js();
    const api = this.mod.api;
    const open = this.reopenIfNeeded();
    const alg = SIGNATURE_ALGORITHMS[this.signatureAlgorithm];
    const digest = createHash(alg.hash).update(data).digest();
    const key = this.publicKey;
    let input: Buffer;
    let mechanism: number;
    if (this.mechanism === "CKM_ECDSA") {
      input = digest;
      mechanism = p.CKM_ECDSA;
    } else if (this.mechanism === "CKM_SHA256_RSA_PKCS") {
      input = Buffer.from(data);
      mechanism = p.CKM_SHA256_RSA_PKCS;
    } else {
      input = Buffer.concat([SHA256_DIGEST_INFO, digest]);
      mechanism = p.CKM_RSA_PKCS;
    }
    const outSize = key.kind === "ec" ? 2 * EC_CURVES[key.curve].size : Math.ceil(key.bits / 8);
    let raw: Buffer;
    try {
      api.C_SignInit(open.session, { mechanism }, open.key.handle);
      if (open.key.alwaysAuthenticate) this.guardLogin(() => login(api, open.session, this.settings.pin, true, this.what));
      raw = await api.C_SignAsync(open.session, input, Buffer.alloc(outSize));
    } catch (e) {
      // a signing operation left active (C_SignInit without a finished C_Sign) would refuse every later one
      // with CKR_OPERATION_ACTIVE; closing the session ends it, and the next signature reopens
      this.dropSession();
      if (e instanceof PkiError) throw e;
      if (sessionLost(pkcs11Code(e))) {
        throw new PkiError("token-unavailable", `${this.what}: the token session was lost (${pkcs11Reason(e)}); the next signature reopens it`);
      }
      throw new PkiError("sign-failed", `${this.what}: signing failed (${pkcs11Reason(e)}); the next signature reopens the session`);
    }
    const signature = key.kind === "ec" ? ecdsaSignatureToDer(raw, EC_CURVES[key.curve].size) : new Uint8Array(raw);
    const pub = createPublicKey({ key: Buffer.from(key.spki), format: "der", type: "spki" });
    if (!cryptoVerify(alg.hash, data, pub, signature)) {
      throw new PkiError("sign-failed", `${this.what}: the token's signature does not verify under its public key (does the CKA_ID belong to another key pair?)`);
    }
    return signature;
  }

  /** Logins that fail on the PIN disable the signer for good. */
  private guardLogin(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      if (e instanceof PkiError && (e.code === "pin-incorrect" || e.code === "pin-locked")) this.disabled = e;
      throw e;
    }
  }

  private reopenIfNeeded(): Open {
    if (this.open) return this.open;
    let next: Open | undefined;
    this.guardLogin(() => {
      next = openAndLogin(this.mod.api, this.settings, this.what);
    });
    if (!next) throw new PkiError("token-unavailable", `${this.what}: could not reopen the session`);
    if (!Buffer.from(next.key.publicKey.spki).equals(Buffer.from(this.publicKey.spki))) {
      closeSession(this.mod.api, next.session);
      throw new PkiError("key-not-found", `${this.what}: after reopening, the key is not the one this signer started with (another token?)`);
    }
    this.open = next;
    return next;
  }

  private dropSession(): void {
    if (this.open) closeSession(this.mod.api, this.open.session);
    this.open = undefined;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.mod.queue.run(async () => {
      this.dropSession();
    });
    this.mod.release();
  }
}
