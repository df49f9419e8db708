/**
 * A leader-election candidate in its own process (for tests that kill it with SIGKILL):
 * `node electorChild.js KUBECONFIG NAMESPACE LEASE IDENTITY` prints "started" and "stopped" lines.
 */
import { loadKube, LeaderElector } from "@fleetd/platform/kube";

const [kubeconfig, namespace, name, identity] = process.argv.slice(2);
if (!kubeconfig || !namespace || !name || !identity) {
  process.stderr.write("usage: electorChild KUBECONFIG NAMESPACE LEASE IDENTITY\n");
  process.exit(2);
}
const e = new LeaderElector({
  kube: loadKube(kubeconfig),
  namespace,
  name,
  identity,
  annotations: { "fleetd.io/internal-url": `http://${identity}.invalid` },
  leaseDurationSeconds: 3,
  renewDeadlineSeconds: 2,
  retryPeriodSeconds: 0.5,
  onStartedLeading: () => void process.stdout.write("started\n"),
  onStoppedLeading: () => void process.stdout.write("stopped\n"),
});
e.start();
process.on("SIGTERM", () => {
  void e.stop().then(() => process.exit(0));
});
setInterval(() => undefined, 1 << 30);
