/** MeasuredBoot over fleetd's policy engine: profiles from the policy folder, site authorities from a directory. */
import type { PcrValues, Verdict } from "@fleetd/verify/attest";
import { ParseError } from "@fleetd/verify/codec";
import { parseEventLog } from "@fleetd/verify/eventlog";
import { AuthorityCache } from "../../../trust/authorities.js";
import { evaluateProfile, profileAuthorityRefs } from "@fleetd/verify/policy";
import { defaultPolicyDir, ProfileCache } from "../../../trust/profiles.js";
import type { MeasuredBoot } from "../../../fleet/ports.js";

export class PolicyMeasuredBoot implements MeasuredBoot {
  /** Profiles and authority sets are read once and again when their files change (not per evaluation). */
  private readonly profiles: ProfileCache;
  private readonly authorities: AuthorityCache;
  /** `profiles`: the policy folder, or a ProfileCache the caller shares (one read of each profile per change). */
  constructor(siteAuthoritiesDir: string | undefined, profiles: ProfileCache | string = defaultPolicyDir()) {
    this.profiles = typeof profiles === "string" ? new ProfileCache(profiles) : profiles;
    this.authorities = new AuthorityCache(siteAuthoritiesDir);
  }

  async evaluate(profileName: string, eventLog: Uint8Array, quoted: PcrValues, tpm: "2.0" | "1.2" = "2.0"): Promise<Verdict> {
    let log;
    try {
      log = parseEventLog(eventLog);
    } catch (e) {
      if (e instanceof ParseError) return { verdict: "fail", reasons: [{ check: "eventlog.parse", detail: e.message }] };
      throw e;
    }
    const profile = this.profiles.load(profileName);
    const authorities = this.authorities.resolve(profileAuthorityRefs(profile));
    const ev = evaluateProfile(profile, { log, pcrs: quoted, tpm }, authorities);
    return { verdict: ev.verdict, reasons: ev.reasons };
  }
}
