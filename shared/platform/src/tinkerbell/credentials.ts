/**
 * BMC credentials for Rufio: fleetd never holds a BMC password. The nodes file's reference must name the node's
 * own Secret in the Tinkerbell namespace, which an operator (or an external-secrets operator) keeps with the keys
 * `username` and `password`; the Machine references it and fleetd never reads it.
 *
 * The naming rule: node `<n>`'s credentials are Secret `<tinkerbell namespace>/fleetd-bmc-<n>`, and only
 * `secret:<that namespace>/fleetd-bmc-<n>` is accepted for `<n>`. A reference to any other namespace or name is
 * refused (`credentials-not-own`): a node's BMC entry can never hand Rufio another node's (or another
 * namespace's) credentials, whoever wrote it. `<n>` is a DNS label, so the mapping is one to one.
 *
 * `env:` and `file:` references are refused (`credentials-unsupported`), the stricter of the two options the
 * review left open (confine them to a per-node name, or refuse them): with them fleetd's own process would read
 * the password and write it into a Secret, and its environment and file system also hold NetBox tokens, the
 * webhook secret and PKCS#11 PINs. `vault:` is refused too (no Vault client here; sync the secret with an
 * external-secrets operator and use `secret:`). Errors never contain a credential.
 */
import { TinkerbellError } from "./errors.js";
import type { SecretRef } from "./machine.js";
import { bmcSecretName } from "./names.js";
import type { NodeName } from "../fleet/node.js";

/** The only reference accepted for `node` in `namespace`. */
export const ownCredentialsRef = (node: NodeName, namespace: string): string => `secret:${namespace}/${bmcSecretName(node)}`;

export function resolveCredentials(ref: string, node: NodeName, namespace: string): SecretRef {
  const colon = ref.indexOf(":");
  const scheme = colon > 0 ? ref.slice(0, colon) : "";
  const own = ownCredentialsRef(node, namespace);
  switch (scheme) {
    case "secret": {
      if (ref !== own) {
        throw new TinkerbellError("credentials-not-own", `${node}: credentials reference ${ref} is not the node's own Secret: only ${own} is accepted (a node's BMC credentials are Secret fleetd-bmc-<node> in the Tinkerbell namespace)`);
      }
      return { namespace, name: bmcSecretName(node) };
    }
    case "env":
    case "file":
      throw new TinkerbellError("credentials-unsupported", `${node}: credentials reference ${scheme}:… is not accepted (fleetd does not read BMC passwords from its environment or files); put username and password in Secret ${namespace}/${bmcSecretName(node)} and reference it as ${own}`);
    case "vault":
      throw new TinkerbellError("credentials-unsupported", `${node}: credentials reference vault: is not supported by this deployment (fleetd has no Vault client); sync the secret into Secret ${namespace}/${bmcSecretName(node)} (e.g. external-secrets) and reference it as ${own}`);
    default:
      throw new TinkerbellError("invalid-input", `${node}: credentials reference has an unknown scheme (accepted: ${own})`);
  }
}
