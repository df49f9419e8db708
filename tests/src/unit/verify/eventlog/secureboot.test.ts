/** Secure Boot state from real logs: the expectations of go-attestation's tests (research/tpm.md §3.3). */
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { corpusLogs } from "@fleetd/testkit/eventlogCorpus";
import { EV, interpretLog, type InterpretOptions, parseEventLog, replayLog } from "@fleetd/verify/eventlog";

const logs = corpusLogs();
function measured(rel: string) {
  const log = parseEventLog(logs.find((l) => l.rel === rel)!.bytes);
  return interpretLog(log, new Set(replayLog(log).extended.keys()));
}

test("Windows GCE dump: Secure Boot enabled, Windows boot manager authority after the separator", () => {
  const sb = measured("go-attestation/windows_gcp_shielded_vm.bin").secureBoot!;
  assert.equal(sb.enabled, true);
  assert.deepEqual(sb.postSeparatorAuthorities.map((a) => a.cert?.commonName), ["Microsoft Root Certificate Authority 2010"]);
  assert.equal(sb.preSeparatorAuthorities.length, 0);
});

test("option ROM log: two authorities after the separator and one PCI option-ROM driver (PciMmio)", () => {
  const m = measured("go-attestation/option_rom_eventlog.bin");
  assert.equal(m.secureBoot!.enabled, true);
  assert.deepEqual(m.secureBoot!.postSeparatorAuthorities.map((a) => a.cert?.commonName), [
    "Microsoft Corporation UEFI CA 2011",
    "Microsoft Windows Production PCA 2011",
  ]);
  assert.equal(m.bootDrivers.filter((d) => d.pciOptionRom).length, 1);
  assert.equal(m.bootDrivers.find((d) => d.pciOptionRom)!.devicePath, "PciRoot(0x0)/Pci(0x2,0x0)/Pci(0x0,0x0)/Offset(0xf600,0x207ff)");
});

test("shim quirk (go-attestation issue 157): bare vendor certificate, stray trailing byte; 3 authorities", () => {
  const m = measured("go-attestation/sb_cert_eventlog.bin");
  const post = m.secureBoot!.postSeparatorAuthorities;
  assert.deepEqual(post.map((a) => [a.cert?.commonName, a.quirks]), [
    ["Microsoft Corporation UEFI CA 2011", []],
    ["Canonical Ltd. Master Certificate Authority", ["stray-byte", "bare-certificate"]],
    ["Canonical Ltd. Master Certificate Authority", ["stray-byte", "bare-certificate"]],
  ]);
  assert.ok(m.findings.every((f) => f.severity === "warning"), JSON.stringify(m.findings));
  // rhel8: shim's "Shim" variable with the bare Red Hat certificate (no stray byte).
  const rhel = measured("go-tpm-tools/rhel8-uefi.bin").secureBoot!;
  assert.deepEqual(rhel.postSeparatorAuthorities.map((a) => [a.variable, a.cert?.commonName, a.quirks]), [
    ["db", "Microsoft Corporation UEFI CA 2011", []],
    ["Shim", "Red Hat Secure Boot CA 5", ["bare-certificate"]],
  ]);
});

test("PK/KEK/db/dbx, SbatLevel, MokListTrusted and DMA flag as measured", () => {
  const rhel = measured("go-tpm-tools/rhel8-uefi.bin").secureBoot!;
  assert.equal(rhel.pk!.certs[0]!.commonName, "newpk");
  assert.equal(rhel.kek!.certs[0]!.commonName, "Microsoft Corporation KEK CA 2011");
  assert.equal(rhel.db!.certs.length, 2);
  assert.equal(rhel.dbx!.sha256.length, 183);
  assert.equal(rhel.dbx!.certs.length, 3);
  const kl = measured("keylime/binary_bios_measurements-secureboot.bin").secureBoot!;
  assert.equal(kl.sbatLevel!.value, "sbat,1,2023012900\nshim,2\ngrub,3\ngrub.debian,4\n");
  assert.deepEqual(kl.db!.certs.map((c) => c.commonName), ["Microsoft Windows Production PCA 2011", "Windows UEFI CA 2023", "Microsoft Corporation UEFI CA 2011", "Microsoft UEFI CA 2023"]);
  assert.equal(measured("tpm2-tools/event-moklisttrusted.bin").secureBoot!.mokListTrusted!.value, "01");
  const gdc = measured("go-tpm-tools/gdc-host.bin");
  assert.equal(gdc.secureBoot!.dmaProtectionDisabled, true);
  assert.ok(gdc.findings.some((f) => f.check === "dma-protection-disabled" && f.event === 18));
});

test("empty SecureBoot variable is 'not enabled' with a warning (arch, NUC, Dell, crypto_agile)", () => {
  for (const rel of ["go-tpm-tools/arch-linux-workstation.bin", "tpm2-tss/binary_measurements_nuc.bin", "tpm2-tss/binary_measurements_pc_client.bin", "go-attestation/crypto_agile_eventlog.bin"]) {
    const m = measured(rel);
    assert.equal(m.secureBoot!.enabled, false, rel);
    assert.equal(m.secureBoot!.secureBootValue, "", rel);
    assert.ok(m.findings.some((f) => f.check === "secureboot-variable" && f.severity === "warning"), rel);
  }
});

test("no real log trips an error finding except the known ones, and the firmware quirks a profile may tolerate", () => {
  const errors = (opts: InterpretOptions = {}) => {
    const out: string[] = [];
    for (const l of logs) {
      const log = parseEventLog(l.bytes);
      for (const f of interpretLog(log, new Set(replayLog(log).extended.keys()), opts).findings) {
        if (f.severity === "error") out.push(`${l.rel}: ${f.check} (PCR ${f.pcr}, ${f.detail.replace(/^event \d+ \(PCR \d+, (\w+)\).*$/, "$1")})`);
      }
    }
    return [...new Set(out)].sort();
  };
  // event-uefivar.bin is a one-event fixture (SecureBoot only): PCR 7 has no separator.
  const known = ["tpm2-tools/event-uefivar.bin: separator-missing (PCR 7, PCR 7 has no separator)"];
  // Strictly: firmware volumes logged as EV_POST_CODE in PCR 0 (10 logs), and Intel Boot Guard's S-CRTM component
  // with a separator's digest; nothing else.
  const strict = errors();
  assert.deepEqual(
    strict.filter((e) => !known.includes(e) && !/: event-type \(PCR 0, EV_POST_CODE\)$/.test(e)),
    ["go-tpm-tools/glinux-alex.bin: separator-disguised (PCR 0, EV_S_CRTM_CONTENTS)"],
  );
  assert.equal(strict.filter((e) => e.includes("EV_POST_CODE")).length, 10);
  assert.ok(strict.includes("tpm2-tools/event-postcode.bin: event-type (PCR 0, EV_POST_CODE)"));
  const tolerant: InterpretOptions = { extraEventTypes: [{ pcr: 0, types: [EV.POST_CODE], tolerance: "t" }], scrtmSeparatorDigest: { tolerance: "t" } };
  assert.deepEqual(errors(tolerant), known);
});

test("Intel Boot Guard S-CRTM event whose digest is H(00000000): refused unless tolerated, and then only that shape (PCR 0, EV_S_CRTM_CONTENTS)", () => {
  const log = parseEventLog(logs.find((l) => l.rel === "go-tpm-tools/glinux-alex.bin")!.bytes);
  const pcrs = new Set(replayLog(log).extended.keys());
  const strict = interpretLog(log, pcrs).findings.filter((f) => f.check.startsWith("separator"));
  assert.deepEqual(strict.map((f) => [f.check, f.severity, f.event]), [["separator-disguised", "error", 4]]);
  const tolerated = interpretLog(log, pcrs, { scrtmSeparatorDigest: { tolerance: "boot-guard" } }).findings.filter((f) => f.check.startsWith("separator"));
  assert.deepEqual(tolerated.map((f) => [f.check, f.severity, f.event]), [["separator-lookalike", "warning", 4]]);
  assert.match(tolerated[0]!.detail, /accepted by tolerance boot-guard/);
});
