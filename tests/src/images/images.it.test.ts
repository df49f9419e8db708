/**
 * The images `pnpm -s images` built (.ci/setup builds them; this file never builds), each run with podman:
 *  - tink-action: `--help` and fleetd's exit codes (0, 2 for usage and configuration, 5 for a TPM that does not
 *    answer), root, lldpd and mount in the image;
 *  - talos-config-server, netbox-script, spire-plugin: as user 65532 on the host network (loopback), started with a
 *    minimal valid configuration, answer /healthz and /readyz; a bad configuration is refused (exit 2) naming the
 *    field. talos-config-server gets SoftHSM2's module and token bind-mounted (a YubiKey's module at a site);
 *    both talk to the real NetBox 4.7 (set up by `fleetd netbox setup`, with the services' own accounts);
 *  - the lab's stand-ins for the Templates' non-fleetd actions (lab-images.json, tests/images/README.md): the wipe
 *    image has the shell and tools wipe-disk runs; the image2disk equivalent streams a .gz image onto a loop device
 *    (IMG_URL, DEST_DISK, COMPRESSED) and refuses a DEST_DISK that is not a block device;
 *  - every image's size is printed; one image is pushed to a local registry (Debian's docker-registry on loopback),
 *    its digest is the one images.json recorded, and it is pulled back by that digest.
 */
import { strict as assert } from "node:assert";
import { chmodSync, chownSync, mkdirSync, truncateSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { stringify } from "yaml";
import { addCa, emptyBundleState, serializeBundleState } from "@fleetd/platform/pki";
import { siteConfigFixture } from "@fleetd/testkit/talosConfig";
import { exampleNodesText, fleetd, GROUP, startFleet, type Fleet } from "../netbox/fixture.js";
import { createSoftHsmCa, SOFTHSM_MODULE, startSoftHsm, type SoftHsm } from "../harness/softhsm.js";
import { podman, pushImage, runContainer, startContainer, startRegistry, type BackgroundContainer } from "../harness/podman.js";
import { freePort, waitFor } from "../harness/ports.js";
import { startLldpSwitchPort } from "../harness/lldp.js";
import { startSwtpm } from "../harness/swtpm.js";
import { runProcess } from "../harness/process.js";
import { TALOS_VERSION } from "../talos/goTools.js";
import { builtImage, builtLabImage, readBuiltImages, readBuiltLabImages, PART_NAMES, type BuiltImage, type PartName } from "./built.js";
import { gzipSync } from "node:zlib";
import { randomBytes } from "node:crypto";
import { serveFile } from "../harness/loopDisk.js";

const built = readBuiltImages();
const img = (p: PartName): BuiltImage => builtImage(built, p);
const dir = mkdtempSync(join(tmpdir(), "fleetd-images-it-"));
const SERVICE_USER = 65532;
const p = podman();
const running: BackgroundContainer[] = [];
let fleet: Fleet;
let netboxUrl = "";
let hsm: SoftHsm | undefined;

/** A directory the service user owns, only it (state directories must be 0700), under this file's temp dir. */
function serviceDir(...parts: string[]): string {
  const d = join(dir, ...parts);
  mkdirSync(d, { recursive: true });
  chownSync(d, SERVICE_USER, SERVICE_USER);
  chmodSync(d, 0o700);
  return d;
}

function chownTree(path: string): void {
  chownSync(path, SERVICE_USER, SERVICE_USER);
  if (statSync(path).isDirectory()) for (const e of readdirSync(path)) chownTree(join(path, e));
}

async function get(url: string): Promise<{ status: number; body: unknown }> {
  const r = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  const text = await r.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: r.status, body };
}

/** Starts `part` with `config` (mounted read-only at the same path), waits for /healthz, returns /readyz. */
async function serve(part: PartName, port: number, args: string[], o: { env?: Record<string, string>; volumes?: string[] } = {}) {
  const c = startContainer(p, `fleetd-it-${part}-${process.pid}`, join(dir, `${part}.log`), img(part).ref, args, { network: "host", volumes: [`${dir}:${dir}`, ...(o.volumes ?? [])], ...(o.env ? { env: o.env } : {}) });
  running.push(c);
  await waitFor(`${part} /healthz in its container`, 90_000, async () => (await get(`http://127.0.0.1:${port}/healthz`)).status === 200, () => c.proc.deadReason());
  return { container: c, healthz: await get(`http://127.0.0.1:${port}/healthz`), readyz: await get(`http://127.0.0.1:${port}/readyz`) };
}

/** Runs `part` with a configuration file to completion: its exit code and what it said. */
async function refuse(part: PartName, args: string[], o: { env?: Record<string, string>; volumes?: string[] } = {}) {
  const r = await runContainer(p, img(part).ref, args, { network: "host", volumes: [`${dir}:${dir}`, ...(o.volumes ?? [])], ...(o.env ? { env: o.env } : {}), timeoutMs: 60_000 });
  return { code: r.code, out: r.stdout.toString() + r.stderr.toString() };
}

before(async () => {
  chownSync(dir, SERVICE_USER, SERVICE_USER);
  fleet = await startFleet();
  const setup = fleetd(["netbox", "setup", "--config", fleet.configFile(fleet.nb.authorization.replace(/^Bearer /, ""))]);
  assert.equal(setup.code, 0, setup.stderr);
  netboxUrl = fleet.nb.url;
});

after(async () => {
  for (const c of running) await c.stop().catch(() => undefined);
  await fleet?.nb.stop();
  hsm?.close();
  rmSync(dir, { recursive: true, force: true });
});

test("images.json names four images that exist in storage; their sizes", async () => {
  for (const part of PART_NAMES) {
    const i = img(part);
    assert.equal((await p.run(["image", "exists", i.ref])).code, 0, `${i.ref} is not in podman's storage: run \`pnpm -s images\``);
    const [id, labels] = (await p.must(["image", "inspect", "--format", "{{.Id}}\t{{json .Labels}}", i.ref])).trim().split("\t");
    assert.equal(`sha256:${id}`, i.id);
    const l = JSON.parse(labels ?? "{}") as Record<string, string>;
    assert.equal(l["org.opencontainers.image.version"], i.version);
    assert.equal(l["org.opencontainers.image.revision"], i.revision);
    assert.equal(l["org.opencontainers.image.source"], i.source);
    console.log(`image size: ${part} ${(i.sizeBytes / 1e6).toFixed(1)} MB (${i.ref}, ${i.digest}, user ${i.user})`);
  }
  assert.equal(img("tink-action").user, "0:0", "the action runs as root (TPM, raw disks, securityfs, raw sockets)");
  for (const part of ["talos-config-server", "netbox-script", "spire-plugin"] as const) assert.equal(img(part).user, `${SERVICE_USER}:${SERVICE_USER}`);
});

test("no build tools, package caches or apt lists in the images", async () => {
  for (const part of PART_NAMES) {
    const r = await runContainer(p, img(part).ref, ["-c", "ls -A /var/cache/apt /var/lib/apt/lists/partial; for t in gcc cc make g++ python3 pnpm npm; do command -v $t; done; exit 0"], { network: "none", entrypoint: "/bin/sh" });
    assert.equal(r.code, 0, r.stderr.toString());
    assert.equal(r.stdout.toString().trim().split("\n").filter((l) => l && !l.endsWith(":")).join(","), "", `${part}: ${r.stdout.toString()}`);
  }
});

test("tink-action: --help, fleetd's exit codes, lldpd and mount in the image", async () => {
  const ref = img("tink-action").ref;
  const help = await runContainer(p, ref, ["--help"], { network: "none" });
  assert.equal(help.code, 0, help.stderr.toString());
  const text = help.stdout.toString() + help.stderr.toString();
  for (const l of ["attest", "write-meta", "clear-tpm", "0  ok", "2  usage", "5  unavailable"]) assert.ok(text.includes(l), `--help lacks "${l}":\n${text}`);
  const bare = await runContainer(p, ref, [], { network: "none" });
  assert.equal(bare.code, 0, "CMD is --help");

  const unknown = await runContainer(p, ref, ["no-such-command"], { network: "none" });
  assert.equal(unknown.code, 2, "an unknown command is usage (2)");
  assert.match(unknown.stderr.toString(), /unknown command "no-such-command"/);

  const attest = await runContainer(p, ref, ["attest", "--mode", "intake"], { network: "none" });
  assert.equal(attest.code, 2, `attest without its environment is a configuration error (2): ${attest.stderr.toString()}`);
  assert.match(attest.stderr.toString(), /FLEETD_SERVER/);

  const badClear = await runContainer(p, ref, ["clear-tpm"], { network: "none", env: { FLEETD_CLEAR_TPM: "maybe" } });
  assert.equal(badClear.code, 2);
  assert.match(badClear.stderr.toString(), /FLEETD_CLEAR_TPM/);

  const notAllowed = await runContainer(p, ref, ["clear-tpm"], { network: "none", env: { FLEETD_CLEAR_TPM: "no" } });
  assert.equal(notAllowed.code, 0);
  assert.equal((JSON.parse(notAllowed.stdout.toString()) as { cleared: boolean }).cleared, false);

  const noTpm = await runContainer(p, ref, ["clear-tpm"], { network: "none", env: { FLEETD_CLEAR_TPM: "yes", FLEETD_TPM: "unix:/run/no-such-tpm.sock" } });
  assert.equal(noTpm.code, 5, `a TPM that does not answer is unavailable (5): ${noTpm.stderr.toString()}`);

  const tools = await runContainer(p, ref, ["-c", "lldpd -v && lldpcli -v && mount --version && id -u"], { network: "none", entrypoint: "/bin/sh" });
  assert.equal(tools.code, 0, tools.stderr.toString());
  assert.match(tools.stdout.toString(), /\n0\n?$/);
});

/** The capabilities tink-action/README.md ("Image") names for the LLDP claim; everything else is dropped. */
const LLDP_CAPS = ["NET_RAW", "SETUID", "SETGID", "SYS_CHROOT", "DAC_OVERRIDE"];

test("tink-action: the LLDP claim from a switch port (veth pair, lldpd as the switch) with only the README's capabilities", async () => {
  const sw = await startLldpSwitchPort({ device: "tor-a1", port: "ethernet1/1/2" });
  try {
    const args = ["lldp", "--interface", sw.iface, "--wait", "20"];
    const capped = await runContainer(p, img("tink-action").ref, args, { network: "host", capDrop: ["ALL"], capAdd: LLDP_CAPS, timeoutMs: 60_000 });
    assert.equal(capped.code, 0, capped.stdout.toString() + capped.stderr.toString());
    assert.deepEqual((JSON.parse(capped.stdout.toString()) as { lldp: unknown }).lldp, { chassisId: "tor-a1", portId: "ethernet1/1/2" });
    // one fewer (DAC_OVERRIDE: lldpcli, setuid _lldpd, reaching the private socket) and no neighbour is heard
    const fewer = await runContainer(p, img("tink-action").ref, ["lldp", "--interface", sw.iface, "--wait", "5"], { network: "host", capDrop: ["ALL"], capAdd: LLDP_CAPS.filter((c) => c !== "DAC_OVERRIDE"), timeoutMs: 60_000 });
    assert.equal(fewer.code, 1, fewer.stdout.toString());
  } finally {
    await sw.stop();
  }
});

test("tink-action: clear-tpm through swtpm's Unix socket bind-mounted into the container (the lab's TPM transport), no capability, no network", async () => {
  const tpm = await startSwtpm({ unixSocket: true, ekCerts: false });
  try {
    const r = await runContainer(p, img("tink-action").ref, ["clear-tpm"], {
      network: "none",
      capDrop: ["ALL"],
      volumes: [`${dirname(tpm.socketPath)}:/run/fleetd-tpm`],
      env: { FLEETD_CLEAR_TPM: "yes", FLEETD_TPM: `unix:/run/fleetd-tpm/${basename(tpm.socketPath)}` },
    });
    assert.equal(r.code, 0, r.stderr.toString());
    assert.equal((JSON.parse(r.stdout.toString()) as { cleared: boolean }).cleared, true);
  } finally {
    await tpm.stop();
  }
});

test("tink-action: write-meta on a real block device (a loop device over a GPT image) with no capability: --device and /sys/dev/block unmasked", async () => {
  const image = join(dir, "disk.img");
  writeFileSync(image, Buffer.alloc(0));
  truncateSync(image, 64 * 1024 * 1024);
  const gpt = await runProcess("sgdisk", ["-n", "1:2048:+1M", "-c", "1:META", "-n", "2:0:0", "-c", "2:STATE", image]);
  assert.equal(gpt.code, 0, gpt.stderr.toString());
  const lo = await runProcess("losetup", ["--find", "--show", image]);
  assert.equal(lo.code, 0, lo.stderr.toString());
  const dev = lo.stdout.toString().trim();
  try {
    const args = ["write-meta", "--disk", dev, "--code", "ab".repeat(32), "--init"];
    // podman masks /sys/dev/block: the logical sector size and the size cannot be read, and the disk is refused
    const masked = await runContainer(p, img("tink-action").ref, args, { network: "none", capDrop: ["ALL"], devices: [dev] });
    assert.equal(masked.code, 1, masked.stdout.toString());
    assert.match(masked.stdout.toString(), /disk-io.*\/sys\/dev\/block/);
    const r = await runContainer(p, img("tink-action").ref, args, { network: "none", capDrop: ["ALL"], devices: [dev], securityOpts: ["unmask=/sys/dev/block"] });
    assert.equal(r.code, 0, r.stdout.toString() + r.stderr.toString());
    assert.deepEqual((JSON.parse(r.stdout.toString()) as { keys: { tag: number }[] }).keys.map((k) => k.tag), [0x0b]);
  } finally {
    await runProcess("losetup", ["-d", dev]);
  }
});

test("talos-config-server: /healthz and /readyz as user 65532 with the CA on a PKCS#11 token; a bad configuration is refused naming the field", async () => {
  hsm = await startSoftHsm([{ label: "fleetd-ca", pin: "123456", soPin: "12345678", keys: [{ label: "ca", id: "01", type: "ec-p256" }] }]);
  const { signer, ca } = await createSoftHsmCa(hsm, { token: "fleetd-ca", key: "ca", commonName: "fleetd images CA", notBefore: new Date(Date.now() - 3600_000), lifetimeDays: 365 });
  await signer.close();
  chownTree(hsm.dir); // the token files, for the service user
  const d = serviceDir("tcs");
  const bundle = join(d, "ca-bundle.json");
  writeFileSync(bundle, serializeBundleState(addCa(emptyBundleState(), ca.pem, new Date(Date.now() - 3600_000))));
  const site = join(d, "talos-site.yaml");
  writeFileSync(site, stringify(siteConfigFixture(TALOS_VERSION)));
  const port = await freePort();
  const config = (server: Record<string, unknown>) => ({
    netbox: { url: netboxUrl },
    accounts: { apply: fleet.apply.username, handler: fleet.handler.username },
    authorizedGroup: GROUP,
    server: {
      mode: "lab",
      listen: { host: "127.0.0.1", port },
      stateDb: join(d, "state", "state.db"),
      ekRootsDir: serviceDir("tcs", "ek-roots"),
      ca: { signer: { module: SOFTHSM_MODULE, token: { label: "fleetd-ca" }, key: { label: "ca" }, pin: { env: "FLEETD_CA_PIN" } }, bundleStateFile: bundle },
      talos: { siteFile: site },
      ...server,
    },
  });
  serviceDir("tcs", "state");
  for (const f of [bundle, site]) chownSync(f, SERVICE_USER, SERVICE_USER);
  const good = join(d, "config.yaml");
  writeFileSync(good, stringify(config({})));
  const bad = join(d, "bad.yaml");
  writeFileSync(bad, stringify(config({ ttl: { sessionSeconds: 5 } })));
  const run = {
    env: { FLEETD_NETBOX_TOKEN: fleet.handler.token, FLEETD_CA_PIN: "123456", SOFTHSM2_CONF: hsm.confPath },
    volumes: [`${SOFTHSM_MODULE}:${SOFTHSM_MODULE}:ro`, `${hsm.dir}:${hsm.dir}`],
  };

  // The YubiKey's module ships in the image (README "Image"): pkcs11js loads it; no pcscd here, so no slot.
  const yk = await runContainer(p, img("talos-config-server").ref, ["-e", 'const p = new (require("/opt/fleetd/node_modules/pkcs11js").PKCS11)(); p.load("/usr/lib/x86_64-linux-gnu/libykcs11.so"); p.C_Initialize(); console.log(JSON.stringify(p.C_GetInfo().manufacturerID.trim())); p.C_Finalize()'], { network: "none", entrypoint: "/usr/local/bin/node" });
  assert.equal(yk.code, 0, yk.stderr.toString());
  assert.match(yk.stdout.toString(), /Yubico/);

  const refused = await refuse("talos-config-server", ["--config", bad], run);
  assert.equal(refused.code, 2, refused.out);
  assert.match(refused.out, /server\.ttl\.sessionSeconds/);

  const s = await serve("talos-config-server", port, ["--config", good], run);
  assert.deepEqual(s.healthz.body, { ok: true });
  assert.equal(s.readyz.status, 200, JSON.stringify(s.readyz.body));
  const checks = (s.readyz.body as { checks: Record<string, { ok: boolean }> }).checks;
  assert.deepEqual(Object.keys(checks).sort(), ["netbox", "signer", "state"]);
  assert.match(s.container.logs(), /lab mode: serving plain HTTP/);
  await s.container.stop();
});

test("netbox-script: /healthz and /readyz as user 65532; a bad handler section is refused naming the field", async () => {
  const d = serviceDir("nbs");
  const nodes = join(d, "nodes.yaml");
  writeFileSync(nodes, exampleNodesText());
  chownSync(nodes, SERVICE_USER, SERVICE_USER);
  const port = await freePort();
  const config = (handler: Record<string, unknown>) => ({
    netbox: { url: netboxUrl },
    accounts: { apply: fleet.apply.username, handler: fleet.handler.username },
    authorizedGroup: GROUP,
    webhook: { secret: "s".repeat(40), url: `http://127.0.0.1:${port}/netbox/events` },
    handler: { listen: { host: "127.0.0.1", port }, stateDir: serviceDir("nbs", "state"), nodesFile: nodes, reconcileIntervalSeconds: 3600, ...handler },
  });
  const good = join(d, "config.yaml");
  writeFileSync(good, stringify(config({})));
  const bad = join(d, "bad.yaml");
  writeFileSync(bad, stringify(config({ maxAttempts: 0 })));
  const env = { FLEETD_NETBOX_TOKEN: fleet.handler.token };

  const refused = await refuse("netbox-script", ["--config", bad], { env });
  assert.equal(refused.code, 2, refused.out);
  assert.match(refused.out, /handler\.maxAttempts/);

  const s = await serve("netbox-script", port, ["--config", good], { env });
  assert.deepEqual(s.healthz.body, { ok: true });
  assert.equal(s.readyz.status, 200, JSON.stringify(s.readyz.body));
  await s.container.stop();
});

test("spire-plugin: /healthz as user 65532 and /readyz naming SPIRE as not ready (no spire-server here); a bad configuration is refused naming the field", async () => {
  const d = serviceDir("spire");
  const port = await freePort();
  const config = (over: Record<string, unknown>) => ({
    trustDomain: "fleet.example.org",
    devidCaPath: join(d, "devid-ca.pem"),
    socketPath: join(d, "no-spire-server.sock"),
    list: { file: join(d, "spire-nodes.json") },
    status: { file: join(d, "spire-sync-status.json") },
    listen: { host: "127.0.0.1", port },
    ...over,
  });
  const good = join(d, "config.yaml");
  writeFileSync(good, stringify(config({})));
  const bad = join(d, "bad.yaml");
  writeFileSync(bad, stringify(config({ intervalSeconds: 0 })));

  const refused = await refuse("spire-plugin", ["--config", bad]);
  assert.equal(refused.code, 2, refused.out);
  assert.match(refused.out, /intervalSeconds/);

  const s = await serve("spire-plugin", port, ["--config", good]);
  assert.deepEqual(s.healthz.body, { ok: true });
  assert.equal(s.readyz.status, 503, JSON.stringify(s.readyz.body));
  const r = s.readyz.body as { ready: boolean; checks: Record<string, { ok: boolean }> };
  assert.equal(r.ready, false);
  assert.ok(Object.values(r.checks).some((c) => !c.ok), JSON.stringify(r));
  await s.container.stop();
});

test("push to a local registry on loopback: the registry's digest is the one images.json recorded; pulled back by digest", async () => {
  const reg = await startRegistry(join(dir, "registry"));
  try {
    const i = img("spire-plugin");
    const repo = `${reg.host}/fleetd/spire-plugin`;
    const t0 = Date.now();
    const digest = await pushImage(podman({ insecureRegistries: [reg.host] }), i.ref, `${repo}:${i.tag}`);
    console.log(`pushed ${i.ref} to ${repo} in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${digest}`);
    assert.equal(digest, i.digest, "the build's digest is what a registry holds");
    // pulled into an empty image store, so every layer really comes from the registry
    const fresh = podman({ insecureRegistries: [reg.host], storageRoot: join(dir, "pull-store") });
    const byDigest = `${repo}@${digest}`;
    await fresh.must(["pull", "--quiet", byDigest], { timeoutMs: 300_000 });
    const id = (await fresh.must(["image", "inspect", "--format", "{{.Id}}", byDigest])).trim();
    assert.equal(`sha256:${id}`, i.id, "the same image (config digest) came back");
    const help = await runContainer(fresh, byDigest, ["--help"], { network: "none" });
    assert.equal(help.code, 0, help.stderr.toString());
    await fresh.run(["rmi", "--all", "--force"]);
  } finally {
    await reg.stop();
  }
});

test("lab images: wipe has /bin/sh, wipefs, blkdiscard, dd, shred, cmp; the image2disk equivalent writes a .gz image onto a loop device and refuses a non-block DEST_DISK", async () => {
  const lab = readBuiltLabImages();
  for (const i of lab.images) console.log(`${i.ref}  ${i.digest}  ${(i.sizeBytes / 1e6).toFixed(1)} MB  (lab)`);
  const wipe = await runContainer(p, builtLabImage(lab, "wipe").ref, ["/bin/sh", "-c", "for t in wipefs blkdiscard dd shred cmp; do command -v \"$t\" || exit 1; done"], { network: "none" });
  assert.equal(wipe.code, 0, wipe.stderr.toString());
  assert.equal(wipe.stdout.toString().trim().split("\n").length, 5, wipe.stdout.toString());

  const payload = randomBytes(3 << 20);
  const gz = join(dir, "payload.raw.gz");
  writeFileSync(gz, gzipSync(payload));
  const served = await serveFile(gz);
  const image = join(dir, "image2disk.img");
  writeFileSync(image, Buffer.alloc(0));
  truncateSync(image, 8 << 20);
  const lo = await runProcess("losetup", ["--find", "--show", image]);
  assert.equal(lo.code, 0, lo.stderr.toString());
  const dev = lo.stdout.toString().trim();
  const ref = builtLabImage(lab, "image2disk").ref;
  try {
    const r = await runContainer(p, ref, [], { env: { IMG_URL: served.url, DEST_DISK: dev, COMPRESSED: "true" }, devices: [dev], capDrop: ["ALL"] });
    assert.equal(r.code, 0, r.stdout.toString() + r.stderr.toString());
    assert.match(r.stdout.toString(), new RegExp(`wrote ${payload.length} bytes to ${dev}`));
    const back = await runProcess("dd", [`if=${dev}`, "bs=1M", `count=${payload.length >> 20}`, "status=none"], { timeoutMs: 60_000 });
    assert.ok(back.stdout.equals(payload), "the device holds the decompressed image");
    const notBlock = await runContainer(p, ref, [], { env: { IMG_URL: served.url, DEST_DISK: "/dev/null", COMPRESSED: "true" }, network: "none" });
    assert.equal(notBlock.code, 1);
    assert.match(notBlock.stderr.toString(), /DEST_DISK \/dev\/null is not a block device/);
    const xz = await runContainer(p, ref, [], { env: { IMG_URL: "http://127.0.0.1:1/x.raw.xz", DEST_DISK: dev, COMPRESSED: "true" }, devices: [dev], network: "none" });
    assert.equal(xz.code, 1);
    assert.match(xz.stderr.toString(), /cannot tell the compression/);
    assert.equal(served.gets(), 1);
  } finally {
    await runProcess("losetup", ["-d", dev]);
    await served.close();
  }
});
