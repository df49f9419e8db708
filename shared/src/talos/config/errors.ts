import type { z } from "zod";

export type ConfigInputErrorCode = "site-config-invalid" | "node-input-invalid";

/** Refused input, with every problem and where it is (e.g. `address: the network or broadcast address`). */
export class ConfigInputError extends Error {
  override readonly name = "ConfigInputError";
  constructor(
    readonly code: ConfigInputErrorCode,
    readonly issues: { path: string; message: string }[],
  ) {
    super(`${code}: ${issues.map((i) => `${i.path || "<root>"}: ${i.message}`).join("; ")}`);
  }

  static from(code: ConfigInputErrorCode, error: z.ZodError): ConfigInputError {
    return new ConfigInputError(
      code,
      error.issues.map((i) => ({ path: i.path.map(String).join("."), message: i.message })),
    );
  }
}
