/**
 * Starts the harness NetBox and keeps it running until interrupted (for the lab and for poking at it):
 *   pnpm -s build && node tests/dist/tools/netbox-serve.js
 * Prints the URL and the admin token's Authorization header as JSON on stdout.
 */
import { startNetBox } from "../harness/netbox.js";

const nb = await startNetBox();
process.stdout.write(JSON.stringify({ url: nb.url, authorization: nb.authorization, admin: nb.adminUser, password: nb.adminPassword, runDir: nb.runDir }) + "\n");
const stop = (): void => {
  void nb.stop().then(() => process.exit(0));
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
setInterval(() => undefined, 1 << 30);
