import type { z } from "zod";

export type ConfigInputErrorCode = "site-config-invalid" | "site-secrets-invalid" | "node-input-invalid";

/**
 * Refused input, with every problem and where it is (e.g. `address: the network or broadcast address`). A
 * refusal names fields, never the values of secrets: `subject` says which input it is (e.g. the secrets bundle
 * file), and the messages come from schemas whose messages quote no input.
 */
export class ConfigInputError extends Error {
  override readonly name = "ConfigInputError";
  constructor(
    readonly code: ConfigInputErrorCode,
    readonly issues: { path: string; message: string }[],
    readonly subject?: string,
  ) {
    super(`${code}: ${subject ? `${subject}: ` : ""}${issues.map((i) => `${i.path ? `${i.path}: ` : subject ? "" : "<root>: "}${i.message}`).join("; ")}`);
  }

  static from(code: ConfigInputErrorCode, error: z.ZodError, subject?: string): ConfigInputError {
    return new ConfigInputError(
      code,
      error.issues.map((i) => ({
        path: i.path.map(String).join("."),
        message: i.code === "invalid_type" && /received undefined$/.test(i.message) ? "required" : i.message,
      })),
      subject,
    );
  }
}
