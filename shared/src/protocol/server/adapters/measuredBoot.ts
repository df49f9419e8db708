/** MeasuredBoot over fleetd's policy engine: profiles from the policy folder, site authorities from a directory. */
import type { PcrValues } from "../../../attest/pcrs.js";
import type { Verdict } from "../../../attest/verdict.js";
import { ParseError } from "../../../codec/codec.js";
import { parseEventLog } from "../../../eventlog/parse.js";
import { resolveAuthorities } from "../../../policy/authorities.js";
import { evaluateProfile } from "../../../policy/evaluate.js";
import { defaultPolicyDir, loadProfile } from "../../../policy/load.js";
import { profileAuthorityRefs } from "../../../policy/schema.js";
import type { MeasuredBoot } from "../deps.js";

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
