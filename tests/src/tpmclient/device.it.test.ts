/**
 * DeviceTransport speaks to a TPM character device: write the command, read the response. There is no
 * /dev/tpmrm0 here, so the device is a pseudo-terminal in raw mode that socat joins to swtpm's command socket —
 * the same open/write/read path on a character device, with the response arriving in whatever pieces the pty
 * delivers (a real TPM driver hands it over in one read). On a machine with a TPM, point it at /dev/tpmrm0.
 */
import { strict as assert } from "node:assert";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { verifyQuote } from "@fleetd/verify/attest";
import { makeCredential } from "@fleetd/verify/credential";
import { TPM_ALG } from "@fleetd/verify/tcg";
import {
  activateCredential,
  createAk,
  createEk,
  createSrk,
  DeviceTransport,
  load,
  pcrRead,
  quote,
  TpmClient,
  TpmTransportError,
  withTransients,
} from "@fleetd/platform/tpmclient";
import { startRawSwtpm, type RawSwtpm } from "../harness/swtpm-raw.js";

let swtpm: RawSwtpm;
const children: ChildProcess[] = [];
let silent: Server | undefined;
before(async () => {
  swtpm = await startRawSwtpm();
});
after(async () => {
  for (const c of children) c.kill();
  silent?.close();
  await swtpm?.stop();
});

/** A pty at `link` whose other side is joined to TCP host:port. */
async function ptyTo(link: string, host: string, port: number): Promise<void> {
  const so = spawn("socat", [`PTY,link=${link},rawer`, `TCP:${host}:${port}`], { stdio: "ignore" });
  children.push(so);
  for (let i = 0; i < 400 && !existsSync(link); i++) await new Promise((r) => setTimeout(r, 25));
  assert.ok(existsSync(link), "socat created the pty");
}

test("EK, SRK, AK, activation and a verified quote through a character device", async () => {
  const link = join(swtpm.dir, "tpm0");
  await ptyTo(link, swtpm.host, swtpm.port);
  const tpm = new TpmClient(new DeviceTransport(link));
  try {
    await withTransients(tpm, async (t) => {
      const ek = t.keep(await createEk(tpm, "rsa"));
      const srk = t.keep(await createSrk(tpm, "rsa"));
      const ak = t.keep(await load(tpm, srk, await createAk(tpm, srk, "rsa")));
      const secret = new Uint8Array(randomBytes(32));
      const cred = makeCredential(ek.public, ak.name, secret);
      assert.deepEqual(await activateCredential(tpm, ak, ek, cred.idObject, cred.encryptedSecret), secret);
      const sel = [{ hash: TPM_ALG.SHA256, pcrs: [0, 1, 7] }];
      const nonce = new Uint8Array(randomBytes(32));
      const q = await quote(tpm, ak, sel, nonce);
      const v = verifyQuote({ akPublic: ak.public, quote: q.attestBytes, signature: q.signatureBytes, pcrs: (await pcrRead(tpm, sel)).values, expectedExtraData: nonce });
      assert.equal(v.verdict, "pass", JSON.stringify(v.reasons));
    });
    assert.deepEqual(await tpm.getHandles(0x80), []);
  } finally {
    await tpm.close();
  }
});

test("a path that is not a TPM device, or none at all, is refused before any command", async () => {
  const file = join(swtpm.dir, "not-a-device");
  writeFileSync(file, "");
  for (const path of [file, join(swtpm.dir, "missing")]) {
    const tpm = new TpmClient(new DeviceTransport(path));
    await assert.rejects(tpm.getProperties(0x100), (e: unknown) => e instanceof TpmTransportError && e.code === "connect-failed");
    await tpm.close();
  }
});

test("a device that never answers: the command fails with a timeout error, the transport stays usable for close", async () => {
  silent = createServer(() => undefined);
  await new Promise<void>((r) => silent?.listen(0, "127.0.0.1", () => r()));
  const addr = silent.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  const link = join(swtpm.dir, "tpm-silent");
  await ptyTo(link, "127.0.0.1", port);
  const tpm = new TpmClient(new DeviceTransport(link, { timeoutMs: 300 }));
  await assert.rejects(tpm.getProperties(0x100), (e: unknown) => e instanceof TpmTransportError && e.code === "timeout");
  await tpm.close();
});
