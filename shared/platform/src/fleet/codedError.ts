/**
 * The shape of fleetd's refusals: a stable kebab-case `code` for programs, journals and metrics (a string-literal
 * union, so a code that is not declared does not compile) and a sentence naming the object for people. Each
 * adapter declares its codes as a list and subclasses this with its own `name`.
 */
export class CodedError<C extends string> extends Error {
  constructor(
    readonly code: C,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}
