/**
 * TpmClient: one method per TPM command, each a thin call of the command's declaration in ../tpm/commands.ts
 * over a transport. The protocol steps (EK, SRK, AK, activation, quote, certify) live in their own files and
 * are built from these.
 */
import { randomBytes } from "node:crypto";
import { type Captured, ParseError } from "@fleetd/verify/codec";
import { ctEqual, hex } from "@fleetd/verify/crypto";
import {
  objectName, type CommandSpec, type TPMS_AUTH_COMMAND, type TPMS_CAPABILITY_DATA, type TPMS_NV_PUBLIC,
  type TPMT_SIG_SCHEME, TPM_CAP, TPM_SE, TPM2_ActivateCredential, TPM2_Certify, TPM2_Create, TPM2_CreatePrimary,
  TPM2_FlushContext, TPM2_GetCapability, TPM2_Load, TPM2_NV_Read, TPM2_NV_ReadPublic, TPM2_PCR_Extend, TPM2_PCR_Read,
  TPM2_PolicySecret, TPM2_Quote, TPM2_ReadPublic, TPM2_Sign, TPM2_StartAuthSession, type TPML_PCR_SELECTION,
  type TPMS_ATTEST, type TPMT_PUBLIC, type TPMT_SIGNATURE,
} from "@fleetd/verify/tpm";
import { TPM_ALG, TPM_RH, TPM_ST } from "@fleetd/verify/tcg";
import { type CommandOutput, marshalCommand, parseResponse } from "./command.js";
import { TpmError } from "./rc.js";
import { passwordAuth } from "./sessions.js";
import type { TpmTransport } from "./transport.js";

const EMPTY = new Uint8Array(0);
const NULL_SCHEME: TPMT_SIG_SCHEME = { scheme: TPM_ALG.NULL, details: { kind: "null" } };

/** A public area as the TPM returned it: decoded, its exact TPMT_PUBLIC bytes, and its Name. */
export interface PublicArea {
  public: TPMT_PUBLIC;
  /** Marshalled TPMT_PUBLIC (no TPM2B size), exactly as the TPM sent it. */
  publicBytes: Uint8Array;
  name: Uint8Array;
}

/** An object loaded in the TPM. */
export interface LoadedObject extends PublicArea {
  handle: number;
}

/** A TPMS_ATTEST and its TPMT_SIGNATURE, both decoded and as exact bytes (the verifier takes the bytes). */
export interface SignedAttestation {
  attest: TPMS_ATTEST;
  attestBytes: Uint8Array;
  signature: TPMT_SIGNATURE;
  signatureBytes: Uint8Array;
}

export interface CreatedObject {
  /** TPM2B_PRIVATE payload (no size prefix). */
  private: Uint8Array;
  public: TPMT_PUBLIC;
  publicBytes: Uint8Array;
  name: Uint8Array;
}

/**
 * Warnings after which the TPM did not run the command and asks to be asked again (Part 2 §6.6.3). swtpm answers
 * the first TPM2_ActivateCredential with a freshly loaded RSA EK with TPM_RC_RETRY; real TPMs do it for Certify
 * (go-tpm issue 59, SPIRE's tpm_devid retries too).
 */
const RETRYABLE = new Set(["TPM_RC_RETRY", "TPM_RC_YIELDED", "TPM_RC_TESTING"]);

export interface TpmClientOptions {
  /** Attempts for a command answered with a retryable warning (default 5). */
  attempts?: number;
  /** Delay before the n-th retry, ms (default 20·n). */
  retryDelayMs?: (attempt: number) => number;
}

export class TpmClient {
  private readonly attempts: number;
  private readonly retryDelayMs: (attempt: number) => number;

  constructor(
    readonly transport: TpmTransport,
    opts: TpmClientOptions = {},
  ) {
    this.attempts = Math.max(1, opts.attempts ?? 5);
    this.retryDelayMs = opts.retryDelayMs ?? ((n) => 20 * n);
  }

  /**
   * Runs one declared command. A retryable warning sends the same bytes again (the command did not run, so its
   * sessions are unchanged); any other refusal is a TpmError.
   */
  async run<P, R>(
    spec: CommandSpec<P, R>,
    handles: readonly number[],
    params: P,
    sessions: readonly TPMS_AUTH_COMMAND[] = [],
  ): Promise<CommandOutput<R>> {
    const cmd = marshalCommand(spec, { handles, sessions, params });
    for (let attempt = 1; ; attempt++) {
      const resp = await this.transport.send(cmd);
      try {
        return parseResponse(spec, resp, sessions.length);
      } catch (e) {
        if (!(e instanceof TpmError && RETRYABLE.has(e.name)) || attempt >= this.attempts) throw e;
      }
      await new Promise((r) => setTimeout(r, this.retryDelayMs(attempt)));
    }
  }

  close(): Promise<void> {
    return this.transport.close();
  }

  // ---- Capabilities ----

  async getCapability(capability: number, property: number, propertyCount: number): Promise<{ moreData: boolean; data: TPMS_CAPABILITY_DATA["data"] }> {
    const out = await this.run(TPM2_GetCapability, [], { capability, property, propertyCount });
    return { moreData: out.params.moreData === 1, data: out.params.capabilityData.data };
  }

  /** TPM properties from `first` (TPM_PT), up to `count`. */
  async getProperties(first: number, count = 1): Promise<Map<number, number>> {
    const { data } = await this.getCapability(TPM_CAP.TPM_PROPERTIES, first, count);
    const out = new Map<number, number>();
    if (data.kind === "tpmProperties") for (const p of data.list) out.set(p.property, p.value);
    return out;
  }

  /** Handles of one type (first octet `ht`, e.g. 0x80 transient, 0x01 NV), following moreData. */
  async getHandles(ht: number): Promise<number[]> {
    const out: number[] = [];
    let next = (ht << 24) >>> 0;
    const end = ((ht + 1) * 2 ** 24) >>> 0;
    for (let round = 0; round < 64; round++) {
      const { moreData, data } = await this.getCapability(TPM_CAP.HANDLES, next, 256);
      const list = data.kind === "handles" ? data.list.filter((h) => h >>> 24 === ht) : [];
      out.push(...list);
      const last = list[list.length - 1];
      if (!moreData || last === undefined || last + 1 >= end) break;
      next = last + 1;
    }
    return out;
  }

  // ---- Objects ----

  async createPrimary(hierarchy: number, template: TPMT_PUBLIC, hierarchyAuth: Uint8Array = EMPTY): Promise<LoadedObject> {
    const out = await this.run(
      TPM2_CreatePrimary,
      [hierarchy],
      { inSensitive: { userAuth: EMPTY, data: EMPTY }, inPublic: template, outsideInfo: EMPTY, creationPCR: [] },
      [passwordAuth(hierarchyAuth)],
    );
    const handle = out.handles[0] ?? 0;
    return { handle, ...publicArea(out.params.outPublic, out.params.name, TPM2_CreatePrimary.name) };
  }

  async create(parent: number, template: TPMT_PUBLIC, parentAuth: Uint8Array = EMPTY): Promise<CreatedObject> {
    const out = await this.run(
      TPM2_Create,
      [parent],
      { inSensitive: { userAuth: EMPTY, data: EMPTY }, inPublic: template, outsideInfo: EMPTY, creationPCR: [] },
      [passwordAuth(parentAuth)],
    );
    const pub = publicArea(out.params.outPublic, undefined, TPM2_Create.name);
    return { private: out.params.outPrivate, public: pub.public, publicBytes: pub.publicBytes, name: pub.name };
  }

  /** Loads an object from its TPM2B_PRIVATE payload and exact TPMT_PUBLIC bytes. */
  async load(parent: number, privateBlob: Uint8Array, publicBytes: Captured<TPMT_PUBLIC>, parentAuth: Uint8Array = EMPTY): Promise<LoadedObject> {
    const out = await this.run(TPM2_Load, [parent], { inPrivate: privateBlob, inPublic: publicBytes }, [passwordAuth(parentAuth)]);
    const handle = out.handles[0] ?? 0;
    return { handle, ...publicArea(publicBytes, out.params.name, TPM2_Load.name) };
  }

  async readPublic(handle: number): Promise<LoadedObject & { qualifiedName: Uint8Array }> {
    const out = await this.run(TPM2_ReadPublic, [handle], {});
    return { handle, ...publicArea(out.params.outPublic, out.params.name, TPM2_ReadPublic.name), qualifiedName: out.params.qualifiedName };
  }

  async flushContext(handle: number): Promise<void> {
    await this.run(TPM2_FlushContext, [], { flushHandle: handle });
  }

  // ---- NV ----

  async nvReadPublic(index: number): Promise<{ nvPublic: TPMS_NV_PUBLIC; nvName: Uint8Array }> {
    const out = await this.run(TPM2_NV_ReadPublic, [index], {});
    return out.params;
  }

  async nvRead(authHandle: number, index: number, size: number, offset: number, auth: Uint8Array = EMPTY): Promise<Uint8Array> {
    const out = await this.run(TPM2_NV_Read, [authHandle, index], { size, offset }, [passwordAuth(auth)]);
    return out.params.data;
  }

  // ---- PCRs ----

  async pcrRead(selection: TPML_PCR_SELECTION): Promise<{ updateCounter: number; selection: TPML_PCR_SELECTION; values: Uint8Array[] }> {
    const out = await this.run(TPM2_PCR_Read, [], { pcrSelectionIn: selection });
    return { updateCounter: out.params.pcrUpdateCounter, selection: out.params.pcrSelectionOut, values: out.params.pcrValues };
  }

  async pcrExtend(pcr: number, digests: { hashAlg: number; digest: Uint8Array }[]): Promise<void> {
    await this.run(TPM2_PCR_Extend, [pcr], { digests }, [passwordAuth()]);
  }

  // ---- Attestation and signing ----

  async quote(signHandle: number, qualifyingData: Uint8Array, selection: TPML_PCR_SELECTION, signAuth: Uint8Array = EMPTY): Promise<SignedAttestation> {
    const out = await this.run(
      TPM2_Quote,
      [signHandle],
      { qualifyingData, inScheme: NULL_SCHEME, PCRselect: selection },
      [passwordAuth(signAuth)],
    );
    return signed(out.params.quoted, out.params.signature);
  }

  async certify(objectHandle: number, signHandle: number, qualifyingData: Uint8Array, objectAuth: Uint8Array = EMPTY, signAuth: Uint8Array = EMPTY): Promise<SignedAttestation> {
    const out = await this.run(
      TPM2_Certify,
      [objectHandle, signHandle],
      { qualifyingData, inScheme: NULL_SCHEME },
      [passwordAuth(objectAuth), passwordAuth(signAuth)],
    );
    return signed(out.params.certifyInfo, out.params.signature);
  }

  /** Signs a digest with the key's own scheme (NULL inScheme) and a NULL hashcheck ticket (unrestricted keys). */
  async sign(keyHandle: number, digest: Uint8Array, keyAuth: Uint8Array = EMPTY): Promise<{ signature: TPMT_SIGNATURE; signatureBytes: Uint8Array }> {
    const out = await this.run(
      TPM2_Sign,
      [keyHandle],
      { digest, inScheme: NULL_SCHEME, validation: { tag: TPM_ST.HASHCHECK, hierarchy: TPM_RH.NULL, digest: EMPTY } },
      [passwordAuth(keyAuth)],
    );
    return { signature: out.params.signature.value, signatureBytes: out.params.signature.bytes };
  }

  // ---- Sessions and credentials ----

  /** An unbound, unsalted session of `sessionType` (POLICY by default) with a fresh 32-byte caller nonce. */
  async startAuthSession(sessionType: number = TPM_SE.POLICY, authHash: number = TPM_ALG.SHA256): Promise<{ handle: number; nonceTPM: Uint8Array }> {
    const out = await this.run(TPM2_StartAuthSession, [TPM_RH.NULL, TPM_RH.NULL], {
      nonceCaller: new Uint8Array(randomBytes(32)),
      encryptedSalt: EMPTY,
      sessionType,
      symmetric: { algorithm: TPM_ALG.NULL, details: { kind: "null" } },
      authHash,
    });
    return { handle: out.handles[0] ?? 0, nonceTPM: out.params.nonceTPM };
  }

  /** PolicySecret(authHandle) on `policySession`, authorized with the entity's password (empty by default). */
  async policySecret(authHandle: number, policySession: number, auth: Uint8Array = EMPTY): Promise<void> {
    await this.run(
      TPM2_PolicySecret,
      [authHandle, policySession],
      { nonceTPM: EMPTY, cpHashA: EMPTY, policyRef: EMPTY, expiration: 0 },
      [passwordAuth(auth)],
    );
  }

  async activateCredential(
    activateHandle: number,
    keyHandle: number,
    credentialBlob: { integrityHMAC: Uint8Array; encIdentity: Uint8Array },
    secret: Uint8Array,
    sessions: readonly [TPMS_AUTH_COMMAND, TPMS_AUTH_COMMAND],
  ): Promise<Uint8Array> {
    const out = await this.run(TPM2_ActivateCredential, [activateHandle, keyHandle], { credentialBlob, secret }, sessions);
    return out.params.certInfo;
  }
}

/** The public area with its Name computed over the exact bytes; a Name the TPM reported must agree. */
function publicArea(p: Captured<TPMT_PUBLIC>, tpmName: Uint8Array | undefined, command: string): PublicArea {
  const name = objectName(p.bytes);
  if (tpmName && !ctEqual(name, tpmName)) {
    throw new ParseError("invalid-value", `${command} response.name`, 0, `the TPM reported Name ${hex(tpmName)} but the public area's Name is ${hex(name)}`);
  }
  return { public: p.value, publicBytes: p.bytes, name };
}

function signed(attest: Captured<TPMS_ATTEST>, sig: Captured<TPMT_SIGNATURE>): SignedAttestation {
  return { attest: attest.value, attestBytes: attest.bytes, signature: sig.value, signatureBytes: sig.bytes };
}
