/**
 * The one exit-code table of every fleetd binary: the `fleetd` CLI, `fleetd-tink-action` (every subcommand),
 * netbox-script and talos-config-server (through the service kit's `runService`).
 *
 * It lives in `cmd/` (not `service/`) because the HookOS action imports `cmd/` and must stay small: `cmd/` needs
 * only `@fleetd/verify/codec` and `outage/` (no logger, no metrics registry, no native module), and the service kit
 * imports the table from here.
 */
import { outageOf } from "../outage/index.js";
import { CliUsageError } from "./common.js";

/**
 *   0 ok: done, every check held (or a service stopped cleanly);
 *   1 refused: a check failed or the request was refused (the output names the check or the reason);
 *   2 usage: what the operator gave is wrong — options, arguments, the configuration, an input file or a local
 *     input the binary reads (the message names the field or file), including a service that cannot start with it;
 *   3 pending: the other side has not decided yet (the action's machine is waiting for an operator); retry later;
 *   4 internal: an unexpected failure, a bug (the message has the stack);
 *   5 unavailable: a dependency did not answer or failed — a server, the network, TLS, the TPM — retry later.
 */
export const EXIT = { ok: 0, refused: 1, usage: 2, pending: 3, internal: 4, unavailable: 5 } as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** The table as every binary's `--help` prints it. */
export const EXIT_CODES_HELP = `exit codes:
  ${EXIT.ok}  ok: done, every check held
  ${EXIT.refused}  refused: a check failed or the request was refused (the output says which)
  ${EXIT.usage}  usage: wrong options, arguments, configuration or input file (the message names it)
  ${EXIT.pending}  pending: not decided yet (e.g. an EK waiting for an operator); retry later
  ${EXIT.internal}  internal: unexpected failure, a bug (the message has the stack)
  ${EXIT.unavailable}  unavailable: a dependency (server, network, TLS, TPM) did not answer; retry later`;

/** Any error class (only `instanceof` is used). */
export type ErrorClass = abstract new (...args: never[]) => Error;

/** How a binary reads the errors its commands throw, beyond `CliUsageError` and outages. */
export interface ErrorExits {
  /** Its configuration and input-file errors: 2. */
  usage?: readonly ErrorClass[];
  /** Its transport errors that no `outageOf` knows (the TPM device, a server it talks to): 5. */
  unavailable?: readonly ErrorClass[];
}

/**
 * The exit code of a command that threw `e`: `CliUsageError` is 2; a dependency outage (`outageOf`: NetBox,
 * the signer, Kubernetes or SPIRE did not answer) or one of the binary's `unavailable` classes 5; one of its
 * `usage` classes 2; anything else is unexpected: 4.
 */
export function exitCodeOf(e: unknown, classes: ErrorExits = {}): ExitCode {
  if (e instanceof CliUsageError) return EXIT.usage;
  if (outageOf(e) || (classes.unavailable ?? []).some((c) => e instanceof c)) return EXIT.unavailable;
  if ((classes.usage ?? []).some((c) => e instanceof c)) return EXIT.usage;
  return EXIT.internal;
}
