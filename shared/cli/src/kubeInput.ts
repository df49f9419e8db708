/** The Kubernetes client of a CLI command, from a kubeconfig path (its own file: only the commands that talk to a
 * cluster load the client library). */
import { CliUsageError } from "@fleetd/platform/cmd";
import { type Kube, loadKube } from "@fleetd/platform/kube";

/** A Kubernetes client from a kubeconfig path (or `in-cluster`); a file that cannot be read or parsed is a usage
 * error (exit 2) naming where the path came from, not an unexpected failure. */
export function kubeOption(path: string, what: string): Kube {
  try {
    return loadKube(path);
  } catch (e) {
    throw new CliUsageError(`${what} ${path}: ${e instanceof Error ? e.message : String(e)}`);
  }
}
