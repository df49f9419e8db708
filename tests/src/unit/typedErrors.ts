/**
 * For property tests of parsers: bad input may be refused, but only with the parser's own error class — never a
 * raw RangeError or TypeError from reading past an end.
 */

/** Runs `fn`; an error other than a `type` fails (named, with the raw error as its cause). */
export function onlyErrorsOf(type: abstract new (...args: never[]) => Error, fn: () => unknown): void {
  try {
    fn();
  } catch (e) {
    if (!(e instanceof type)) throw new Error(`raw ${(e as Error).name}: ${(e as Error).message}`, { cause: e });
  }
}
