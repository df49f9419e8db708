/**
 * The NetBox fields admission hands to the platform — `bmc` (where Rufio logs in, and with which credentials
 * reference) and `install_disk` (what the provision's `wipe-disk` erases) — count only when NetBox's change log
 * attributes the value being used to the inventory apply account, as EK bindings do (changelog.ts). "Not
 * UI-editable" stops nobody with API write access to devices; the change log names who wrote the value.
 */
import type { PlatformFieldCheck, PlatformFieldRefusal, PlatformFields } from "../fleet/ports.js";
import { checkAttribution, type AttributedField } from "./changelog.js";
import type { NetBox } from "./client.js";
import { deviceIdByName } from "./device.js";

export function netboxPlatformFieldCheck(nb: NetBox, applyAccount: string): PlatformFieldCheck {
  return {
    async check(node: string, f: PlatformFields): Promise<PlatformFieldRefusal[]> {
      const fields: AttributedField[] = [];
      // The value as inventory apply writes it (netboxView.ts): {type, address, credentials}.
      if (f.bmc) fields.push({ path: "custom_fields.bmc", current: { type: f.bmc.type, address: f.bmc.address, credentials: f.bmc.credentials }, account: applyAccount, code: "bmc-unattributed", label: "BMC (address and credentials reference)" });
      if (f.installDisk !== undefined) fields.push({ path: "custom_fields.install_disk", current: f.installDisk, account: applyAccount, code: "install-disk-unattributed", label: "install disk" });
      if (fields.length === 0) return [];
      const id = await deviceIdByName(nb, node);
      if (id === undefined) return fields.map((x) => ({ code: x.code as PlatformFieldRefusal["code"], reason: `no NetBox device named ${node}: the ${x.label} cannot be attributed` }));
      const r = await checkAttribution(nb, id, fields);
      const out: PlatformFieldRefusal[] = [];
      for (const x of fields) {
        const a = r.get(x.path);
        if (!a?.ok) out.push({ code: x.code as PlatformFieldRefusal["code"], reason: a && !a.ok ? a.reason : `the ${x.label} was not checked` });
      }
      return out;
    },
  };
}
