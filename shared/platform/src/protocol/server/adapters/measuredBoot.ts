/** MeasuredBoot over fleetd's policy engine: profiles from the policy folder, site authorities from a directory. */
import type { PcrValues, Verdict } from "@fleetd/verify/attest";
import { ParseError } from "@fleetd/verify/codec";
import { parseEventLog } from "@fleetd/verify/eventlog";
import { resolveAuthorities } from "../../../trust/authorities.js";
import { evaluateProfile, profileAuthorityRefs } from "@fleetd/verify/policy";
import { defaultPolicyDir, loadProfile } from "../../../trust/profiles.js";
import type { MeasuredBoot } from "../../../fleet/ports.js";

export class PolicyMeasuredBoot implements MeasuredBoot {
  constructor(
    private readonly siteAuthoritiesDir: string | undefined,
    private readonly policyDir: string = defaultPolicyDir(),
  ) {}

  async evaluate(profileName: string, eventLog: Uint8Array, quoted: PcrValues, tpm: "2.0" | "1.2" = "2.0"): Promise<Verdict> {
    let log;
    try {
      log = parseEventLog(eventLog);
    } catch (e) {
      if (e instanceof ParseError) return { verdict: "fail", reasons: [{ check: "eventlog.parse", detail: e.message }] };
      throw e;
    }
    const profile = loadProfile(profileName, this.policyDir);
    const authorities = resolveAuthorities(profileAuthorityRefs(profile), this.siteAuthoritiesDir);
    const ev = evaluateProfile(profile, { log, pcrs: quoted, tpm }, authorities);
    return { verdict: ev.verdict, reasons: ev.reasons };
  }
}
