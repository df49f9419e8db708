/**
 * Tpm12Client: one method per TPM 1.2 command, each a thin call of its declaration in ../tpm12/commands.ts
 * over one of the TPM 2.0 client's transports (swtpm's socket, /dev/tpm0: the framing — a 10-byte header whose
 * size field counts the whole message — is the same in both versions). Authorized commands run in a fresh OIAP
 * or OSAP session with continueAuthSession FALSE, so no session outlives its command; every response HMAC is
 * verified before its parameters are used. Secrets (owner, SRK, AIK usage auth) are 20-byte values held by the
 * caller; this file never logs or stringifies them.
 */
import { randomBytes } from "node:crypto";
import { type Captured, ParseError, decodeExact } from "@fleetd/verify/codec";
import { ctEqual, digest, hmac } from "@fleetd/verify/crypto";
import { TPM_ALG } from "@fleetd/verify/tcg";
import {
  type Command12, TPM_ActivateIdentity, TPM_Extend, TPM_FlushSpecific, TPM_GetCapability, TPM_LoadKey2,
  TPM_MakeIdentity, TPM_NV_ReadValue, TPM_OIAP, TPM_OSAP, TPM_OwnerReadInternalPub, TPM_PcrRead, TPM_Quote,
  TPM_ReadPubek, TPM_Startup, TCG_PCCLIENT_STORED_CERT, TPM_CAP_VERSION_INFO, TPM12,
  type TPM_CAP_VERSION_INFO as VersionInfo, type TPM_KEY, type TPM_PUBKEY, type TPM_SYMMETRIC_KEY,
} from "@fleetd/verify/tpm12";
import type { TpmTransport } from "../tpmclient/transport.js";
import { authHmac, type AuthTrailer, encodeParams, inParamDigest, marshalCommand12, outParamDigest, parseResponse12, type Response12 } from "./command.js";
import { Tpm12AuthError, Tpm12Error } from "./rc.js";

/** A 20-byte TPM 1.2 secret (TPM_AUTHDATA). The well-known secret is 20 zero bytes. */
export type AuthData = Uint8Array;
export const WELL_KNOWN_SECRET: AuthData = new Uint8Array(20);

/** An authorization session: its handle, the TPM's last nonceEven and the HMAC key (usage auth or OSAP shared secret). */
export interface Session12 {
  handle: number;
  nonceEven: Uint8Array;
  key: Uint8Array;
}

const RETRYABLE = new Set(["TPM_RETRY", "TPM_DOING_SELFTEST"]);

function checkAuth(a: Uint8Array, what: string): void {
  if (a.length !== 20) throw new RangeError(`${what} must be 20 bytes (TPM_AUTHDATA)`);
}

export class Tpm12Client {
  constructor(
    readonly transport: TpmTransport,
    private readonly random: (n: number) => Uint8Array = (n) => new Uint8Array(randomBytes(n)),
  ) {}

  /** Runs one command in the given sessions (each closed by it); verifies each response HMAC. */
  async run<P, R>(spec: Command12<P, R>, handles: readonly number[], params: P, sessions: readonly Session12[] = []): Promise<Response12<R>> {
    const paramBytes = encodeParams(spec, params);
    const inDigest = inParamDigest(spec.ordinal, paramBytes);
    const trailers: AuthTrailer[] = sessions.map((s) => {
      const nonceOdd = this.random(20);
      return { authHandle: s.handle, nonceOdd, continueAuthSession: false, authValue: authHmac(s.key, inDigest, s.nonceEven, nonceOdd, false) };
    });
    const cmd = marshalCommand12(spec, handles, paramBytes, trailers);
    for (let attempt = 1; ; attempt++) {
      const resp = await this.transport.send(cmd);
      let out: Response12<R>;
      try {
        out = parseResponse12(spec, resp);
      } catch (e) {
        if (e instanceof Tpm12Error && RETRYABLE.has(e.rcName) && attempt < 5) {
          await new Promise((r) => setTimeout(r, 20 * attempt));
          continue;
        }
        // A failed command may leave its sessions open on some TPMs: flush them, ignoring refusals.
        if (e instanceof Tpm12Error) for (const s of sessions) await this.flushQuietly(s.handle, TPM12.RT_AUTH);
        throw e;
      }
      const outDigest = outParamDigest(spec.ordinal, out.paramBytes);
      sessions.forEach((s, i) => {
        const a = out.auths[i];
        const t = trailers[i];
        if (!a || !t) throw new Tpm12AuthError(spec.name, i + 1);
        const expected = authHmac(s.key, outDigest, a.nonceEven, t.nonceOdd, a.continueAuthSession);
        if (!ctEqual(expected, a.resAuth)) throw new Tpm12AuthError(spec.name, i + 1);
        s.nonceEven = a.nonceEven;
      });
      return out;
    }
  }

  async startup(type: number = TPM12.ST_CLEAR): Promise<void> {
    await this.run(TPM_Startup, [], { startupType: type });
  }

  /** An OIAP session whose HMAC key is `usageAuth`. */
  async oiap(usageAuth: AuthData): Promise<Session12> {
    checkAuth(usageAuth, "usage auth");
    const r = await this.run(TPM_OIAP, [], {});
    return { handle: r.params.authHandle, nonceEven: r.params.nonceEven, key: usageAuth };
  }

  /** An OSAP session for an entity; its key is the shared secret HMAC-SHA1(entityAuth, nonceEvenOSAP ‖ nonceOddOSAP). */
  async osap(entityType: number, entityValue: number, entityAuth: AuthData): Promise<Session12> {
    checkAuth(entityAuth, "entity auth");
    const nonceOddOSAP = this.random(20);
    const r = await this.run(TPM_OSAP, [], { entityType, entityValue, nonceOddOSAP });
    const key = hmac(TPM_ALG.SHA1, entityAuth, r.params.nonceEvenOSAP, nonceOddOSAP);
    return { handle: r.params.authHandle, nonceEven: r.params.nonceEven, key };
  }

  async getCapability(capArea: number, subCap: Uint8Array): Promise<Uint8Array> {
    return (await this.run(TPM_GetCapability, [], { capArea, subCap })).params.resp;
  }

  /** TPM_CAP_VERSION_VAL: a TPM 1.2 answers with TPM_CAP_VERSION_INFO (a TPM 2.0 refuses the tag). */
  async versionInfo(): Promise<VersionInfo> {
    const v = decodeExact(TPM_CAP_VERSION_INFO, await this.getCapability(TPM12.CAP_VERSION_VAL, new Uint8Array(0)));
    if (v.tag !== TPM12.TAG_CAP_VERSION_INFO) throw new ParseError("invalid-value", "TPM_CAP_VERSION_INFO.tag", 0, `tag 0x${v.tag.toString(16)} is not TPM_TAG_CAP_VERSION_INFO`);
    return v;
  }

  async nvRead(nvIndex: number, offset: number, dataSize: number): Promise<Uint8Array> {
    const data = (await this.run(TPM_NV_ReadValue, [], { nvIndex, offset, dataSize })).params.data;
    if (data.length !== dataSize) throw new ParseError("invalid-value", "TPM_NV_ReadValue response.data", 14, `asked for ${dataSize} bytes, got ${data.length}`);
    return data;
  }

  /**
   * The EK certificate (DER) from TPM_NV_INDEX_EKCert: a TCG_PCCLIENT_STORED_CERT header (tag 0x1001, full
   * certificate, size) then TCG_FULL_CERT (tag 0x1002, DER). Read in chunks a TPM's NV buffer allows.
   */
  async readEkCertificate(): Promise<Uint8Array> {
    const head = decodeExact(TCG_PCCLIENT_STORED_CERT, await this.nvRead(TPM12.NV_INDEX_EKCert, 0, 5));
    if (head.tag !== TPM12.TAG_PCCLIENT_STORED_CERT || head.certType !== 0) {
      throw new ParseError("invalid-value", "TCG_PCCLIENT_STORED_CERT", 0, `tag 0x${head.tag.toString(16)} type ${head.certType} is not a stored full certificate`);
    }
    if (head.certSize < 3) throw new ParseError("invalid-value", "TCG_PCCLIENT_STORED_CERT.certSize", 3, `certSize ${head.certSize}`);
    const chunks: Uint8Array[] = [];
    for (let at = 0; at < head.certSize; at += 512) chunks.push(await this.nvRead(TPM12.NV_INDEX_EKCert, 5 + at, Math.min(512, head.certSize - at)));
    const full = Buffer.concat(chunks);
    if (full.readUInt16BE(0) !== TPM12.TAG_PCCLIENT_FULL_CERT) throw new ParseError("invalid-value", "TCG_FULL_CERT.tag", 5, `tag 0x${full.readUInt16BE(0).toString(16)} is not 0x1002`);
    return new Uint8Array(full.subarray(2));
  }

  /** TPM_ReadPubek (works only while no owner is installed); checks its checksum over our antiReplay. */
  async readPubek(): Promise<Captured<TPM_PUBKEY>> {
    const antiReplay = this.random(20);
    const r = await this.run(TPM_ReadPubek, [], { antiReplay });
    const want = digest(TPM_ALG.SHA1, r.params.pubEndorsementKey.bytes, antiReplay);
    if (!ctEqual(want, r.params.checksum)) throw new ParseError("invalid-value", "TPM_ReadPubek response.checksum", 0, "checksum does not cover the EK and our antiReplay nonce");
    return r.params.pubEndorsementKey;
  }

  /** TPM_OwnerReadInternalPub(TPM_KH_EK): the EK's public key under owner authorization. */
  async ownerReadEk(ownerAuth: AuthData): Promise<Captured<TPM_PUBKEY>> {
    const s = await this.oiap(ownerAuth);
    return (await this.run(TPM_OwnerReadInternalPub, [], { keyHandle: TPM12.KH_EK }, [s])).params.publicPortion;
  }

  /**
   * TPM_MakeIdentity: auth 1 = the SRK (OIAP), auth 2 = the owner (OSAP, whose shared secret encrypts the new
   * key's usage auth by ADIP: identityAuth ⊕ SHA1(sharedSecret ‖ nonceEven)). Returns the AIK blob (wrapped by the
   * SRK, not loaded) and its identityBinding.
   */
  async makeIdentity(a: { ownerAuth: AuthData; srkAuth: AuthData; identityAuth: AuthData; labelPrivCADigest: Uint8Array; template: TPM_KEY }): Promise<{ idKey: Captured<TPM_KEY>; identityBinding: Uint8Array }> {
    checkAuth(a.identityAuth, "identity auth");
    const srk = await this.oiap(a.srkAuth);
    const owner = await this.osap(TPM12.ET_OWNER, TPM12.KH_OWNER, a.ownerAuth);
    const pad = digest(TPM_ALG.SHA1, owner.key, owner.nonceEven);
    const enc = a.identityAuth.map((b, i) => b ^ (pad[i] ?? 0));
    const r = await this.run(TPM_MakeIdentity, [], { identityAuth: enc, labelPrivCADigest: a.labelPrivCADigest, idKeyParams: a.template }, [srk, owner]);
    return r.params;
  }

  /** TPM_LoadKey2 under `parent` (authorized by parentAuth); returns the loaded key's handle. */
  async loadKey2(parent: number, parentAuth: AuthData, key: Captured<TPM_KEY>): Promise<number> {
    const s = await this.oiap(parentAuth);
    const r = await this.run(TPM_LoadKey2, [parent], { inKey: key }, [s]);
    const h = r.handles[0];
    if (h === undefined) throw new ParseError("truncated", "TPM_LoadKey2 response.inkeyHandle", 10, "no handle");
    return h;
  }

  /** TPM_ActivateIdentity: auth 1 = the AIK's usage auth, auth 2 = the owner. */
  async activateIdentity(idKeyHandle: number, idKeyAuth: AuthData, ownerAuth: AuthData, blob: Uint8Array): Promise<TPM_SYMMETRIC_KEY> {
    const key = await this.oiap(idKeyAuth);
    const owner = await this.oiap(ownerAuth);
    return (await this.run(TPM_ActivateIdentity, [idKeyHandle], { blob }, [key, owner])).params.symmetricKey;
  }

  /** TPM_Quote with a loaded key over `pcrs` (SHA-1 PCRs 0-23) and 20 bytes of externalData. */
  async quote(keyHandle: number, keyAuth: AuthData, externalData: Uint8Array, pcrs: readonly number[]): Promise<{ pcrComposite: Uint8Array; signature: Uint8Array }> {
    const targetPCR = new Uint8Array(3);
    for (const p of pcrs) {
      if (!Number.isInteger(p) || p < 0 || p > 23) throw new RangeError(`PCR ${p} is not a TPM 1.2 PCR`);
      targetPCR[p >> 3] = (targetPCR[p >> 3] ?? 0) | (1 << (p & 7));
    }
    const s = await this.oiap(keyAuth);
    const r = await this.run(TPM_Quote, [keyHandle], { externalData, targetPCR }, [s]);
    return { pcrComposite: r.params.pcrData.bytes, signature: r.params.sig };
  }

  async pcrRead(pcr: number): Promise<Uint8Array> {
    return (await this.run(TPM_PcrRead, [], { pcrIndex: pcr })).params.outDigest;
  }

  async extend(pcr: number, sha1: Uint8Array): Promise<Uint8Array> {
    return (await this.run(TPM_Extend, [], { pcrNum: pcr, inDigest: sha1 })).params.outDigest;
  }

  async flushSpecific(handle: number, resourceType: number): Promise<void> {
    await this.run(TPM_FlushSpecific, [handle], { resourceType });
  }

  private async flushQuietly(handle: number, resourceType: number): Promise<void> {
    try {
      await this.flushSpecific(handle, resourceType);
    } catch {
      // already gone: a TPM closes a session on most failures
    }
  }

  async close(): Promise<void> {
    await this.transport.close();
  }
}
