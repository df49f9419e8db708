/**
 * The child run-tests.ts starts: node's test runner over exactly the files given, in the order given.
 *   node tests/dist/runFiles.js <timeout ms> <concurrency> <file>...
 * `node --test <files>` sorts its files by path, which would undo run-tests' slowest-first order; the runner's
 * `run({ files })` keeps it. Two files run at a time, each in its own process (as `node --test` does); the exit
 * code is 1 when any test or file failed.
 */
import { run } from "node:test";
import { spec } from "node:test/reporters";

const [timeoutArg, concurrencyArg, ...files] = process.argv.slice(2);
const timeout = Number(timeoutArg);
const concurrency = Number(concurrencyArg);
if (!Number.isFinite(timeout) || timeout <= 0 || !Number.isInteger(concurrency) || concurrency < 1 || files.length === 0) {
  console.error("usage: runFiles.js <timeout ms> <concurrency> <file>...");
  process.exit(2);
}
const stream = run({ files, concurrency, timeout });
stream.on("test:fail", () => {
  process.exitCode = 1;
});
stream.compose(spec).pipe(process.stdout);
