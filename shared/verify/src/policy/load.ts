/**
 * Parse a class profile (files are read by the platform's trust/profiles.ts).
 * YAML and JSON are both read with the `yaml` package (JSON is YAML); duplicate keys are errors.
 */
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import { type Profile, ProfileSchema } from "./schema.js";

export class ProfileError extends Error {
  override readonly name = "ProfileError";
  constructor(
    readonly code: "not-found" | "syntax" | "invalid",
    message: string,
  ) {
    super(message);
  }
}

function formatIssues(issues: z.core.$ZodIssue[]): string {
  return issues.map((i) => `${i.path.length ? i.path.join(".") : "<root>"}: ${i.message}`).join("; ");
}

export function parseProfile(text: string, what: string): Profile {
  let raw: unknown;
  try {
    raw = parseYaml(text, { uniqueKeys: true, strict: true });
  } catch (e) {
    throw new ProfileError("syntax", `${what}: ${(e as Error).message.split("\n")[0]}`);
  }
  const r = ProfileSchema.safeParse(raw);
  if (!r.success) throw new ProfileError("invalid", `${what}: ${formatIssues(r.error.issues)}`);
  return r.data;
}
