/**
 * An event log writer for tests: build events, compute their digests, and keep the list of extends a TPM
 * must see so that a log and a (real, swtpm) quote agree — or, on purpose, disagree.
 *
 * Every structure is encoded from the same declarations the parser decodes (structures.ts). The writer
 * replays independently of replay.ts (start values, NO_ACTION) so the two can check each other.
 */
import { encode, Writer } from "@fleetd/verify/codec";
import { digest } from "@fleetd/verify/crypto";
import { HASHES, isHashAlg, TPM_ALG, type HashAlgId } from "@fleetd/verify/tcg";
import {
  EV, eventDigest, type EventLog, type TcgEvent, GUID, guidFromString, EFI_DEVICE_PATH_NODE,
  EFI_SIGNATURE_LIST_HEADER, EFI_SIGNATURE_LIST_HEADER_SIZE, SPEC_ID_EVENT03, TCG_EfiSpecIDEvent, TCG_PCR_EVENT,
  TCG_PCR_EVENT2, UEFI_IMAGE_LOAD_EVENT, UEFI_VARIABLE_DATA,
} from "@fleetd/verify/eventlog";

export interface WrittenEvent {
  pcr: number;
  type: number;
  data: Uint8Array;
  digests: Map<HashAlgId, Uint8Array>;
  /** false: extended into the TPM but left out of the log (firmware that forgets to log). */
  logged: boolean;
  /** false: logged but never extended (a forged event); EV_NO_ACTION is never extended anyway. */
  extended: boolean;
}

export interface AddOptions {
  /** Hash these bytes instead of `data` (an Authenticode image digest, a tampered event). */
  hashOf?: Uint8Array;
  /** Explicit digests, overriding hashOf/data. */
  digests?: Partial<Record<HashAlgId, Uint8Array>>;
  logged?: boolean;
  extended?: boolean;
}

const utf16 = (s: string) => new Uint8Array(Buffer.from(s, "utf16le"));
const latin1 = (s: string) => new Uint8Array(Buffer.from(s, "latin1"));

/** UEFI_VARIABLE_DATA bytes. */
export function variableData(guid: string, name: string, data: Uint8Array): Uint8Array {
  return encode(
    UEFI_VARIABLE_DATA,
    { variableName: guid, unicodeNameLength: BigInt(name.length), variableDataLength: BigInt(data.length), unicodeName: utf16(name), variableData: data },
    "le",
  );
}

/** One EFI_SIGNATURE_LIST of `type` with the given entries (each owner GUID ‖ data, all the same size). */
export function signatureList(type: string, owner: string, entries: Uint8Array[]): Uint8Array {
  if (entries.length === 0) return new Uint8Array();
  const size = 16 + entries[0]!.length;
  if (entries.some((e) => 16 + e.length !== size)) throw new Error("signatureList: entries must have equal size (one list per certificate)");
  const w = new Writer("le");
  EFI_SIGNATURE_LIST_HEADER.encode(w, {
    signatureType: type,
    signatureListSize: EFI_SIGNATURE_LIST_HEADER_SIZE + size * entries.length,
    signatureHeaderSize: 0,
    signatureSize: size,
  });
  const o = guidFromString(owner);
  for (const e of entries) w.bytes(o).bytes(e);
  return w.finish();
}

/** PK/KEK/db/dbx contents: one X.509 list per certificate, then one SHA-256 list. */
export function signatureDatabase(owner: string, certs: Uint8Array[], sha256: Uint8Array[] = []): Uint8Array {
  return new Uint8Array(Buffer.concat([...certs.map((c) => signatureList(GUID.EFI_CERT_X509, owner, [c])), signatureList(GUID.EFI_CERT_SHA256, owner, sha256)]));
}

/** A device path: file path node(s) and the end node. */
export function filePathDevicePath(path: string): Uint8Array {
  const w = new Writer("le");
  const fp = utf16(path + "\0");
  EFI_DEVICE_PATH_NODE.encode(w, { type: 4, subType: 4, length: 4 + fp.length, data: fp });
  EFI_DEVICE_PATH_NODE.encode(w, { type: 0x7f, subType: 0xff, length: 4, data: new Uint8Array() });
  return w.finish();
}

export function imageLoadEvent(devicePath: Uint8Array, imageLength = 0x10000n): Uint8Array {
  return encode(
    UEFI_IMAGE_LOAD_EVENT,
    { imageLocationInMemory: 0x7e000000n, imageLengthInMemory: imageLength, imageLinkTimeAddress: 0n, lengthOfDevicePath: BigInt(devicePath.length), devicePath },
    "le",
  );
}

export class EventLogWriter {
  readonly events: WrittenEvent[] = [];
  readonly banks: HashAlgId[];

  constructor(
    readonly format: "crypto-agile" | "sha1" = "crypto-agile",
    banks: HashAlgId[] = [TPM_ALG.SHA256],
  ) {
    this.banks = format === "sha1" ? [TPM_ALG.SHA1] : banks;
  }

  add(pcr: number, type: number, data: Uint8Array, opts: AddOptions = {}): this {
    const digests = new Map<HashAlgId, Uint8Array>();
    for (const alg of this.banks) {
      const explicit = opts.digests?.[alg];
      digests.set(alg, explicit ?? (type === EV.NO_ACTION ? new Uint8Array(HASHES[alg].size) : digest(alg, opts.hashOf ?? data)));
    }
    this.events.push({ pcr, type, data, digests, logged: opts.logged ?? true, extended: type !== EV.NO_ACTION && (opts.extended ?? true) });
    return this;
  }

  // --- helpers for the events real firmware writes ------------------------------------------------

  startupLocality(locality: number): this {
    return this.add(0, EV.NO_ACTION, new Uint8Array([...latin1("StartupLocality\0"), locality]));
  }
  separator(pcr: number, value: 0 | 0xffffffff = 0, opts: AddOptions = {}): this {
    const b = value === 0 ? new Uint8Array(4) : new Uint8Array([0xff, 0xff, 0xff, 0xff]);
    return this.add(pcr, EV.SEPARATOR, b, opts);
  }
  separators(pcrs: number[]): this {
    for (const p of pcrs) this.separator(p);
    return this;
  }
  efiAction(pcr: number, text: string, opts: AddOptions = {}): this {
    return this.add(pcr, EV.EFI_ACTION, latin1(text), opts);
  }
  variable(pcr: number, type: number, guid: string, name: string, data: Uint8Array, opts: AddOptions = {}): this {
    return this.add(pcr, type, variableData(guid, name, data), opts);
  }
  secureBootVariables(v: { secureBoot: number; pk: Uint8Array; kek: Uint8Array; db: Uint8Array; dbx: Uint8Array }): this {
    const g = GUID.EFI_GLOBAL_VARIABLE;
    const s = GUID.EFI_IMAGE_SECURITY_DATABASE;
    return this.variable(7, EV.EFI_VARIABLE_DRIVER_CONFIG, g, "SecureBoot", new Uint8Array([v.secureBoot]))
      .variable(7, EV.EFI_VARIABLE_DRIVER_CONFIG, g, "PK", v.pk)
      .variable(7, EV.EFI_VARIABLE_DRIVER_CONFIG, g, "KEK", v.kek)
      .variable(7, EV.EFI_VARIABLE_DRIVER_CONFIG, s, "db", v.db)
      .variable(7, EV.EFI_VARIABLE_DRIVER_CONFIG, s, "dbx", v.dbx);
  }
  /** EV_EFI_VARIABLE_AUTHORITY as firmware logs it: db's EFI_SIGNATURE_DATA (owner ‖ certificate). */
  dbAuthority(owner: string, cert: Uint8Array, opts: AddOptions = {}): this {
    return this.variable(7, EV.EFI_VARIABLE_AUTHORITY, GUID.EFI_IMAGE_SECURITY_DATABASE, "db", Buffer.concat([guidFromString(owner), cert]), opts);
  }
  /** shim's authority event for its vendor certificate: variable "Shim", the bare certificate. */
  shimAuthority(cert: Uint8Array): this {
    return this.variable(7, EV.EFI_VARIABLE_AUTHORITY, GUID.SHIM_LOCK, "Shim", cert);
  }
  sbatLevel(text: string): this {
    return this.variable(7, EV.EFI_VARIABLE_AUTHORITY, GUID.SHIM_LOCK, "SbatLevel", latin1(text));
  }
  /** shim's MokSBState as shim measures a set variable: PCR 7 (variable data) and PCR 14 (EV_IPL "MokSBState", digest of the value). */
  mokSbState(value: Uint8Array): this {
    return this.variable(7, EV.EFI_VARIABLE_AUTHORITY, GUID.SHIM_LOCK, "MokSBState", value).add(14, EV.IPL, latin1("MokSBState\0"), { hashOf: value });
  }
  /** Append an event of a parsed log as it was logged (its own digests, every bank of this writer). */
  addLogged(ev: TcgEvent): this {
    const digests: Partial<Record<HashAlgId, Uint8Array>> = {};
    for (const alg of this.banks) {
      const d = eventDigest(ev, alg);
      if (!d) throw new Error(`event ${ev.index} carries no ${HASHES[alg].bank} digest`);
      digests[alg] = d;
    }
    return this.add(ev.pcr, ev.type, ev.data, { digests });
  }
  /**
   * A writer holding a real (crypto-agile) log's events with their digests, for tests that derive a variant of it
   * (e.g. insert an event): `upTo` events (after the Spec ID header) now, the rest with `rest()`.
   */
  static fromLog(log: EventLog, upTo = log.events.length): { writer: EventLogWriter; rest: () => EventLogWriter } {
    if (log.format !== "crypto-agile") throw new Error("fromLog: only crypto-agile logs");
    const banks = log.banks.filter((b) => b.computable && isHashAlg(b.alg)).map((b) => b.alg as HashAlgId);
    const writer = new EventLogWriter("crypto-agile", banks);
    const events = log.events.slice(1);
    for (const ev of events.filter((e) => e.index < upTo)) writer.addLogged(ev);
    return {
      writer,
      rest: () => {
        for (const ev of events.filter((e) => e.index >= upTo)) writer.addLogged(ev);
        return writer;
      },
    };
  }
  /** EV_EFI_BOOT_SERVICES_APPLICATION: digest = the image's (here: `image` bytes') hash, data = load event. */
  bootApplication(path: string, image: Uint8Array, opts: AddOptions = {}): this {
    return this.add(4, EV.EFI_BOOT_SERVICES_APPLICATION, imageLoadEvent(filePathDevicePath(path), BigInt(image.length)), { hashOf: image, ...opts });
  }

  // --- output -----------------------------------------------------------------------------------

  private specIdEvent(): Uint8Array {
    return encode(
      TCG_EfiSpecIDEvent,
      {
        signature: SPEC_ID_EVENT03,
        platformClass: 0,
        specVersionMinor: 0,
        specVersionMajor: 2,
        specErrata: 0,
        uintnSize: 2,
        digestSizes: this.banks.map((a) => ({ algorithmId: a, digestSize: HASHES[a].size })),
        vendorInfo: new Uint8Array(),
      },
      "le",
    );
  }

  /** The log bytes. */
  bytes(): Uint8Array {
    const parts: Uint8Array[] = [];
    const logged = this.events.filter((e) => e.logged);
    if (this.format === "sha1") {
      for (const e of logged) parts.push(encode(TCG_PCR_EVENT, { pcrIndex: e.pcr, eventType: e.type, digest: e.digests.get(TPM_ALG.SHA1)!, event: e.data }, "le"));
      return new Uint8Array(Buffer.concat(parts));
    }
    parts.push(encode(TCG_PCR_EVENT, { pcrIndex: 0, eventType: EV.NO_ACTION, digest: new Uint8Array(20), event: this.specIdEvent() }, "le"));
    const codec = TCG_PCR_EVENT2(new Map(this.banks.map((a) => [a as number, HASHES[a].size])));
    for (const e of logged) {
      parts.push(
        encode(codec, { pcrIndex: e.pcr, eventType: e.type, digests: [...e.digests].map(([hashAlg, d]) => ({ hashAlg, digest: d })), event: e.data }, "le"),
      );
    }
    return new Uint8Array(Buffer.concat(parts));
  }

  /** The extends a TPM must receive, in order: for tpm2_pcrextend or a simulator. */
  extends(): { pcr: number; digests: Map<HashAlgId, Uint8Array> }[] {
    return this.events.filter((e) => e.extended).map((e) => ({ pcr: e.pcr, digests: e.digests }));
  }

  /** PCR values after `extends()` on a TPM started at locality 0 (PCRs 17-22 reset to all-FF), per extended PCR. */
  expectedPcrs(): Map<HashAlgId, Map<number, Uint8Array>> {
    const out = new Map<HashAlgId, Map<number, Uint8Array>>();
    for (const alg of this.banks) {
      const m = new Map<number, Uint8Array>();
      const reset = (pcr: number) => new Uint8Array(HASHES[alg].size).fill(pcr >= 17 && pcr <= 22 ? 0xff : 0);
      for (const e of this.extends()) m.set(e.pcr, digest(alg, m.get(e.pcr) ?? reset(e.pcr), e.digests.get(alg)!));
      out.set(alg, m);
    }
    return out;
  }
}
